#!/usr/bin/env python3
"""Turns one test runner's report into `PASS <id>` / `FAIL <id>` lines, one test a line.

Usage: results.py FORMAT REPORT...
  junit   JUnit XML files (pytest --junitxml, Maven Surefire, node --test-reporter=junit)
  gojson  `go test -json` output
  gotext  the output lines of a `go test -json` report, as `go test -v` would print them
  libtest `cargo test` output (lines `test NAME ... ok|FAILED|ignored`)

A skipped test is reported as FAIL: the suites must not skip anything silently.
Standard library only, so it runs before any suite is installed.
"""

import json
import re
import sys
import xml.etree.ElementTree as ET


def junit(paths):
    for path in paths:
        root = ET.parse(path).getroot()
        for case in root.iter("testcase"):
            classname = case.get("classname") or ""
            name = case.get("name") or "?"
            test_id = f"{classname}.{name}" if classname else name
            bad = any(child.tag in ("failure", "error", "skipped") for child in case)
            yield ("FAIL" if bad else "PASS"), test_id


def gojson(paths):
    for path in paths:
        with open(path, encoding="utf-8", errors="replace") as f:
            for line in f:
                line = line.strip()
                if not line.startswith("{"):
                    continue
                try:
                    event = json.loads(line)
                except json.JSONDecodeError:
                    continue
                test = event.get("Test")
                action = event.get("Action")
                if not test or action not in ("pass", "fail", "skip"):
                    continue
                yield ("PASS" if action == "pass" else "FAIL"), test


def gotext(paths):
    """Not verdicts: the readable output, for the suite's log."""
    for path in paths:
        with open(path, encoding="utf-8", errors="replace") as f:
            for line in f:
                try:
                    event = json.loads(line)
                except json.JSONDecodeError:
                    continue
                if event.get("Action") == "output":
                    print(event.get("Output", ""), end="")


LIBTEST = re.compile(r"^test (\S+) \.\.\. (ok|FAILED|ignored)")


def libtest(paths):
    for path in paths:
        with open(path, encoding="utf-8", errors="replace") as f:
            for line in f:
                m = LIBTEST.match(line)
                if m:
                    yield ("PASS" if m.group(2) == "ok" else "FAIL"), m.group(1)


def main(argv):
    parsers = {"junit": junit, "gojson": gojson, "libtest": libtest}
    if len(argv) >= 3 and argv[1] == "gotext":
        gotext(argv[2:])
        return 0
    if len(argv) < 3 or argv[1] not in parsers:
        print(__doc__, file=sys.stderr)
        return 2
    parse = parsers[argv[1]]
    for verdict, test_id in parse(argv[2:]):
        print(verdict, test_id)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
