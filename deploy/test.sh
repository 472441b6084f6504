#!/usr/bin/env bash
# The README's test command: sets up what the tests need, then runs them all. CI runs it too
# (.ci/run execs it), on a fresh clone of main, as root, on a fresh Debian machine with a Rust
# toolchain, so what a user runs and what CI runs cannot drift apart.
#
# It installs the Debian packages the tests use, starts a Docker engine, builds the sshd fixture
# images and the portable agents, then checks format and lints, builds and runs the tests, runs
# the desktop builds (deploy/check-desktops.sh), the benchmark smoke and the fuzz smoke, and removes the test containers.
# The desktop and fuzz builds start early in the background, niced (log: target/prebuild.log). apt-get and Docker need
# root: run it as root, or as a user who may use sudo (the fixture scripts use sudo themselves).
# Exit status: a failing set-up, lint or tool-install step stops it with that step's status
# (set -e); otherwise it runs every stage and exits 0 only when the tests, the benchmark smoke and
# the fuzz smoke all passed.
set -euo pipefail
cd "$(dirname "$0")/.."

log() { printf '\n== %s (%s)\n' "$*" "$(date -u +%H:%M:%S)"; }

# apt-get as root: directly when we are root (CI), through sudo otherwise.
as_root=()
if [ "$(id -u)" -ne 0 ]; then
  as_root=(sudo)
fi

log "Debian packages"
need=()
command -v ssh >/dev/null || need+=(openssh-client)
command -v debootstrap >/dev/null || need+=(debootstrap)
{ command -v flock && command -v nsenter; } >/dev/null || need+=(util-linux)
# Fault tests (tests/src/faults.rs) drop packets and abort sockets in a container's netns.
command -v iptables >/dev/null || need+=(iptables)
command -v ss >/dev/null || need+=(iproute2)
# Screen tests (tests/tests/local/screen.rs) run real full-screen programs.
command -v less >/dev/null || need+=(less)
command -v vim >/dev/null || need+=(vim)
# The benchmark smoke's resource baseline is a tmux server (tests/benches/relay_bench/scale.rs).
command -v tmux >/dev/null || need+=(tmux)
# The sidecar's app test is a Node client (tests/clients/node, no packages).
command -v node >/dev/null || need+=(nodejs)
# host_check's unit test compares its ELF reading with binutils' readelf.
command -v readelf >/dev/null || need+=(binutils)
# The fuzz smoke (fuzz/run.sh) builds libFuzzer, which is C++.
command -v c++ >/dev/null || need+=(g++)
# The connector's Windows unit tests run under wine (deploy/check-desktops.sh).
[ -x /usr/lib/wine/wine64 ] || need+=(wine64)
# The arm64 host (tests/tests/ssh/arm64_host.rs) runs its binaries under qemu through binfmt_misc.
[ -x /usr/bin/qemu-aarch64-static ] || need+=(qemu-user-static)
command -v update-binfmts >/dev/null || need+=(binfmt-support)
# The portable agents' toolchain (zig, cargo-zigbuild) comes from PyPI through pip.
command -v cargo-zigbuild >/dev/null || python3 -m pip --version >/dev/null 2>&1 || need+=(python3-pip)
if [ ${#need[@]} -gt 0 ]; then
  "${as_root[@]}" apt-get update -qq
  "${as_root[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}"
fi

log "Toolchains: zig and cargo-zigbuild (README: pip install ziglang cargo-zigbuild), Rust targets, nightly and cargo-fuzz"
if ! command -v cargo-zigbuild >/dev/null; then
  pip_install=(python3 -m pip install --quiet --disable-pip-version-check)
  # Debian's own Python refuses packages outside a virtual environment (PEP 668): then override.
  "${pip_install[@]}" ziglang cargo-zigbuild ||
    "${pip_install[@]}" --break-system-packages ziglang cargo-zigbuild
  # pip puts the cargo-zigbuild script in the interpreter's scripts directory (in the user's
  # when it is not root).
  PATH="$(python3 -c 'import sysconfig; print(sysconfig.get_path("scripts"))'):$PATH"
  PATH="$(python3 -c 'import os, site; print(os.path.join(site.USER_BASE, "bin"))'):$PATH"
  export PATH
fi
# build-agents.sh builds for every Linux target whose standard library is installed: add aarch64's
# so the arm64 host test has its agent, and x86_64 musl's for the static agent the host without
# glibc gets.
for t in aarch64-unknown-linux-gnu x86_64-unknown-linux-musl; do
  rustup target list --installed | grep -x "$t" >/dev/null || rustup target add "$t"
done
rustup run nightly rustc --version >/dev/null 2>&1 || rustup toolchain install nightly --profile minimal
cargo fuzz --version >/dev/null 2>&1 || cargo install cargo-fuzz --locked

log "Desktop and fuzz builds, started in the background (niced; the stages below use them)"
# The longest builds that nothing before their own stages needs: the connector for Windows and
# macOS (deploy/check-desktops.sh --build-only) and the fuzz targets. Built meanwhile at the
# lowest priority, they take the CPU the image builds and the tests leave idle; their stages then
# find them fresh. A failure here costs nothing: those stages build again and report.
mkdir -p target
prebuild_log=$PWD/target/prebuild.log
# Its own process group (setsid), so that an early exit of this script ends every build in it.
setsid -w nice -n 19 bash -c 'bash deploy/check-desktops.sh --build-only &&
  cargo +nightly fuzz build --debug-assertions' >"$prebuild_log" 2>&1 &
prebuild=$!
trap 'kill -- -"$prebuild" 2>/dev/null || true' EXIT

log "Docker engine"
bash deploy/fixtures/ensure-docker.sh

log "Cleaning containers left by earlier test runs"
docker ps -aq --filter label=org.testcontainers.managed-by=testcontainers | xargs -r docker rm -f >/dev/null || true

log "Fixture images (sshd hosts built from Debian packages: bookworm, bullseye for glibc 2.31, arm64 under qemu, one without glibc)"
bash deploy/fixtures/build-images.sh
bash deploy/fixtures/build-images.sh --suite bullseye
bash deploy/fixtures/build-images.sh --arch arm64
bash deploy/fixtures/build-noglibc-image.sh

log "Portable agents (deploy/build-agents.sh)"
bash deploy/build-agents.sh

log "Format and lints"
cargo fmt --all -- --check
cargo clippy --workspace --all-targets --locked -- -D warnings

log "Tests (the README's test command)"
status=0
# A test that needs root, a mountable tmpfs or a high descriptor limit fails without them
# (relay_testkit::skip): this script needs root anyway. RELAY_TESTS_REQUIRE_PRIVILEGED=0 lets
# such a test skip instead, and the skips are listed after the tests.
export RELAY_TESTS_REQUIRE_PRIVILEGED=${RELAY_TESTS_REQUIRE_PRIVILEGED:-1}
export RELAY_TESTS_SKIP_LOG=$PWD/target/skipped-tests.log
rm -f "$RELAY_TESTS_SKIP_LOG"
cargo build --workspace --bins --locked && cargo test --workspace --locked || status=$?
skipped=$(cat "$RELAY_TESTS_SKIP_LOG" 2>/dev/null || true)
if [[ -n $skipped ]]; then
  printf '%s tests checked nothing on this machine:\n%s\n' "$(wc -l <<<"$skipped")" "$skipped"
else
  echo "no test was skipped"
fi

log "Desktops: the connector built for Windows and macOS, its unit tests run under wine"
if ! wait "$prebuild"; then
  echo "the background desktop or fuzz build failed (built again below); its log's end:"
  tail -n 20 "$prebuild_log"
fi
bash deploy/check-desktops.sh || status=1

log "Benchmark smoke: one short round of every scenario, so none rots (docs/performance.md)"
cargo test -p relay-tests --bench relay_bench --locked -- --smoke --all || status=1

log "Fuzz smoke: every target 20 s (docs/fuzzing.md)"
cargo fmt --manifest-path fuzz/Cargo.toml --all -- --check || status=1
fuzz/run.sh --smoke || status=1

log "Cleaning test containers"
docker ps -aq --filter label=org.testcontainers.managed-by=testcontainers | xargs -r docker rm -f >/dev/null || true
exit $status
