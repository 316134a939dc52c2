#!/usr/bin/env bash
# Builds the libFuzzer harnesses of tests/fuzz (the "fuzz" preset: clang, ASan + UBSan) and runs
# each one for N seconds (default 60) on a copy of its seed corpus, so the corpus in the tree is
# never written to. Prints one line per harness with libFuzzer's executions and coverage, and
# exits non-zero if any harness crashed, leaked, hit a sanitizer error, ran out of memory or
# timed out on an input; its log and reproducer are kept (the paths are printed). The preset
# keeps line tables only (-gline-tables-only): enough for the sanitizers' file:line stacks, and
# the build took 212 s instead of 265 s on 2 cores.
#
# KERAS_FUZZ_PRESET=sanitize runs the harnesses the sanitizer preset builds beside the tests
# (-O1, assertions on: fewer executions a second, no second build; CI's choice).
#
#   bash scripts/run_fuzzers.sh [seconds]       JOBS=1 bash scripts/run_fuzzers.sh 10
set -euo pipefail
cd "$(dirname "$0")/.."
seconds="${1:-60}"
preset="${KERAS_FUZZ_PRESET:-fuzz}"
if [ "$preset" != fuzz ] && [ "$preset" != sanitize ]; then
  echo "KERAS_FUZZ_PRESET is '$preset'; expected fuzz or sanitize (the presets that build the harnesses)" >&2
  exit 2
fi
if ! [[ "$seconds" =~ ^[1-9][0-9]*$ ]]; then
  echo "usage: $0 [seconds per harness, default 60]" >&2
  exit 2
fi
start=$(date +%s)

cmake --preset "$preset" >/dev/null
cmake --build --preset "$preset" -j"${JOBS:-2}"
harnesses="build/$preset/tests/fuzz"

work="$(mktemp -d "${TMPDIR:-/tmp}/keras_fuzz.XXXXXX")"
# UB aborts already (-fno-sanitize-recover); this adds its stack to the report.
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1${UBSAN_OPTIONS:+:$UBSAN_OPTIONS}"
export KERAS_NUM_THREADS=1

failed=0
summary=()
for source in tests/fuzz/*_fuzzer.cpp; do
  harness="$(basename "$source" .cpp)"
  dir="$work/$harness"
  mkdir -p "$dir/corpus" "$dir/artifacts" "$dir/tmp"
  if [ -d "tests/fuzz/corpus/$harness" ]; then cp -R "tests/fuzz/corpus/$harness/." "$dir/corpus/"; fi
  echo "== $harness: ${seconds} s"
  status=0
  # TMPDIR: where the harness writes the input as a file.
  TMPDIR="$dir/tmp" "$harnesses/$harness" -max_total_time="$seconds" -timeout=10 \
    -rss_limit_mb=2048 -print_final_stats=1 -artifact_prefix="$dir/artifacts/" "$dir/corpus" \
    >"$dir/log" 2>&1 || status=$?
  done_line="$(grep -E '^#[0-9]+[[:space:]]+DONE' "$dir/log" | tail -1 || true)"
  problem="$(grep -m1 -E 'ERROR: (libFuzzer|AddressSanitizer|LeakSanitizer|UndefinedBehaviorSanitizer)|runtime error:|SUMMARY: ' "$dir/log" || true)"
  if [ "$status" -eq 0 ] && [ -n "$done_line" ] && [ -z "$problem" ]; then
    runs="$(sed -E 's/^#([0-9]+).*/\1/' <<<"$done_line")"
    cov="$(sed -E 's/.* cov: ([0-9]+).*/\1/' <<<"$done_line")"
    ft="$(sed -E 's/.* ft: ([0-9]+).*/\1/' <<<"$done_line")"
    summary+=("$(printf '%-20s ok      %10s executions  cov: %-5s ft: %s' "$harness" "$runs" "$cov" "$ft")")
  else
    failed=1
    summary+=("$(printf '%-20s FAILED  (exit %s) %s' "$harness" "$status" "${problem:-no DONE line}")")
    echo "--- $harness failed (exit $status); the end of its log ($dir/log):"
    tail -n 40 "$dir/log"
    for artifact in "$dir"/artifacts/*; do
      [ -e "$artifact" ] || continue
      echo "reproducer: $artifact"
      echo "  rerun:    $harnesses/$harness $artifact"
      echo "  minimize: $harnesses/$harness -minimize_crash=1 -runs=20000 $artifact"
    done
  fi
  rm -rf "$dir/tmp"
done

echo
echo "== fuzzing summary (${seconds} s per harness, $(($(date +%s) - start)) s in all with the build)"
printf '%s\n' "${summary[@]}"
if [ "$failed" -ne 0 ]; then
  echo "logs and reproducers kept in $work"
  exit 1
fi
rm -rf "$work"
