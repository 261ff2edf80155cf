"""The soak run behind scripts/soak: starts PostgreSQL and pgvia, drives a mix of clients for
--minutes, reloads pgvia every minute and restarts PostgreSQL every few minutes, samples pgvia's
RSS, descriptors, pools and caches, and judges the run.

Run by scripts/soak with the soak virtualenv's python (psycopg, matplotlib); see that script's
usage for the flags. Exit 0 when the run passed, 1 when it failed (the reasons are printed and
written to the report), 2 on bad arguments.
"""

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import soak_clients  # noqa: E402
import soak_report  # noqa: E402

POOL_SIZE = 20
SAMPLE_EVERY = 5.0


def log(t0, msg):
    el = time.monotonic() - t0
    print(f"[soak {int(el) // 60:3d}m{int(el) % 60:02d}s] {msg}", file=sys.stderr, flush=True)


def free_port():
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def scram_verifier(password):
    """A SCRAM-SHA-256 verifier with one PBKDF2 iteration: the clients' login cost (4,096
    iterations by default, paid again on every connection of the churn workload) would
    otherwise take most of a loaded machine's CPU without telling anything about pgvia."""
    import base64
    import hashlib
    import hmac

    salt = os.urandom(16)
    salted = hashlib.pbkdf2_hmac("sha256", password.encode(), salt, 1)
    ck = hmac.new(salted, b"Client Key", "sha256").digest()
    sk = hmac.new(salted, b"Server Key", "sha256").digest()
    b64 = lambda b: base64.b64encode(b).decode()  # noqa: E731
    return f"SCRAM-SHA-256$1:{b64(salt)}${b64(hashlib.sha256(ck).digest())}:{b64(sk)}"


class Soak:
    def __init__(self, args):
        self.args = args
        self.t0 = time.monotonic()
        self.bin = Path(args.bin_dir)
        self.work = Path(tempfile.mkdtemp(prefix="pgvia-soak.", dir="/var/tmp"))
        os.chmod(self.work, 0o755)  # the postgres account must get in
        self.procs = []
        self.events = soak_clients.Events(self.t0)
        self.stop = threading.Event()
        self.reload_flip = False

    def say(self, msg):
        log(self.t0, msg)

    # ------------------------------------------------------------ processes
    def harness(self, *argv, check=True):
        return subprocess.run([str(self.bin / "pgharness"), *argv], capture_output=True, text=True, check=check)

    def start_postgres(self):
        out = self.harness(
            "start", "--dir", str(self.work / "pg"), "--auth", "scram-sha-256",
            "--max-connections", "200", "--set", "shared_buffers=128MB",
        ).stdout
        self.pg_port = int(next(line for line in out.splitlines() if line.startswith("PGPORT="))[7:])
        for sql in (
            "CREATE ROLE soak LOGIN PASSWORD 'soak'",
            "CREATE ROLE idle LOGIN PASSWORD 'idle'",
            "CREATE DATABASE soak OWNER soak",
        ):
            self.harness("psql", "--dir", str(self.work / "pg"), "-c", sql)
        env = dict(os.environ, PGPASSWORD="soak")
        pgbench = self.harness("bin", "pgbench").stdout.strip()
        self.pgbench = pgbench
        self.psql = self.harness("bin", "psql").stdout.strip()
        subprocess.run(
            [pgbench, "-i", "-q", "-s", "5", f"postgres://soak@127.0.0.1:{self.pg_port}/soak"],
            env=env, capture_output=True, check=True,
        )
        self.direct_dsn = f"host=127.0.0.1 port={self.pg_port} user=soak password=soak dbname=soak"
        soak_clients.create_tables(self.direct_dsn)

    def write_config(self):
        # The key a reload flips: applied at once, harmless to the workload.
        threshold = "10s" if self.reload_flip else "0s"
        self.config.write_text(f"""[general]
listen_addr = "127.0.0.1"
listen_port = {self.port}
log_level = "warn"
log_connections = false
max_client_connections = {self.args.idle + 2000}
metrics_listen = "127.0.0.1:{self.metrics_port}"
slow_query_threshold = "{threshold}"

[pool]
pool_mode = "transaction"
pool_size = {POOL_SIZE}

[limits]
max_pending_logins = 2000
max_pending_logins_per_address = 2000
connections_per_second_per_address = 100000

[[databases]]
name = "soak"
host = "127.0.0.1"
port = {self.pg_port}

[[users]]
name = "soak"
password = "{self.verifier}"
server_password = "soak"

[[users]]
name = "idle"
auth_method = "trust"
server_password = "idle"

[[users]]
name = "admin"
password = "admin"
admin = true
""")

    def start_pgvia(self):
        self.port, self.metrics_port = free_port(), free_port()
        self.verifier = scram_verifier("soak")
        self.config = self.work / "pgvia.toml"
        self.write_config()
        self.pgvia_log = open(self.work / "pgvia.log", "w")
        p = subprocess.Popen([str(self.bin / "pgvia"), "--config", str(self.config)],
                             stdout=self.pgvia_log, stderr=subprocess.STDOUT)
        self.procs.append(p)
        self.pgvia = p
        soak_clients.wait_port(self.port, p, 15)
        soak_clients.wait_port(self.metrics_port, p, 15)
        self.dsn = f"host=127.0.0.1 port={self.port} user=soak password=soak dbname=soak"

    def start_idle(self):
        # Held to just past the end of the load, then the tool says how many pgvia closed.
        hold = int(self.args.minutes * 60) + 15
        p = subprocess.Popen(
            [str(self.bin / "idle-clients"), "--port", str(self.port), "--pid", str(self.pgvia.pid),
             "--count", str(self.args.idle), "--user", "idle", "--database", "soak",
             "--concurrency", "100", "--timeout-secs", "300", "--settle-ms", "500",
             "--hold-secs", str(hold)],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )
        self.procs.append(p)
        self.idle_proc = p
        first = p.stdout.readline().strip()
        fields = dict(kv.split("=", 1) for kv in first.split() if "=" in kv)
        if not fields or int(fields.get("failed", "1")) != 0:
            err = p.stderr.read() if p.poll() is not None else ""
            raise SystemExit(f"soak: idle clients did not all log in: {first!r} {err}")
        self.say(f"{fields['clients']} idle clients logged in ({fields['kib_per_client']} KiB each)")

    # ------------------------------------------------------------ operator actions
    def reload(self):
        self.reload_flip = not self.reload_flip
        self.write_config()
        self.pgvia.send_signal(signal.SIGHUP)
        self.events.mark("reload")
        row = None
        for _ in range(50):
            time.sleep(0.1)
            row = next((r for r in self.admin("SHOW CONFIG") if r and r[0] == "slow_query_threshold"), None)
            if row and (row[1] not in ("0s", "0ns", "0ms", "0")) == self.reload_flip:
                return
        self.events.error("operator", "XX000", f"reload not applied: slow_query_threshold = {row}")

    def restart(self):
        start = time.monotonic()
        self.events.window_open()
        r = self.harness("restart", "--dir", str(self.work / "pg"), check=False)
        if r.returncode != 0:
            self.events.error("operator", None, f"PostgreSQL restart failed: {r.stderr.strip()}")
        self.events.window_close(grace=soak_clients.RESTART_GRACE)
        self.events.mark("restart")
        self.say(f"PostgreSQL restarted in {time.monotonic() - start:.1f} s")

    def admin(self, command):
        r = subprocess.run(
            [self.psql, "-X", "-A", "-t", "-F", "|", "-h", "127.0.0.1", "-p", str(self.port), "-U", "admin",
             "-c", command, "pgvia"],
            env=dict(os.environ, PGPASSWORD="admin", PGCONNECT_TIMEOUT="5"), capture_output=True, text=True,
            timeout=20,
        )
        return [line.split("|") for line in r.stdout.splitlines()]

    # ------------------------------------------------------------ sampling
    def sample(self, writer):
        pid = self.pgvia.pid
        rss = 0
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    rss = int(line.split()[1])
        fds = len(os.listdir(f"/proc/{pid}/fd"))
        m = soak_clients.scrape(self.metrics_port)
        c = self.events.counts()
        writer.write(
            f"{time.monotonic() - self.t0:.1f},{rss},{fds},{m.get('pgvia_client_connections', 0):.0f},"
            f"{m.get('servers', 0):.0f},{m.get('pgvia_prepared_statements', 0):.0f},"
            f"{m.get('pgvia_analysis_cache_entries', 0):.0f},{c['ok']},{c['explained']},{c['unexplained']}\n"
        )
        writer.flush()

    # ------------------------------------------------------------ the run
    def run(self):
        a = self.args
        self.say(f"work dir {self.work}")
        self.start_postgres()
        self.start_pgvia()
        self.say(f"PostgreSQL on {self.pg_port}, pgvia on {self.port} (pid {self.pgvia.pid})")
        self.start_idle()
        duration = a.minutes * 60
        restart_every = a.restart_every * 60 if a.restart_every else max(duration / 2, 60)
        restart_every = min(restart_every, 240)
        workers = soak_clients.start_all(self, duration)
        out = Path(a.out)
        out.mkdir(parents=True, exist_ok=True)
        samples = out / "soak-samples.csv"
        run_start = time.monotonic()
        end = run_start + duration
        next_reload = run_start + 60
        next_restart = run_start + restart_every
        with open(samples, "w") as w:
            w.write("t_s,rss_kib,fds,clients,servers,prepared,analysis_entries,ok,errors_explained,"
                    "errors_unexplained\n")
            while time.monotonic() < end:
                self.sample(w)
                now = time.monotonic()
                if now >= next_reload and now < end - 10:
                    self.reload()
                    next_reload += 60
                if now >= next_restart and now < end - 30:
                    self.restart()
                    next_restart += restart_every
                if self.pgvia.poll() is not None:
                    self.events.error("pgvia", None, f"pgvia exited with {self.pgvia.returncode}")
                    break
                time.sleep(max(0.0, SAMPLE_EVERY - (time.monotonic() - now)))
            # The last sample is the one above: after the workers stop the idle clients leave
            # too, which is not growth or shrinkage of pgvia.
            self.stop.set()
            for t in workers:
                t.join(timeout=30)
        self.check_end(run_start)
        return soak_report.write(self, samples, out, run_start)

    def check_end(self, run_start):
        """After the load: ledger, pools back to idle, no open transaction left on a server."""
        soak_clients.check_ledger(self)
        time.sleep(2)
        # With the load gone every server of the pool is back and idle, none held by a client.
        pools = [r for r in self.admin("SHOW POOLS") if r and r[0] == "soak" and r[1] == "soak"]
        self.pools_at_end = pools
        for r in pools:
            if r[6] != "0":  # sv_active (PgBouncer's column order)
                self.events.error("end", "XX000", f"SHOW POOLS: servers still active after the load: {r}")
        stray = subprocess.run(
            [self.psql, "-X", "-A", "-t", "-h", "127.0.0.1", "-p", str(self.pg_port), "-U", "soak", "-c",
             "SELECT count(*) FROM pg_stat_activity WHERE datname = 'soak' AND state LIKE 'idle in%'", "soak"],
            env=dict(os.environ, PGPASSWORD="soak"), capture_output=True, text=True,
        ).stdout.strip()
        if stray not in ("0", ""):
            self.events.error("end", None, f"{stray} server(s) left idle in transaction")

    def cleanup(self):
        for p in self.procs:
            if p.poll() is None:
                p.terminate()
        for p in self.procs:
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
        self.harness("stop", "--dir", str(self.work / "pg"), check=False)
        if not self.args.keep:
            subprocess.run(["rm", "-rf", str(self.work)])
        else:
            self.say(f"kept {self.work}")


def main():
    p = argparse.ArgumentParser(prog="scripts/soak")
    p.add_argument("--minutes", type=float, default=60)
    p.add_argument("--idle", type=int, default=10000)
    p.add_argument("--restart-every", type=float, default=0, help="minutes (default: min(4, half the run))")
    p.add_argument("--out", required=True)
    p.add_argument("--bin-dir", required=True)
    p.add_argument("--keep", action="store_true")
    a = p.parse_args()
    if a.minutes <= 0 or a.idle < 1:
        p.error("--minutes must be above 0 and --idle at least 1")
    # pgvia and the idle-client tool each hold a descriptor per idle client, plus some.
    import resource

    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and a.idle > soft - 2000:
        log(time.monotonic(), f"the descriptor limit is {soft}: {max(1, soft - 2000)} idle clients, not {a.idle}")
        a.idle = max(1, soft - 2000)
    soak = Soak(a)
    try:
        ok = soak.run()
    finally:
        soak.cleanup()
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
