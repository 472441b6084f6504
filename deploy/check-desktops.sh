#!/usr/bin/env bash
# Builds the connector library (and the protocol it speaks), `relay` and `relayctl` for the
# desktops relay's apps ship to besides Linux, and runs what this machine can run of the result:
#
#   - Windows x86_64 (x86_64-pc-windows-gnu): built with cargo-zigbuild; the library's unit tests
#     run under Debian's wine64 (wine 8), then tests/tests/ssh/windows.rs runs relay.exe under
#     wine against the fixture SSH hosts (the Node app's sidecar contract, a piped command, on the
#     Debian, arm64 and glibc-less hosts), and against the glibc-less host from the Windows archive
#     of deploy/bundle.sh, which it makes for Windows and both macOS targets;
#   - macOS arm64 and x86_64 (aarch64-/x86_64-apple-darwin): built only; no Mach-O binary can run
#     here, so nothing macOS-specific is tested. The agent is not built for macOS; checking it for
#     macOS must fail only inside agent/src/sys, its Linux port surface.
#
#   deploy/check-desktops.sh [--build-only]
#
# --build-only: only the builds, the bundles and the wine shim (deploy/test.sh runs that in the
# background early, so the full run later finds everything built).
#
# Needs: `pip install ziglang cargo-zigbuild` (deploy/test.sh installs them), Debian's wine64 for
# the Windows tests, the targets' standard libraries (`rustup target add`, done here), and for
# the relay.exe tests what the ssh tests need (Docker, the fixture images, Node.js; deploy/test.sh
# sets them up first). Builds in its own target dir (target/desktops), so it never invalidates
# the regular builds.
#
# Wine 8 lacks bcryptprimitives.dll!ProcessPrng, which Rust's standard library imports: the shim in
# deploy/fixtures/wine/processprng.c, built here with zig cc, is put next to each test .exe. It is
# test-fixture glue and never shipped.
# Exit status: non-zero when a build or a test fails.
set -euo pipefail
cd "$(dirname "$0")/.."

build_only=false
case "${1:-}" in
    --build-only) build_only=true ;;
    '') ;;
    *) printf 'usage: deploy/check-desktops.sh [--build-only]\n' >&2; exit 2 ;;
esac

target_dir=${CARGO_TARGET_DIR:-$PWD/target}/desktops
windows=x86_64-pc-windows-gnu
macs=(aarch64-apple-darwin x86_64-apple-darwin)
crates=(-p relay-protocol -p relay-connector)
wine=${RELAY_WINE:-/usr/lib/wine/wine64}

log() { printf 'check-desktops: %s\n' "$*" >&2; }
die() { printf 'check-desktops: error: %s\n' "$*" >&2; exit 1; }

command -v cargo-zigbuild >/dev/null ||
    die "cargo-zigbuild not found: install it and zig with \`pip install ziglang cargo-zigbuild\`"
[[ -x $wine ]] || die "$wine not found: install Debian's wine64 (apt-get install wine64)"

installed=$(rustup target list --installed)
for t in "$windows" "${macs[@]}"; do
    grep -qx "$t" <<<"$installed" || rustup target add "$t" >&2
done

for t in "${macs[@]}"; do
    log "building the connector library, relay and relayctl for $t"
    CARGO_TARGET_DIR=$target_dir cargo zigbuild --locked "${crates[@]}" --lib --target "$t"
    CARGO_TARGET_DIR=$target_dir cargo zigbuild --locked -p relay-cli --bins --target "$t"
done

# The agent runs on Linux hosts only; what it asks of Linux sits in agent/src/sys (its module
# docs give the port surface). Checked for macOS, every error must be in there: an error elsewhere
# means Linux-only code leaked out of it.
log "checking that the agent's Linux-only code is all in agent/src/sys (cargo check, ${macs[0]})"
# Any other error (a dependency that does not build, a missing target) fails the check too, so it
# cannot pass without having looked.
leaks=$(CARGO_TARGET_DIR=$target_dir cargo check --locked -p relay-agent --lib --target "${macs[0]}" \
    --message-format=short 2>&1 | grep -E '^([^ ]+:[0-9]+:[0-9]+: )?error' | grep -vE '^agent/src/sys/[^ ]+: error' |
    grep -vE '^error: could not compile `relay-agent` \(lib\)' || true)
[[ -z $leaks ]] || die "Linux-only code outside agent/src/sys (move it there, see agent/src/sys/mod.rs):
$leaks"

log "building relay and relayctl for $windows"
CARGO_TARGET_DIR=$target_dir cargo zigbuild --locked -p relay-cli --bins --target "$windows"
bin_dir=$target_dir/$windows/debug

log "building the connector library and its unit tests for $windows"
# The unit-test executables are the artifacts of the lib targets built with the test profile.
tests=$(CARGO_TARGET_DIR=$target_dir cargo zigbuild --locked "${crates[@]}" --lib --tests \
    --target "$windows" --message-format=json |
    python3 -c '
import json, sys
for line in sys.stdin:
    if not line.startswith("{"):
        continue
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m["target"]["kind"] == ["lib"] \
            and m["profile"]["test"] and m.get("executable"):
        print(m["executable"])
')
[[ -n $tests ]] || die "cargo zigbuild built no unit-test executable for $windows"

shim=$target_dir/wine/bcryptprimitives.dll
mkdir -p "$(dirname "$shim")"
python3 -m ziglang cc -shared -target x86_64-windows-gnu deploy/fixtures/wine/processprng.c \
    -ladvapi32 -o "$shim"

export WINEDEBUG=-all WINEPREFIX=$target_dir/wine/prefix
status=0
while ! $build_only && read -r exe; do
    cp -f "$shim" "$(dirname "$exe")/"
    log "running $(basename "$exe") under wine"
    "$wine" "$exe" || status=1
done <<<"$tests"

log "bundling relay, relayctl and the agents for Windows and macOS (deploy/bundle.sh, debug builds)"
bundles=$target_dir/bundles
bundle_args=(--debug --out "$bundles" --client "$windows")
for t in "${macs[@]}"; do bundle_args+=(--client "$t"); done
bash deploy/bundle.sh "${bundle_args[@]}" >/dev/null
windows_bundle=$(ls "$bundles"/relay-*-"$windows".tar.gz)
if $build_only; then
    log "built; run without --build-only to test"
    exit 0
fi

cp -f "$shim" "$bin_dir/"
log "running relay.exe under wine against the fixture SSH hosts (tests/tests/ssh/windows.rs)"
RELAY_WINDOWS_RELAY=$bin_dir/relay.exe RELAY_WINE=$wine RELAY_WINDOWS_BUNDLE=$windows_bundle \
    cargo test --locked -p relay-tests --test ssh windows:: -- --ignored --test-threads=1 || status=1
exit $status
