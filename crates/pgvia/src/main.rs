//! The `pgvia` command: run the proxy, check a configuration file, or import PgBouncer's.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use pgvia::config::Config;
use pgvia::Proxy;

#[derive(Parser)]
#[command(name = "pgvia", version, about = "A PostgreSQL connection pooler and proxy")]
struct Cli {
    /// Configuration file (TOML).
    #[arg(long, short, global = true, default_value = "pgvia.toml")]
    config: PathBuf,
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Subcommand)]
enum Command {
    /// Validate the configuration file and print every problem with its key path.
    Check,
    /// Write a pgvia configuration equivalent to a PgBouncer one, and list what it leaves out.
    ImportPgbouncer {
        /// PgBouncer's configuration file.
        ini: PathBuf,
        /// Its user list; default: the file's `auth_file`, if readable.
        userlist: Option<PathBuf>,
        /// Where to write the TOML; default: standard output.
        #[arg(long, short)]
        output: Option<PathBuf>,
    },
    /// Print which shards a statement goes to and why, from the configuration alone.
    Route {
        /// The statement (a simple query, or with --param an extended-protocol one).
        sql: String,
        /// The sharded database; default: the only one.
        #[arg(long, short)]
        database: Option<String>,
        /// A parameter value ($1, $2, ... in order) in text format; `NULL` for NULL.
        #[arg(long = "param", short)]
        params: Vec<String>,
        /// Parameter type oids as a Parse declares them, comma-separated (20 = bigint).
        #[arg(long, value_delimiter = ',')]
        types: Vec<u32>,
        /// The session's search_path.
        #[arg(long, default_value = "\"$user\", public")]
        search_path: String,
    },
}

/// Exit code for a configuration pgvia refuses to start with.
const EXIT_BAD_CONFIG: u8 = 2;

fn main() -> ExitCode {
    let cli = Cli::parse();
    match &cli.command {
        Some(Command::Check) => return pgvia::config::check_command(&cli.config),
        Some(Command::ImportPgbouncer { ini, userlist, output }) => {
            return pgvia::import::command(ini, userlist.as_deref(), output.as_deref());
        }
        Some(Command::Route { sql, database, params, types, search_path }) => {
            let request = pgvia::sharding::cli::RouteRequest {
                database: database.clone(),
                params: (!params.is_empty() || !types.is_empty())
                    .then(|| params.iter().map(|p| (p != "NULL").then(|| p.clone())).collect()),
                param_types: types.clone(),
                search_path: search_path.clone(),
                sql: sql.clone(),
            };
            return pgvia::sharding::cli::command(&cli.config, &request);
        }
        None => {}
    }
    let config = match Config::load(&cli.config) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("pgvia: refusing to start with an invalid configuration:\n{e}");
            return ExitCode::from(EXIT_BAD_CONFIG);
        }
    };
    pgvia::logging::init(&config.general.log_level, config.general.log_format);
    pgvia::fdlimit::raise_and_log(&config);
    let served = pgvia::app::block_on(&config.clone(), move || async move {
        let proxy = match Proxy::bind(config).await {
            Ok(p) => p,
            Err(e) => {
                tracing::error!(error = %e, "cannot start");
                return ExitCode::FAILURE;
            }
        };
        match proxy.local_addr() {
            Ok(addr) => tracing::info!(%addr, "pgvia listening"),
            Err(e) => tracing::warn!(error = %e, "listening, address unknown"),
        }
        tokio::spawn(reload_on_sighup(std::sync::Arc::downgrade(proxy.app())));
        // The accept loop runs as a task on a runtime worker rather than in `block_on` on the
        // main thread: a session spawned from a worker starts in that worker's own queue,
        // where a spawn from outside the workers goes through the shared queue and wakes a
        // worker thread (a futex call and a thread switch per login). Per core, the
        // task runs on this same thread.
        match tokio::spawn(proxy.run(stop_signal())).await {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                tracing::error!(error = %e, "the accept loop ended abnormally");
                ExitCode::FAILURE
            }
        }
    });
    served.unwrap_or_else(|e| {
        eprintln!("pgvia: cannot start the runtime: {e}");
        ExitCode::FAILURE
    })
}

/// Completes on SIGTERM or SIGINT.
async fn stop_signal() {
    use tokio::signal::unix::{signal, SignalKind};
    let (Ok(mut term), Ok(mut int)) = (signal(SignalKind::terminate()), signal(SignalKind::interrupt()))
    else {
        tracing::error!("cannot install signal handlers; stop pgvia with SIGKILL");
        return std::future::pending().await;
    };
    tokio::select! {
        _ = term.recv() => tracing::info!("SIGTERM received"),
        _ = int.recv() => tracing::info!("SIGINT received"),
    }
}

/// Reloads the configuration on each SIGHUP.
async fn reload_on_sighup(app: std::sync::Weak<pgvia::app::App>) {
    use tokio::signal::unix::{signal, SignalKind};
    let Ok(mut hup) = signal(SignalKind::hangup()) else {
        tracing::error!("cannot install the SIGHUP handler; reload with the admin console's RELOAD");
        return;
    };
    while hup.recv().await.is_some() {
        let Some(app) = app.upgrade() else { return };
        tracing::info!("SIGHUP received: reloading the configuration");
        // Errors are logged by reload itself; the running configuration stays.
        let _ = pgvia::reload::reload(&app).await;
    }
}
