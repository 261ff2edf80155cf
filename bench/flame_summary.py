#!/usr/bin/env python3
"""Reads a folded stack file (inferno-collapse-perf --all) and prints what share of the samples
falls under each family of frames (inclusive: a stack counts once per family it touches), then
the heaviest leaf frames. Used by bench/flamegraph.sh so that a profile's reading can quote it."""
import re
import sys
from collections import Counter

# Family name, then a pattern any frame of the stack may match. Order is the print order.
FAMILIES = [
    ("kernel (any frame in the kernel)", r"_\[k\]$"),
    ("  send: sendto/write/writev", r"^(__x64_sys_(sendto|write|writev|sendmsg))_\[k\]$"),
    ("  receive: recvfrom/read", r"^(__x64_sys_(recvfrom|read|readv|recvmsg))_\[k\]$"),
    ("  epoll_wait", r"^__x64_sys_epoll_wait_\[k\]$"),
    ("  epoll_ctl (register/deregister)", r"^__x64_sys_epoll_ctl_\[k\]$"),
    ("  futex (thread park/wake)", r"^__x64_sys_futex_\[k\]$"),
    ("  accept", r"^__x64_sys_accept4?_\[k\]$"),
    ("  connect/socket/close/setsockopt", r"^__x64_sys_(connect|socket|close|setsockopt|getsockopt|shutdown)_\[k\]$"),
    ("  scheduler switch (schedule)", r"^(schedule|__schedule)_\[k\]$"),
    ("tokio runtime (scheduler, park, wake)", r"^tokio::runtime::(scheduler|park|task::(waker|raw|harness))"),
    ("  of which idle park (epoll_wait/futex via the driver)", r"^tokio::runtime::(time::Driver::park_internal|scheduler::multi_thread::park)"),
    ("tokio timers (entries, wheel; not the park)", r"^tokio::time|^tokio::runtime::time::(entry|wheel|source|<impl)"),
    ("allocation (malloc/free/realloc)", r"^(__libc_malloc|malloc|_int_malloc|__libc_free|free|_int_free|cfree|__libc_realloc|realloc|_int_realloc|__libc_calloc|calloc)$"),
    ("SCRAM and hashing (sha2, hmac)", r"scram|sha2::|hmac::|Sha256"),
    ("random numbers (nonces)", r"^(rand|getrandom)::|^getrandom$"),
    ("SQL analysis (route::)", r"^route::"),
    ("pgvia auth::", r"^pgvia::auth::"),
    ("pgvia session startup/login", r"^pgvia::session::(startup|login|welcome)|^pgvia::session::.*::(startup|login|welcome)"),
    ("pgvia relay", r"^pgvia::session::relay|relay::"),
    ("pgvia pool", r"^pgvia::pool::"),
    ("wire:: (protocol parsing, building)", r"^wire::"),
    ("tracing", r"^tracing"),
]


def main(path: str) -> None:
    stacks = []
    total = 0
    for line in open(path, encoding="utf-8", errors="replace"):
        line = line.rstrip("\n")
        if not line:
            continue
        stack, _, count = line.rpartition(" ")
        n = int(count)
        frames = stack.split(";")
        stacks.append((frames, n))
        total += n
    if total == 0:
        print("no samples")
        return
    families = [(name, re.compile(pat)) for name, pat in FAMILIES]
    share = Counter()
    leaves = Counter()
    for frames, n in stacks:
        for name, pat in families:
            if any(pat.search(f) for f in frames):
                share[name] += n
        leaves[frames[-1]] += n
    print(f"samples={total}")
    for name, _ in families:
        print(f"{100 * share[name] / total:6.1f}%  {name}")
    print("heaviest leaf frames:")
    for frame, n in leaves.most_common(12):
        print(f"{100 * n / total:6.1f}%  {frame[:110]}")


if __name__ == "__main__":
    main(sys.argv[1])
