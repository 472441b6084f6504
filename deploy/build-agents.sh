#!/usr/bin/env bash
# Build the relay agents that `relay` and `relayctl` deploy to hosts, so they run on the hosts
# people have: x86_64 and aarch64 Linux agents that need at most glibc 2.17 (CentOS 7, Ubuntu
# 14.04 and everything newer), built with cargo-zigbuild (zig as the C toolchain and linker,
# linking against glibc 2.17's symbol versions), and static agents (musl, linked in) for hosts
# without glibc (Alpine, busybox, distroless) or with an older one; the deploy picks the static
# agent where its probe finds no glibc. Each target is built when its Rust standard library is
# installed (`rustup target add aarch64-unknown-linux-gnu x86_64-unknown-linux-musl
# aarch64-unknown-linux-musl`; deploy/test.sh adds the first two).
#
#   deploy/build-agents.sh                 # release agents for every target zig can build here
#   deploy/build-agents.sh --debug         # debug profile (faster to build, larger to upload)
#   deploy/build-agents.sh --target T ...  # only these Rust targets
#
# Output: target/agents/relay-agent-<rust target>, e.g. target/agents/relay-agent-x86_64-unknown-linux-gnu
# ($CARGO_TARGET_DIR/agents when that is set, or $RELAY_AGENTS_OUT).
# `relay` and `relayctl` look in <directory of their binary>/../agents first (so target/debug/relay
# and target/release/relay both find target/agents/), after $RELAY_AGENT_DIR.
#
# Needs: `pip install ziglang cargo-zigbuild` (both from PyPI) and, for a target other than this
# machine's, its Rust standard library (`rustup target add T`). The build uses its own cargo target
# dir (target/agents-build), so it never invalidates the regular debug or release builds. Idempotent
# and incremental: a second run without changes takes seconds.
set -euo pipefail

repo_root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
target_dir=${CARGO_TARGET_DIR:-$repo_root/target}
out_dir=${RELAY_AGENTS_OUT:-$target_dir/agents}
build_dir=$target_dir/agents-build
# The glibc floor of the Linux gnu agents (cargo-zigbuild's TARGET.VERSION suffix).
glibc_floor=2.17

log() { printf 'build-agents: %s\n' "$*" >&2; }
die() { printf 'build-agents: error: %s\n' "$*" >&2; exit 1; }

profile=release
targets=()
while [[ $# -gt 0 ]]; do
    case $1 in
        --debug) profile=debug; shift ;;
        --target) targets+=("${2:?--target needs a Rust target triple}"); shift 2 ;;
        --target=*) targets+=("${1#--target=}"); shift ;;
        -h|--help) sed -n '2,22p' "$0"; exit 0 ;;
        *) die "unknown argument $1 (see --help)" ;;
    esac
done

command -v cargo-zigbuild >/dev/null ||
    die "cargo-zigbuild not found: install it and zig with \`pip install ziglang cargo-zigbuild\` (both from PyPI)"
python3 -m ziglang version >/dev/null 2>&1 || command -v zig >/dev/null ||
    die "zig not found: install it with \`pip install ziglang\`"

installed_targets=$(rustup target list --installed 2>/dev/null || rustc -vV | sed -n 's/^host: //p')
if [[ ${#targets[@]} -eq 0 ]]; then
    # Every Linux target whose standard library is installed.
    for t in x86_64-unknown-linux-gnu aarch64-unknown-linux-gnu \
        x86_64-unknown-linux-musl aarch64-unknown-linux-musl; do
        grep -qx "$t" <<<"$installed_targets" && targets+=("$t")
    done
    [[ ${#targets[@]} -gt 0 ]] || die "no Linux target installed (rustup target add x86_64-unknown-linux-gnu)"
fi

# Highest GLIBC_x.y symbol version a binary needs (empty for a static binary).
glibc_needed() {
    command -v readelf >/dev/null || return 0
    readelf -V --wide "$1" 2>/dev/null | grep -o 'GLIBC_[0-9][0-9.]*' | sed 's/GLIBC_//' |
        sort -t. -k1,1n -k2,2n -k3,3n | tail -n 1
}

mkdir -p "$out_dir"
for t in "${targets[@]}"; do
    grep -qx "$t" <<<"$installed_targets" ||
        die "the Rust standard library for $t is not installed (rustup target add $t)"
    zig_target=$t
    [[ $t == *-linux-gnu ]] && zig_target=$t.$glibc_floor
    log "building relay-agent for $zig_target ($profile)"
    profile_args=()
    [[ $profile == release ]] && profile_args=(--release)
    CARGO_TARGET_DIR=$build_dir cargo zigbuild --locked "${profile_args[@]}" \
        -p relay-agent --bin relay-agent --target "$zig_target" >&2
    built=$build_dir/$t/$profile/relay-agent
    [[ -x $built ]] || die "cargo zigbuild did not produce $built"
    if [[ $t == *-linux-musl ]] && command -v readelf >/dev/null &&
        readelf -l "$built" | grep -q 'program interpreter'; then
        die "$built has a program interpreter: a static agent must not need one"
    fi
    # Test pause and fault points (agent/src/pause.rs, fault.rs) exist in debug builds only.
    if [[ $profile == release ]] && grep -qaE 'RELAY_TEST_(PAUSE|FAULT)_AT' "$built"; then
        die "$built holds test pause or fault points: a release agent must not"
    fi
    if [[ $t == *-linux-gnu ]]; then
        needed=$(glibc_needed "$built")
        if [[ -n $needed && $(printf '%s\n%s\n' "$needed" "$glibc_floor" | sort -V | tail -n 1) != "$glibc_floor" ]]; then
            die "$built needs glibc $needed, more than the $glibc_floor floor"
        fi
    fi
    dest=$out_dir/relay-agent-$t
    # Atomic: a relay deploying meanwhile reads either the old file or the new one.
    cp -f "$built" "$dest.tmp.$$"
    mv -f "$dest.tmp.$$" "$dest"
    log "wrote $dest ($(du -h "$dest" | cut -f1), needs glibc ${needed:-none})"
done
