#!/usr/bin/env bash
# Usage: scripts/lib/one-build.sh
#
# Checks that the builds scripts/test makes share one compiled pgvia (and harness) library:
# the shipped release build with the release-mode tests, and the debug build compat/run makes
# with the debug test build. Dependencies of the tests can turn on features in crates pgvia
# links; cargo then builds pgvia a second time for the tests (minutes in release). The crates
# whose features differ are listed, to add to crates/pgvia/Cargo.toml's feature-unifying
# entries. Needs a nightly toolchain (cargo's --unit-graph): FUZZ_TOOLCHAIN, or the one
# scripts/fuzz pins; without it the check is skipped.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."

toolchain=${FUZZ_TOOLCHAIN:-$(sed -n 's/^toolchain=\${FUZZ_TOOLCHAIN:-\(.*\)}$/\1/p' scripts/fuzz)}
if ! rustup run "$toolchain" cargo --version >/dev/null 2>&1; then
    echo "one-build: no $toolchain toolchain; skipped"
    exit 0
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
graph() {
    local name=$1
    shift
    # Its warnings (the feature-unifying entries are unused, by design) only on failure.
    cargo "+$toolchain" "$@" --unit-graph -Z unstable-options >"$work/$name.json" 2>"$work/$name.err" ||
        { cat "$work/$name.err" >&2; exit 1; }
}
graph shipped build --release -p pgvia -p harness
graph release-tests test --release -p pgvia --test nesting --test robustness --no-run
graph compat build -p pgvia -p harness
graph debug-tests test --workspace --no-run

python3 - "$work" <<'PY'
import json, sys

def closure(path, lib):
    """What each unit of library `lib` is built from: (package, target, features) of it and
    of everything it depends on, transitively."""
    units = json.load(open(path))["units"]
    def key(u):
        return (u["pkg_id"].split("#")[-1], u["target"]["name"], u["mode"], tuple(u["features"]))
    roots = [i for i, u in enumerate(units)
             if u["target"]["name"] == lib and "lib" in u["target"]["kind"] and u["mode"] == "build"]
    seen, todo, keys = set(), list(roots), set()
    while todo:
        i = todo.pop()
        if i in seen:
            continue
        seen.add(i)
        keys.add(key(units[i]))
        todo += [d["index"] for d in units[i]["dependencies"]]
    return keys

work = sys.argv[1]
failed = False
for a, b, libs in [("shipped", "release-tests", ["pgvia"]), ("compat", "debug-tests", ["pgvia", "harness"])]:
    for lib in libs:
        x, y = closure(f"{work}/{a}.json", lib), closure(f"{work}/{b}.json", lib)
        if x == y:
            print(f"one-build: {lib} is built once for the {a} build and the {b}")
            continue
        failed = True
        print(f"one-build: {lib} is built twice, for the {a} build and the {b}; they differ in:")
        for k in sorted(x - y):
            print(f"  {a}: {k[0]} {k[1]} features {list(k[3])}")
        for k in sorted(y - x):
            print(f"  {b}: {k[0]} {k[1]} features {list(k[3])}")
sys.exit(1 if failed else 0)
PY
