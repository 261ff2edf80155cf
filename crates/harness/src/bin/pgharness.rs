//! Command-line front end to the harness, so shell scripts and benchmarks
//! start clusters exactly the way the Rust tests do.
//!
//! ```text
//! pgharness start --dir DIR [--version 15|18] [--port N] [--auth trust|md5|scram-sha-256]
//!                 [--max-connections N] [--ssl] [--set key=value]...
//! pgharness start-replica --primary DIR --dir DIR [--port N] [--set key=value]...
//! pgharness promote --dir DIR
//! pgharness stop   --dir DIR
//! pgharness restart --dir DIR | crash-restart --dir DIR
//! pgharness status --dir DIR
//! pgharness psql   --dir DIR [--db NAME] -c SQL     (-c - reads SQL from stdin)
//! pgharness bin    [--version 15|18] TOOL
//! ```

use std::path::PathBuf;
use std::process::ExitCode;

use harness::{parse_setting, pg_bin, Cluster, ClusterOptions, HarnessError, HbaAuth, PgVersion};

const USAGE: &str = "usage:
  pgharness start --dir DIR [--version 15|18] [--port N] [--auth trust|md5|scram-sha-256]
                  [--max-connections N] [--ssl] [--set key=value]...
      initdb + start a cluster in DIR that outlives this command; prints PGPORT= and PGHOST= lines
  pgharness start-replica --primary DIR --dir DIR [--port N] [--max-connections N] [--set key=value]...
      pg_basebackup -R a hot standby of the running cluster in --primary into DIR and start it
  pgharness promote --dir DIR         promote a standby (pg_ctl promote) and wait until it takes writes
  pgharness stop --dir DIR
  pgharness restart --dir DIR         pg_ctl stop -m fast, then start again on the same port
  pgharness crash-restart --dir DIR   the same with -m immediate (crash recovery at start)
  pgharness status --dir DIR          exit 0 and print PGPORT=/PGHOST= if running, 1 if not
  pgharness psql --dir DIR [--db NAME] -c SQL
                                      run SQL as the superuser over the unix socket (-c -: from stdin)
  pgharness bin [--version 15|18] TOOL
                                      print the path of a PostgreSQL program (pgbench, psql, ...)
--version defaults to $PGVIA_TEST_PG, else 15.";

#[derive(Debug, thiserror::Error)]
enum CliError {
    #[error("{0}\n\n{USAGE}")]
    Usage(String),
    #[error(transparent)]
    Harness(#[from] HarnessError),
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match run(&args) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("pgharness: {e}");
            match e {
                CliError::Usage(_) => ExitCode::from(2),
                CliError::Harness(_) => ExitCode::FAILURE,
            }
        }
    }
}

/// Parsed `--flag value` pairs plus positional words, in order.
#[derive(Default)]
struct Args {
    dir: Option<PathBuf>,
    primary: Option<PathBuf>,
    version: Option<PgVersion>,
    port: Option<u16>,
    auth: Option<HbaAuth>,
    max_connections: Option<u32>,
    ssl: bool,
    settings: Vec<(String, String)>,
    db: Option<String>,
    sql: Option<String>,
    positional: Vec<String>,
}

fn parse(args: &[String]) -> Result<Args, CliError> {
    let mut out = Args::default();
    let mut it = args.iter();
    while let Some(arg) = it.next() {
        let mut value =
            |name: &str| it.next().cloned().ok_or_else(|| CliError::Usage(format!("{name} needs a value")));
        let number = |name: &str, v: String| {
            v.parse::<u32>().map_err(|_| CliError::Usage(format!("{name}: `{v}` is not a number")))
        };
        match arg.as_str() {
            "--dir" => out.dir = Some(PathBuf::from(value("--dir")?)),
            "--primary" => out.primary = Some(PathBuf::from(value("--primary")?)),
            "--version" => out.version = Some(value("--version")?.parse()?),
            "--port" => {
                let n = number("--port", value("--port")?)?;
                out.port =
                    Some(u16::try_from(n).map_err(|_| CliError::Usage(format!("--port {n} out of range")))?);
            }
            "--auth" => out.auth = Some(value("--auth")?.parse()?),
            "--max-connections" => {
                out.max_connections = Some(number("--max-connections", value("--max-connections")?)?)
            }
            "--ssl" => out.ssl = true,
            "--set" => out.settings.push(parse_setting(&value("--set")?)?),
            "--db" => out.db = Some(value("--db")?),
            "-c" | "--command" => out.sql = Some(value("-c")?),
            "-h" | "--help" => return Err(CliError::Usage("help requested".into())),
            flag if flag.starts_with('-') => return Err(CliError::Usage(format!("unknown option {flag}"))),
            word => out.positional.push(word.to_owned()),
        }
    }
    Ok(out)
}

fn run(args: &[String]) -> Result<ExitCode, CliError> {
    let Some((command, rest)) = args.split_first() else {
        return Err(CliError::Usage("missing command".into()));
    };
    let a = parse(rest)?;
    if command != "bin" && !a.positional.is_empty() {
        return Err(CliError::Usage(format!("unexpected argument `{}`", a.positional.join(" "))));
    }
    let dir = || a.dir.clone().ok_or_else(|| CliError::Usage(format!("{command} needs --dir DIR")));
    let version = || -> Result<PgVersion, CliError> {
        match a.version {
            Some(v) => Ok(v),
            None => Ok(PgVersion::try_from_env()?),
        }
    };
    match command.as_str() {
        "start" => {
            let mut opts = ClusterOptions {
                port: a.port,
                dir: Some(dir()?),
                ssl: a.ssl,
                settings: a.settings.clone(),
                ..ClusterOptions::new(version()?)
            };
            if let Some(auth) = a.auth {
                opts.auth = auth;
            }
            if let Some(n) = a.max_connections {
                opts.max_connections = n;
            }
            let cluster = Cluster::start(opts)?;
            print_env(&cluster);
            cluster.detach();
        }
        "start-replica" => {
            let primary_dir = a
                .primary
                .clone()
                .ok_or_else(|| CliError::Usage("start-replica needs --primary DIR".into()))?;
            let primary = Cluster::attach(&primary_dir)?;
            let mut opts = ClusterOptions {
                port: a.port,
                dir: Some(dir()?),
                settings: a.settings.clone(),
                ..ClusterOptions::new(primary.version())
            };
            if let Some(n) = a.max_connections {
                opts.max_connections = n;
            }
            let replica = Cluster::start_replica(&primary, opts)?;
            print_env(&replica);
            replica.detach();
        }
        "promote" => Cluster::attach(&dir()?)?.promote()?,
        "stop" => {
            let cluster = Cluster::attach(&dir()?)?;
            if cluster.is_running() {
                cluster.stop()?;
            } else {
                eprintln!("pgharness: cluster in {} is not running", cluster.dir().display());
            }
        }
        "restart" | "crash-restart" => {
            let cluster = Cluster::attach(&dir()?)?;
            if command == "restart" {
                cluster.stop_fast()?;
            } else {
                cluster.stop_now()?;
            }
            cluster.start_again()?;
        }
        "status" => {
            let cluster = Cluster::attach(&dir()?)?;
            if !cluster.is_running() {
                return Ok(ExitCode::FAILURE);
            }
            print_env(&cluster);
        }
        "psql" => {
            let mut sql = a.sql.clone().ok_or_else(|| CliError::Usage("psql needs -c SQL".into()))?;
            if sql == "-" {
                // Scripts too large for one argument (a data load) come on stdin.
                sql.clear();
                std::io::Read::read_to_string(&mut std::io::stdin(), &mut sql)
                    .map_err(|e| CliError::Usage(format!("cannot read SQL from stdin: {e}")))?;
            }
            let cluster = Cluster::attach(&dir()?)?;
            let out = cluster.psql(a.db.as_deref().unwrap_or("postgres"), &sql)?;
            if !out.is_empty() {
                println!("{out}");
            }
        }
        "bin" => {
            let [tool] = a.positional.as_slice() else {
                return Err(CliError::Usage("bin needs exactly one TOOL".into()));
            };
            println!("{}", pg_bin(version()?, tool)?.display());
        }
        other => return Err(CliError::Usage(format!("unknown command `{other}`"))),
    }
    Ok(ExitCode::SUCCESS)
}

fn print_env(cluster: &Cluster) {
    println!("PGPORT={}", cluster.port());
    println!("PGHOST={}", cluster.host());
}
