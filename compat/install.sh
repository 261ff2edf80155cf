#!/usr/bin/env bash
# Usage: compat/install.sh [python|go|java|node|rust]...   (no argument: all five)
#
# Installs what the driver compatibility suites need on a Debian 12 machine (as root), and
# only what is missing: a warm run is a few cheap checks. Each suite's dependencies are
# pinned in its own directory (requirements.txt, go.sum, pom.xml, package-lock.json,
# Cargo.lock); a stamp file holding the hash of that pin file tells whether the installed
# copy is current.
#   python: a virtualenv in compat/python/.venv with psycopg 3, asyncpg and pytest (PyPI)
#   go:     the modules of compat/go downloaded into Go's module cache
#   java:   Maven's plugins and pgjdbc + JUnit in ~/.m2, resolved by compiling the tests
#   node:   compat/node/node_modules from package-lock.json (npm ci)
#   rust:   compat/rust's crates fetched (they are built by the run itself)
# The language toolchains themselves (python3, go, java + mvn, node + npm, cargo) come
# from Debian's packages when missing, except Go and Rust, which must be new enough
# already (Debian 12's are too old for pgx v5 and sqlx).
set -euo pipefail
compat=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

log() { printf 'compat/install: %s\n' "$*" >&2; }

apt_updated=
apt_install() {
    log "installing Debian packages: $*"
    if [[ -z $apt_updated ]]; then
        apt-get update -qq
        apt_updated=1
    fi
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@" >/dev/null
}

# True when the stamp in $1 records the hash of the files $2...
stamp_current() {
    local stamp=$1
    shift
    [[ -f $stamp ]] && [[ $(cat "$stamp") == "$(cat "$@" | sha256sum)" ]]
}
stamp_write() {
    local stamp=$1
    shift
    cat "$@" | sha256sum >"$stamp"
}

install_python() {
    local dir=$compat/python venv=$compat/python/.venv
    command -v python3 >/dev/null || apt_install python3 python3-venv
    if stamp_current "$venv/.installed" "$dir/requirements.txt"; then return 0; fi
    log "python: creating $venv"
    rm -rf "$venv"
    # Debian's python3 needs python3-venv for ensurepip; pyenv's has it built in.
    python3 -m venv "$venv" 2>/dev/null || { apt_install python3-venv && python3 -m venv "$venv"; }
    PIP_DISABLE_PIP_VERSION_CHECK=1 "$venv/bin/pip" install -q -r "$dir/requirements.txt"
    stamp_write "$venv/.installed" "$dir/requirements.txt"
}

install_go() {
    local dir=$compat/go
    if ! command -v go >/dev/null; then
        log "go: not found; install Go 1.23 or newer (Debian 12's golang-go is too old for pgx v5)"
        return 1
    fi
    local stamp
    stamp="$(go env GOMODCACHE)/.pgvia-compat-installed"
    if stamp_current "$stamp" "$dir/go.sum"; then return 0; fi
    log "go: downloading modules"
    (cd "$dir" && go mod download && go test -count=1 -run '^$' ./... >/dev/null)
    stamp_write "$stamp" "$dir/go.sum"
}

install_java() {
    local dir=$compat/java
    command -v javac >/dev/null || apt_install openjdk-17-jdk-headless
    command -v mvn >/dev/null || apt_install maven
    local stamp=$HOME/.m2/.pgvia-compat-installed
    if stamp_current "$stamp" "$dir/pom.xml"; then return 0; fi
    log "java: resolving Maven plugins and dependencies"
    # Running no test still resolves everything a test run needs, Surefire's JUnit provider too.
    (cd "$dir" && mvn -B -q test -Dtest=NoSuchTest -Dsurefire.failIfNoSpecifiedTests=false >/dev/null)
    mkdir -p "$(dirname "$stamp")"
    stamp_write "$stamp" "$dir/pom.xml"
}

install_node() {
    local dir=$compat/node
    command -v npm >/dev/null || apt_install nodejs npm
    if stamp_current "$dir/node_modules/.pgvia-compat-installed" "$dir/package-lock.json"; then return 0; fi
    log "node: npm ci"
    (cd "$dir" && npm ci --no-audit --no-fund --loglevel=error >/dev/null)
    stamp_write "$dir/node_modules/.pgvia-compat-installed" "$dir/package-lock.json"
}

install_rust() {
    [[ -d $HOME/.cargo/bin && :$PATH: != *":$HOME/.cargo/bin:"* ]] && export PATH="$HOME/.cargo/bin:$PATH"
    command -v cargo >/dev/null || { log "rust: cargo not found; install Rust with rustup"; return 1; }
    (cd "$compat/rust" && cargo fetch --locked -q)
    # Building is part of each run, incremental after the first.
}

suites=("$@")
((${#suites[@]} > 0)) || suites=(python go java node rust)
for s in "${suites[@]}"; do
    case $s in
        python | go | java | node | rust) "install_$s" ;;
        *) log "unknown suite $s"; exit 2 ;;
    esac
done
