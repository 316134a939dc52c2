#!/usr/bin/env bash
# One step benchmark under float32, mixed_bfloat16 on the route the engine chooses, and
# mixed_bfloat16 with oneDNN's bf16 kernels forced (KERAS_CPU_BFLOAT16_GEMM=1), interleaved
# round by round at 1 and 2 threads (pinned with taskset), so the three columns share the
# machine's state: this VM's timings drift by tens of percent between minutes. Prints each
# column's median and fastest run and the ratios to float32.
#   bash benchmarks/compare_dtype_policies.sh build/ci convnet_step [rounds]
#   bash benchmarks/compare_dtype_policies.sh build/ci transformer_step 3 --batch-size 16 --steps 8
set -euo pipefail
build=${1:?usage: compare_dtype_policies.sh BUILD_DIR STEP_BENCHMARK [ROUNDS] [BENCHMARK FLAGS]}
benchmark=${2:?usage: compare_dtype_policies.sh BUILD_DIR STEP_BENCHMARK [ROUNDS] [BENCHMARK FLAGS]}
rounds=${3:-5}
shift $(($# < 3 ? $# : 3))
extra=("$@")
[[ ${#extra[@]} -eq 0 ]] && extra=(--steps 10)
results=$(mktemp)
trap 'rm -f "$results"' EXIT
step_ms() { python3 -c "import json,sys; print(json.loads(sys.stdin.read().strip().splitlines()[-1])['step_ms'])"; }
for round in $(seq "$rounds"); do
  for threads in 1 2; do
    cpus=$([[ $threads == 1 ]] && echo 0 || echo 0,1)
    for column in float32 mixed_bfloat16 bf16_kernels_forced; do
      policy=$([[ $column == float32 ]] && echo float32 || echo mixed_bfloat16)
      forced=()
      [[ $column == bf16_kernels_forced ]] && forced=(KERAS_CPU_BFLOAT16_GEMM=1)
      ms=$(env -u KERAS_CPU_BFLOAT16_GEMM "${forced[@]}" KERAS_NUM_THREADS=$threads taskset -c "$cpus" \
             "$build/benchmarks/$benchmark" "${extra[@]}" --warmup 2 --dtype-policy "$policy" --json | step_ms)
      echo "$threads $column $ms" >> "$results"
      echo "round $round, $threads thread(s), $column: $ms ms" >&2
    done
  done
done
python3 - "$results" "$benchmark" <<'PY'
import collections, statistics, sys
runs = collections.defaultdict(list)
for line in open(sys.argv[1]):
    threads, column, ms = line.split()
    runs[(threads, column)].append(float(ms))
print(f"| {sys.argv[2]} | threads | float32 ms | mixed_bfloat16 ms | ratio | bf16 kernels forced ms | ratio | fastest runs: float32 / mixed / forced |")
print("|---|---|---|---|---|---|---|---|")
for threads in ("1", "2"):
    base, mixed, forced = (runs[(threads, c)] for c in ("float32", "mixed_bfloat16", "bf16_kernels_forced"))
    b, m, f = statistics.median(base), statistics.median(mixed), statistics.median(forced)
    print(f"| | {threads} | {b:.1f} | {m:.1f} | {m / b:.2f} | {f:.1f} | {f / b:.2f} | "
          f"{min(base):.1f} / {min(mixed):.1f} ({min(mixed) / min(base):.2f}) / {min(forced):.1f} ({min(forced) / min(base):.2f}) |")
PY
