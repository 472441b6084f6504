#!/usr/bin/env bash
# Runs every fuzz target (or the ones named) for a set time, one after the other, each as a
# single niced libFuzzer process; prints the executions per target and in total. Exits non-zero
# when a target found a crash, naming the reproducer (fuzz/artifacts/TARGET/crash-*).
#
#   fuzz/run.sh [SECONDS] [TARGET...]   SECONDS per target (default 300)
#   fuzz/run.sh --smoke [TARGET...]     20 s per target, for CI
#
# Needs the nightly toolchain and cargo-fuzz (`cargo install cargo-fuzz`). Seeds are rebuilt from
# the golden vectors (protocol/tests) into fuzz/seeds/ on every run, and fuzz/regressions/TARGET/
# (inputs that once failed, or crash-*/timeout-* reproducers) is replayed too; what libFuzzer
# finds grows fuzz/corpus/TARGET/. Logs: fuzz/logs/TARGET.log. Set CARGO_TARGET_DIR to build
# elsewhere than fuzz/target. See docs/fuzzing.md.
set -euo pipefail

usage() {
  sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//' >&2
  exit 2
}

seconds=300
smoke_flags=()
case "${1:-}" in
  # The smoke guards against crashes and hangs; leak reports (one open finding in the agent
  # target, docs/fuzzing.md) are for the long runs, not a CI gate.
  --smoke) seconds=20; smoke_flags=(-detect_leaks=0); shift ;;
  -h | --help) usage ;;
  '' | *[!0-9]*) ;;
  *) seconds=$1; shift ;;
esac
all=(frame message body agent)
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=("${all[@]}")
for t in "${targets[@]}"; do
  [[ " ${all[*]} " == *" $t "* ]] || { echo "unknown target $t (targets: ${all[*]})" >&2; exit 2; }
done

cd "$(dirname "$0")/.."
if ! rustup run nightly rustc --version >/dev/null 2>&1; then
  echo "the nightly toolchain is missing: rustup toolchain install nightly --profile minimal" >&2
  exit 1
fi
if ! cargo fuzz --version >/dev/null 2>&1; then
  echo "cargo-fuzz is missing: cargo install cargo-fuzz --locked" >&2
  exit 1
fi

# -a: debug assertions (overflow checks) in every crate; the default sanitizer is address.
fuzz_flags=(--debug-assertions)
echo "== seeds from the golden vectors"
rm -rf fuzz/seeds
nice -n 10 cargo run -q --manifest-path fuzz/Cargo.toml -p relay-fuzz-inputs --bin seeds -- fuzz/seeds
mkdir -p fuzz/logs
echo "== build ($(rustup run nightly rustc --version); log: fuzz/logs/build.log)"
if ! nice -n 10 cargo +nightly fuzz build "${fuzz_flags[@]}" >fuzz/logs/build.log 2>&1; then
  tail -n 30 fuzz/logs/build.log >&2
  exit 1
fi

total=0
crashes=()
declare -A execs
for t in "${targets[@]}"; do
  mkdir -p "fuzz/corpus/$t" "fuzz/artifacts/$t"
  log="fuzz/logs/$t.log"
  echo "== $t: ${seconds}s (log: $log)"
  status=0
  # One job, niced: the machines this runs on are shared with builders.
  dirs=("fuzz/corpus/$t" "fuzz/seeds/$t")
  # Inputs that once failed (committed), replayed first by every run.
  [ -d "fuzz/regressions/$t" ] && dirs+=("fuzz/regressions/$t")
  nice -n 10 cargo +nightly fuzz run "${fuzz_flags[@]}" "$t" "${dirs[@]}" -- \
    -max_total_time="$seconds" -timeout=60 -rss_limit_mb=4096 -print_final_stats=1 "${smoke_flags[@]}" \
    >"$log" 2>&1 || status=$?
  n=$(grep -o 'stat::number_of_executed_units: [0-9]*' "$log" | tail -n 1 | grep -o '[0-9]*$' || true)
  execs[$t]=${n:-0}
  total=$((total + ${n:-0}))
  if [ "$status" -ne 0 ]; then
    artifact=$(grep -o 'Test unit written to .*' "$log" | tail -n 1 | sed 's/Test unit written to //' || true)
    crashes+=("$t: exit $status, reproducer ${artifact:-none (see $log)}")
    grep -m 5 -E 'panicked|ERROR: |SUMMARY' "$log" | sed 's/^/   /' || true
  fi
  printf '   %s executions\n' "${execs[$t]}"
done

echo "== executions"
for t in "${targets[@]}"; do
  printf '%-8s %12s\n' "$t" "${execs[$t]}"
done
printf '%-8s %12s\n' total "$total"
if [ ${#crashes[@]} -gt 0 ]; then
  echo "== crashes (reproduce: cargo +nightly fuzz run ${fuzz_flags[*]} TARGET REPRODUCER)"
  printf '%s\n' "${crashes[@]}"
  exit 1
fi
