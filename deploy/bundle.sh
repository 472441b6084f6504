#!/usr/bin/env bash
# Make what an app ships: per desktop platform, one archive holding `relay`, `relayctl` and the
# agents for every host target, with SHA-256 sums.
#
#   deploy/bundle.sh                                   # this machine's desktop platform, release
#   deploy/bundle.sh --client x86_64-pc-windows-gnu --client aarch64-apple-darwin
#   deploy/bundle.sh --debug                           # debug builds of relay and relayctl
#   deploy/bundle.sh --out DIR                         # default: target/bundles
#
# Clients: x86_64-unknown-linux-gnu (built for glibc 2.17, like the agents), x86_64-pc-windows-gnu,
# aarch64-apple-darwin, x86_64-apple-darwin; each built with cargo-zigbuild in target/desktops
# (the directory deploy/check-desktops.sh builds in, so a bundle after it reuses its builds).
# The agents are those deploy/build-agents.sh builds (release; every Linux target whose Rust
# standard library is installed: gnu for glibc >= 2.17 hosts, musl for hosts without glibc).
#
# Output in DIR, per client T: relay-<version>-<T>.tar.gz (Windows has tar since Windows 10) and
# relay-<version>-<T>.tar.gz.sha256, unpacking to
#
#   relay-<version>-<T>/bin/relay[.exe], bin/relayctl[.exe]
#   relay-<version>-<T>/agents/relay-agent-<host target>...
#   relay-<version>-<T>/SHA256SUMS                     # `sha256sum -c SHA256SUMS` checks them
#
# `relay` (and `relay serve --stdio`) finds the agents in <its directory>/../agents with no
# setting, as it finds target/agents from target/debug/relay; agents kept elsewhere are named by
# RELAY_AGENT_DIR, or with `AgentSource::Dir` by an app embedding the library (docs/embedding.md).
# Needs what build-agents.sh needs (pip install ziglang cargo-zigbuild) and each client's Rust
# standard library (`rustup target add T`, done here).
set -euo pipefail

repo_root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$repo_root"
target_dir=${CARGO_TARGET_DIR:-$repo_root/target}
build_dir=$target_dir/desktops
out_dir=$target_dir/bundles
glibc_floor=2.17

log() { printf 'bundle: %s\n' "$*" >&2; }
die() { printf 'bundle: error: %s\n' "$*" >&2; exit 1; }

profile=release
clients=()
while [[ $# -gt 0 ]]; do
    case $1 in
        --debug) profile=debug; shift ;;
        --client) clients+=("${2:?--client needs a Rust target triple}"); shift 2 ;;
        --client=*) clients+=("${1#--client=}"); shift ;;
        --out) out_dir=${2:?--out needs a directory}; shift 2 ;;
        --out=*) out_dir=${1#--out=}; shift ;;
        -h|--help) sed -n '2,27p' "$0"; exit 0 ;;
        *) die "unknown argument $1 (see --help)" ;;
    esac
done
if [[ ${#clients[@]} -eq 0 ]]; then
    case $(uname -sm) in
        "Linux x86_64") clients=(x86_64-unknown-linux-gnu) ;;
        *) die "no default client for $(uname -sm): name one with --client" ;;
    esac
fi
for c in "${clients[@]}"; do
    case $c in
        x86_64-unknown-linux-gnu|x86_64-pc-windows-gnu|aarch64-apple-darwin|x86_64-apple-darwin) ;;
        *) die "unknown client $c (x86_64-unknown-linux-gnu, x86_64-pc-windows-gnu, aarch64-apple-darwin, x86_64-apple-darwin)" ;;
    esac
done
command -v cargo-zigbuild >/dev/null ||
    die "cargo-zigbuild not found: install it and zig with \`pip install ziglang cargo-zigbuild\`"

version=$(sed -n 's/^version = "\(.*\)"$/\1/p' Cargo.toml | head -n 1)
[[ -n $version ]] || die "no version in Cargo.toml"

log "building the agents (deploy/build-agents.sh)"
agents_dir=$(mktemp -d "${TMPDIR:-/tmp}/relay-bundle-agents.XXXXXX")
trap 'rm -rf "$agents_dir"' EXIT
RELAY_AGENTS_OUT=$agents_dir bash deploy/build-agents.sh
ls "$agents_dir"/relay-agent-* >/dev/null 2>&1 || die "build-agents.sh built no agent"

installed=$(rustup target list --installed)
mkdir -p "$out_dir"
for c in "${clients[@]}"; do
    grep -qx "$c" <<<"$installed" || rustup target add "$c" >&2
    zig_target=$c
    [[ $c == *-linux-gnu ]] && zig_target=$c.$glibc_floor
    profile_args=()
    [[ $profile == release ]] && profile_args=(--release)
    log "building relay and relayctl for $zig_target ($profile)"
    CARGO_TARGET_DIR=$build_dir cargo zigbuild --locked "${profile_args[@]}" -p relay-cli --bins \
        --target "$zig_target" >&2
    exe=
    [[ $c == *-windows-* ]] && exe=.exe
    name=relay-$version-$c
    stage=$(mktemp -d "$out_dir/.stage.XXXXXX")
    mkdir -p "$stage/$name/bin" "$stage/$name/agents"
    for b in relay relayctl; do
        cp "$build_dir/$c/$profile/$b$exe" "$stage/$name/bin/"
    done
    cp "$agents_dir"/relay-agent-* "$stage/$name/agents/"
    (cd "$stage/$name" && find bin agents -type f | LC_ALL=C sort | xargs sha256sum >SHA256SUMS)
    tar -C "$stage" -czf "$stage/$name.tar.gz" "$name"
    (cd "$stage" && sha256sum "$name.tar.gz" >"$name.tar.gz.sha256")
    mv -f "$stage/$name.tar.gz" "$stage/$name.tar.gz.sha256" "$out_dir/"
    rm -rf "$stage"
    log "wrote $out_dir/$name.tar.gz ($(du -h "$out_dir/$name.tar.gz" | cut -f1)): $(cd "$out_dir" && tar -tzf "$name.tar.gz" | grep -c -v '/$') files"
    echo "$out_dir/$name.tar.gz"
done
