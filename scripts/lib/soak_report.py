"""The soak's verdict, errors per minute, charts and report (scripts/lib/soak.py).

Growth is judged after a warm-up (a fifth of the run, at least one minute, at most ten): the
mean over the minute after the warm-up is the baseline, the mean over the run's last minute
(the last half minute in runs under five minutes) is compared with it. RSS or descriptors more
than GROWTH_LIMIT above the baseline, or any unexplained error, fail the run.
"""

import csv
import time
from pathlib import Path

GROWTH_LIMIT = 0.05


def load(samples):
    with open(samples) as f:
        return [{k: float(v) for k, v in row.items()} for row in csv.DictReader(f)]


def mean(xs):
    return sum(xs) / len(xs) if xs else float("nan")


def windows(rows, run_start_s, duration):
    warm = min(max(60.0, duration / 5), 600.0)
    base_from = run_start_s + warm
    tail = 60.0 if duration >= 300 else 30.0
    end = rows[-1]["t_s"]
    base = [r for r in rows if base_from <= r["t_s"] < base_from + min(60.0, tail * 2)]
    last = [r for r in rows if r["t_s"] >= end - tail]
    return warm, base, last


def per_minute(soak, run_start_s):
    """(minute, ok, explained, unexplained) from the event log, minute 0 = the run's start."""
    ev = soak.events
    by = {}
    for err in ev.errors:
        m = int(max(0.0, err[1] - run_start_s) // 60)
        k = by.setdefault(m, [0, 0])
        k[0 if ev.explained(err) else 1] += 1
    return by


def plot(rows, marks, run_start_s, by_minute, out):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    t = [(r["t_s"] - run_start_s) / 60 for r in rows]

    def events(ax):
        for when, kind in marks:
            x = (when - run_start_s) / 60
            if kind == "restart":
                ax.axvline(x, color="tab:red", ls="--", lw=0.8)
            else:
                ax.axvline(x, color="grey", ls=":", lw=0.5)

    fig, (a1, a2) = plt.subplots(2, 1, figsize=(9, 6), sharex=True)
    a1.plot(t, [r["rss_kib"] / 1024 for r in rows], color="tab:blue")
    a1.set_ylabel("pgvia RSS (MiB)")
    a1.set_ylim(bottom=0)
    a2.plot(t, [r["fds"] for r in rows], color="tab:green")
    a2.set_ylabel("open descriptors")
    a2.set_ylim(bottom=0)
    a2.set_xlabel("minutes (red dashed: PostgreSQL restart, grey dotted: reload)")
    for a in (a1, a2):
        events(a)
        a.grid(alpha=0.3)
    fig.suptitle("pgvia soak: memory and descriptors")
    fig.tight_layout()
    fig.savefig(out / "soak-rss-fds.png", dpi=90)
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(9, 4))
    for key, label in (("servers", "server connections"), ("prepared", "prepared statements (registry)"),
                       ("analysis_entries", "analysis cache entries")):
        ax.plot(t, [r[key] for r in rows], label=label)
    ax.set_xlabel("minutes")
    ax.set_ylim(bottom=0)
    events(ax)
    ax.legend(loc="upper left")
    ax.grid(alpha=0.3)
    ax.set_title("pools and caches (clients: %d at the end)" % rows[-1]["clients"])
    fig.tight_layout()
    fig.savefig(out / "soak-pools.png", dpi=90)
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(9, 3.5))
    mins = range(int(max(t)) + 1)
    ax.bar(mins, [by_minute.get(m, [0, 0])[0] for m in mins], color="tab:orange",
           label="explained (during a restart)")
    ax.bar(mins, [by_minute.get(m, [0, 0])[1] for m in mins], bottom=[by_minute.get(m, [0, 0])[0] for m in mins],
           color="tab:red", label="unexplained")
    ax.set_xlabel("minute")
    ax.set_ylabel("client errors")
    ax.legend(loc="upper left")
    ax.grid(alpha=0.3, axis="y")
    fig.tight_layout()
    fig.savefig(out / "soak-errors.png", dpi=90)
    plt.close(fig)


def write(soak, samples, out, run_start):
    rows = load(samples)
    run_start_s = run_start - soak.t0
    duration = soak.args.minutes * 60
    warm, base, last = windows(rows, run_start_s, duration)
    problems = []
    growth = {}
    for key in ("rss_kib", "fds"):
        b, l_ = mean([r[key] for r in base]), mean([r[key] for r in last])
        growth[key] = (b, l_, (l_ - b) / b if b else float("nan"))
        if not base or not last:
            problems.append(f"too few samples to judge {key} growth")
        elif growth[key][2] > GROWTH_LIMIT:
            problems.append(f"{key} grew {growth[key][2] * 100:.1f}% after warm-up ({b:.0f} -> {l_:.0f})")
    ev = soak.events
    unexplained = [e for e in ev.errors if not ev.explained(e)]
    explained = len(ev.errors) - len(unexplained)
    for e in unexplained[:20]:
        problems.append(f"unexplained error at {e[1] - run_start_s:.0f} s from {e[2]} ({e[3]}): {e[4]}")
    if len(unexplained) > 20:
        problems.append(f"... and {len(unexplained) - 20} more unexplained errors")
    idle_line = ""
    try:
        soak.idle_proc.wait(timeout=90)
        idle_line = soak.idle_proc.stdout.read().strip()
    except Exception as e:  # noqa: BLE001 - reported, not fatal to the report
        idle_line = f"(idle clients did not report: {e})"
    # pgvia's side of the idle clients: its client count must never fall below them.
    fewest = min(r["clients"] for r in rows if r["t_s"] >= run_start_s)
    if fewest < soak.args.idle:
        problems.append(f"pgvia counted {fewest:.0f} clients at one point, fewer than the {soak.args.idle} idle ones")
    if "closed_by_peer=" in idle_line and "closed_by_peer=0" not in idle_line:
        problems.append(f"idle clients were closed by pgvia: {idle_line}")

    by_minute = per_minute(soak, run_start_s)
    with open(out / "soak-errors.csv", "w") as f:
        f.write("minute,explained,unexplained\n")
        for m in range(int(duration // 60) + 1):
            e, u = by_minute.get(m, [0, 0])
            f.write(f"{m},{e},{u}\n")
    plot(rows, ev.marks, run_start_s, by_minute, out)

    restarts = sum(1 for _, k in ev.marks if k == "restart")
    reloads = sum(1 for _, k in ev.marks if k == "reload")
    ok = not problems
    lines = [
        f"# Soak: {soak.args.minutes:g} minutes, {soak.args.idle} idle clients",
        "",
        f"Run at {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; load average at the end "
        f"{open('/proc/loadavg').read().split()[0]} on {__import__('os').cpu_count()} CPUs.",
        "",
        f"**{'PASSED' if ok else 'FAILED'}**",
        "",
        "| figure | value |",
        "|---|---|",
        f"| warm-up | {warm:.0f} s |",
        f"| RSS, minute after warm-up -> last {'minute' if duration >= 300 else 'half minute'} | "
        f"{growth['rss_kib'][0] / 1024:.1f} MiB -> {growth['rss_kib'][1] / 1024:.1f} MiB "
        f"({growth['rss_kib'][2] * 100:+.1f}%) |",
        f"| descriptors, same windows | {growth['fds'][0]:.0f} -> {growth['fds'][1]:.0f} "
        f"({growth['fds'][2] * 100:+.1f}%) |",
        f"| RSS peak | {max(r['rss_kib'] for r in rows) / 1024:.1f} MiB |",
        f"| successful operations (transactions, statements, COPYs, cancels, notifies) | {ev.ok} |",
        f"| client errors during restarts (explained) | {explained} |",
        f"| unexplained errors | {len(unexplained)} |",
        f"| PostgreSQL restarts / pgvia reloads | {restarts} / {reloads} |",
        f"| ledger: acknowledged commits, lost, uncertain (of which committed), stray | "
        f"{soak.ledger['acked']}, {soak.ledger['lost']}, {soak.ledger['unknown']} "
        f"({soak.ledger['unknown_committed']}), {soak.ledger['stray']} |",
        f"| notifications sent / received / missed while listening | {soak.notify['sent']} / "
        f"{soak.notify['received']} / {soak.notify['missed']} |",
        f"| prepared statements / analysis cache entries at the end | {rows[-1]['prepared']:.0f} / "
        f"{rows[-1]['analysis_entries']:.0f} |",
        f"| idle clients at the end | {idle_line or 'n/a'} |",
        "",
    ]
    if problems:
        lines += ["Problems:", ""] + [f"- {p}" for p in problems] + [""]
    explained_kinds = {}
    for e in ev.errors:
        if ev.explained(e):
            key = f"{e[2]} {e[3] or 'no SQLSTATE'}"
            explained_kinds[key] = explained_kinds.get(key, 0) + 1
    if explained_kinds:
        lines += ["Errors during restarts, by client and SQLSTATE: " +
                  ", ".join(f"{k}: {v}" for k, v in sorted(explained_kinds.items())), ""]
    (out / "soak-report.md").write_text("\n".join(lines))
    print("\n".join(lines))
    return ok
