"""The soak's clients (scripts/lib/soak.py) and its error book-keeping.

Every workload runs in its own thread until the soak's stop event, reconnecting after an error,
and reports to one `Events`: successes, and errors with their SQLSTATE. An error is *explained*
when it happened while PostgreSQL was being restarted (or within RESTART_GRACE after) and is one
a restart causes: a connection failure or class 08, 57P01-57P03. Anything else is unexplained and
fails the soak.
"""

import re
import socket
import subprocess
import threading
import time
import urllib.request

import psycopg

RESTART_GRACE = 10.0
RESTART_STATES = {None, "57P01", "57P02", "57P03"}
WRITERS = 2
SHAPES = 50


class Events:
    def __init__(self, t0):
        self.t0 = t0
        self.lock = threading.Lock()
        self.ok = 0
        self.errors = []  # (t_from, t_to, source, sqlstate, message)
        self.windows = []  # (from, to) restart windows, seconds since t0
        self.open_since = None
        self.marks = []  # (t, kind)

    def now(self):
        return time.monotonic() - self.t0

    def success(self, n=1):
        with self.lock:
            self.ok += n

    def error(self, source, sqlstate, message, since=None):
        t = self.now()
        with self.lock:
            self.errors.append((t if since is None else since - self.t0, t, source, sqlstate, message[:300]))

    def window_open(self):
        with self.lock:
            self.open_since = self.now()

    def window_close(self, grace):
        with self.lock:
            self.windows.append((self.open_since, self.now() + grace))
            self.open_since = None

    def mark(self, kind):
        with self.lock:
            self.marks.append((self.now(), kind))

    def explained(self, err):
        t_from, t_to, _, state, _ = err
        if not (state in RESTART_STATES or (state or "").startswith("08")):
            return False
        wins = list(self.windows) + ([(self.open_since, 1e18)] if self.open_since is not None else [])
        return any(t_from <= w_to and t_to >= w_from for w_from, w_to in wins)

    def counts(self):
        with self.lock:
            explained = sum(1 for e in self.errors if self.explained(e))
            return {"ok": self.ok, "explained": explained, "unexplained": len(self.errors) - explained}


def wait_port(port, proc, seconds):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"soak: process exited with {proc.returncode} at start")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.1)
    raise SystemExit(f"soak: nothing listens on {port} after {seconds} s")


def scrape(port):
    """The gauges the soak plots, summed over their labels; `servers` sums pgvia_servers."""
    try:
        body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    except OSError:
        return {}
    out = {}
    for line in body.splitlines():
        if line.startswith("#"):
            continue
        m = re.match(r"^([a-z_]+)(\{[^}]*\})?\s+([0-9.eE+-]+)", line)
        if not m:
            continue
        name, value = m.group(1), float(m.group(3))
        if name == "pgvia_servers":
            out["servers"] = out.get("servers", 0) + value
        elif name in ("pgvia_client_connections", "pgvia_prepared_statements", "pgvia_analysis_cache_entries"):
            out[name] = out.get(name, 0) + value
    return out


def create_tables(dsn):
    with psycopg.connect(dsn, autocommit=True) as c:
        c.execute("CREATE TABLE ledger (writer int, seq int, PRIMARY KEY (writer, seq))")
        c.execute("CREATE TABLE copied (batch bigint, n int)")
        c.execute("CREATE TABLE shapes (k int PRIMARY KEY, v text)")
        c.execute("INSERT INTO shapes SELECT g, md5(g::text) FROM generate_series(1, 1000) g")


def sqlstate(e):
    return getattr(e, "sqlstate", None)


def connect(soak, **kw):
    # prepare_threshold=0: every statement is a named server-side prepared statement.
    return psycopg.connect(soak.dsn, connect_timeout=5, prepare_threshold=0, **kw)


def loop(soak, name, body):
    """Runs body(conn) until the stop event, reconnecting (after a pause) on any error."""
    def run():
        conn = None
        while not soak.stop.is_set():
            try:
                if conn is None or conn.closed:
                    conn = connect(soak)
                body(conn)
            except psycopg.Error as e:
                soak.events.error(name, sqlstate(e), f"{type(e).__name__}: {e}")
                try:
                    if conn is not None:
                        conn.close()
                except psycopg.Error:
                    pass
                conn = None
                soak.stop.wait(0.5)
        if conn is not None:
            conn.close()

    t = threading.Thread(target=run, name=name, daemon=True)
    t.start()
    return t


def writer_body(soak, w):
    """A ledger writer: each acknowledged COMMIT is recorded; a failed one is 'unknown'."""
    def body(conn):
        seq = soak.ledger_next[w]
        soak.ledger_next[w] += 1
        try:
            with conn.transaction():
                conn.execute("INSERT INTO ledger VALUES (%s, %s)", (w, seq))
                conn.execute("SELECT count(*) FROM shapes WHERE k <= %s", (seq % 1000,))
        except psycopg.Error:
            soak.ledger_unknown[w].add(seq)
            raise
        soak.ledger_acked[w].add(seq)
        soak.events.success()
    return body


def shapes_body(soak):
    """Prepared statements of SHAPES different texts, over and over: the registry and the
    analysis cache must level off, not grow."""
    state = {"i": 0}

    def body(conn):
        i = state["i"] = state["i"] + 1
        conn.execute(f"SELECT v, {i % SHAPES} AS shape FROM shapes WHERE k = %s", (i % 1000 + 1,)).fetchall()
        conn.commit()
        soak.events.success()
    return body


def copy_body(soak):
    state = {"batch": 0}

    def body(conn):
        state["batch"] += 1
        b = state["batch"]
        with conn.transaction():
            with conn.cursor().copy("COPY copied FROM STDIN") as cp:
                for n in range(500):
                    cp.write_row((b, n))
        with conn.cursor().copy("COPY (SELECT n FROM copied WHERE batch = %s) TO STDOUT", (b,)) as cp:
            rows = sum(1 for _ in cp.rows())
        conn.commit()
        if rows != 500:
            soak.events.error("copy", "XX000", f"batch {b}: copied 500 rows, read back {rows}")
        conn.execute("DELETE FROM copied WHERE batch = %s", (b,))
        conn.commit()
        soak.events.success()
        soak.stop.wait(1)
    return body


def cancel_body(soak):
    def body(conn):
        # A cancel that arrives while the query still waits for a server (after a restart, the
        # pool refills on a loaded machine) finds nothing to cancel and is dropped; more follow.
        # psycopg sends a cancel only while a query is running.
        timers = [threading.Timer(t, conn.cancel_safe) for t in (0.3, 1.5, 3, 5, 8)]
        for t in timers:
            t.start()
        try:
            conn.execute("SELECT pg_sleep(10)")
            conn.commit()
            soak.events.error("cancel", "XX000", "pg_sleep(10) was not cancelled by five cancels")
        except psycopg.errors.QueryCanceled:
            conn.rollback()
            soak.events.success()
        finally:
            for t in timers:
                t.cancel()
        soak.stop.wait(1)
    return body


def listen_thread(soak):
    """LISTEN pins its server in transaction mode; NOTIFYs from another client must arrive while
    the listener is connected (checked at the end against `sent`)."""
    soak.notify_sent = []  # (t, seq)
    soak.notify_got = set()
    soak.listen_up = []  # (from, to) intervals the listener was listening
    ev = soak.events

    def listener():
        while not soak.stop.is_set():
            start = None
            try:
                with psycopg.connect(soak.dsn, autocommit=True, connect_timeout=5) as c:
                    c.execute("LISTEN soak")
                    start = ev.now()
                    while not soak.stop.is_set():
                        for n in c.notifies(timeout=1.0):
                            soak.notify_got.add(int(n.payload))
                    soak.listen_up.append((start, ev.now()))
            except psycopg.Error as e:
                if start is not None:
                    soak.listen_up.append((start, ev.now()))
                ev.error("listen", sqlstate(e), f"{type(e).__name__}: {e}")
                soak.stop.wait(0.5)

    seq = {"n": 0}

    def notify(conn):
        seq["n"] += 1
        conn.execute("SELECT pg_notify('soak', %s)", (str(seq["n"]),))
        conn.commit()
        soak.notify_sent.append((ev.now(), seq["n"]))
        ev.success()
        soak.stop.wait(0.5)

    t = threading.Thread(target=listener, name="listen", daemon=True)
    t.start()
    return [t, loop(soak, "notify", notify)]


def pgbench_thread(soak, name, args, seconds_total):
    """pgbench in runs of 20 s (a restart aborts its clients, so each run is judged alone)."""
    import os

    env = dict(os.environ, PGPASSWORD="soak", PGCONNECT_TIMEOUT="5")

    def run():
        while not soak.stop.is_set():
            since = time.monotonic()
            r = subprocess.run(
                [soak.pgbench, "-n", "-T", "20", *args, "-h", "127.0.0.1", "-p", str(soak.port), "-U", "soak",
                 "soak"], env=env, capture_output=True, text=True,
            )
            m = re.search(r"number of transactions actually processed: (\d+)", r.stdout)
            if m:
                soak.events.success(int(m.group(1)))
            if r.returncode != 0:
                lines = [ln for ln in r.stderr.splitlines() if "error" in ln.lower() or "abort" in ln.lower()]
                detail = lines[0] if lines else r.stderr.strip()[-200:]
                # pgbench words a connection lost mid-command as "perhaps the backend died".
                lost = r"server closed|connection|terminat|shutdown|timed out|backend died"
                state = None if re.search(lost, detail, re.I) else "XX000"
                soak.events.error(name, state, f"exit {r.returncode}: {detail}", since=since)
                soak.stop.wait(1)

    t = threading.Thread(target=run, name=name, daemon=True)
    t.start()
    return t


def start_all(soak, seconds):
    soak.ledger_next = [1] * WRITERS
    soak.ledger_acked = [set() for _ in range(WRITERS)]
    soak.ledger_unknown = [set() for _ in range(WRITERS)]
    threads = [loop(soak, f"writer{w}", writer_body(soak, w)) for w in range(WRITERS)]
    threads.append(loop(soak, "shapes", shapes_body(soak)))
    threads.append(loop(soak, "copy", copy_body(soak)))
    threads.append(loop(soak, "cancel", cancel_body(soak)))
    threads += listen_thread(soak)
    threads.append(pgbench_thread(soak, "pgbench", ["-M", "prepared", "-c", "4", "-j", "1"], seconds))
    threads.append(pgbench_thread(soak, "pgbench-churn", ["-C", "-S", "-M", "simple", "-c", "2", "-j", "1"],
                                  seconds))
    return threads


def check_ledger(soak):
    """Nothing acknowledged lost; nothing the writers never sent present."""
    with psycopg.connect(soak.direct_dsn) as c:
        rows = c.execute("SELECT writer, seq FROM ledger").fetchall()
    have = [set() for _ in range(WRITERS)]
    for w, s in rows:
        have[w].add(s)
    lost = sum(len(soak.ledger_acked[w] - have[w]) for w in range(WRITERS))
    stray = sum(len(have[w] - soak.ledger_acked[w] - soak.ledger_unknown[w]) for w in range(WRITERS))
    unknown_committed = sum(len(have[w] & soak.ledger_unknown[w]) for w in range(WRITERS))
    soak.ledger = {
        "acked": sum(len(a) for a in soak.ledger_acked),
        "unknown": sum(len(u) for u in soak.ledger_unknown),
        "unknown_committed": unknown_committed,
        "lost": lost,
        "stray": stray,
    }
    if lost or stray:
        soak.events.error("ledger", "XX000", f"ledger: {lost} acknowledged rows lost, {stray} stray rows")
    # Notifications: each one sent while the listener was up (from 1 s after it listened to 2 s
    # after the send) must have arrived, except during a restart: pgvia's LISTEN connection is
    # reopened then (the client stays connected), and what was sent in between is lost, as
    # PostgreSQL loses notifications across a restart.
    missed = 0
    for t, n in soak.notify_sent:
        covered = any(a + 1 <= t and t + 2 <= b for a, b in soak.listen_up)
        covered = covered and not any(w0 - 2 <= t <= w1 for w0, w1 in soak.events.windows)
        if covered and n not in soak.notify_got:
            missed += 1
    soak.notify = {"sent": len(soak.notify_sent), "received": len(soak.notify_got), "missed": missed}
    if missed:
        soak.events.error("listen", "XX000", f"{missed} notifications sent while listening never arrived")
