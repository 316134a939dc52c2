#!/usr/bin/env bash
# The training-step benchmarks of two builds of keras-cpp side by side, in interleaved rounds on
# this machine, medians: the one-process steps (the MLP 784-1024-1024-10 at batch 128, the
# transformer LM, the guide's convnet) and the two-process ones (the MLP under DataParallel, the
# wide MLP under ModelParallel and DataParallel), one thread per process. For "no slowdown"
# checks of a change against the commit before it (build that commit in a worktree first):
#   git worktree add /tmp/before <commit> && (cd /tmp/before && cmake --preset ci &&
#     cmake --build --preset ci -j2 --target training_step_benchmark transformer_step \
#       convnet_step data_parallel_step model_parallel_step)
#   bash benchmarks/compare_builds.sh /tmp/before/build/ci build/ci [rounds]
set -euo pipefail
before=${1:?usage: compare_builds.sh BEFORE_BUILD_DIR AFTER_BUILD_DIR [ROUNDS]}
after=${2:?usage: compare_builds.sh BEFORE_BUILD_DIR AFTER_BUILD_DIR [ROUNDS]}
rounds=${3:-5}
export KERAS_NUM_THREADS=1
results=$(mktemp)
trap 'rm -f "$results"' EXIT
json_field() { python3 -c "import json,sys; print(json.loads(sys.stdin.read().strip().splitlines()[-1])['$1'])"; }
for round in $(seq "$rounds"); do
  for side in before after; do
    b=$before/benchmarks
    [ "$side" = after ] && b=$after/benchmarks
    mlp=$("$b/training_step_benchmark" --benchmark_filter='BM_TrainingStep/batch:128/on_gpu:0' \
            --benchmark_format=json 2>/dev/null |
          python3 -c 'import json,sys; print([r["real_time"] for r in json.load(sys.stdin)["benchmarks"] if r.get("run_type") == "iteration"][0])')
    transformer=$("$b/transformer_step" --steps 8 --warmup 2 --json 2>/dev/null | json_field step_ms)
    cnn=$("$b/convnet_step" --steps 20 --warmup 3 --json 2>/dev/null | json_field step_ms)
    dp=$(mpirun --allow-run-as-root --oversubscribe -np 2 "$b/data_parallel_step" --steps 40 --warmup 5 --json 2>/dev/null |
         json_field step_ms)
    wide=$(mpirun --allow-run-as-root --oversubscribe -np 2 "$b/model_parallel_step" --steps 8 --warmup 2 --rounds 1 2>/dev/null |
           awk '/^ModelParallel \(1, P\)/{mp=$4} /^DataParallel \(P,\)/{dp=$3} END{print mp, dp}')
    read -r wide_mp wide_dp <<< "$wide"
    echo "$side mlp_1_process $mlp transformer_1_process $transformer cnn_1_process $cnn" \
         "mlp_data_parallel_2_processes $dp wide_mlp_model_parallel_2_processes $wide_mp" \
         "wide_mlp_data_parallel_2_processes $wide_dp" >> "$results"
    echo "round $round $side done" >&2
  done
done
python3 - "$results" <<'PY'
import statistics, sys
values = {}
for line in open(sys.argv[1]):
    side, *pairs = line.split()
    for name, value in zip(pairs[::2], pairs[1::2]):
        values.setdefault(name, {}).setdefault(side, []).append(float(value))
print(f"{'step (ms, median)':38s} {'before':>9s} {'after':>9s} {'after/before':>12s}")
for name, sides in values.items():
    before, after = statistics.median(sides["before"]), statistics.median(sides["after"])
    print(f"{name:38s} {before:9.3f} {after:9.3f} {after / before:12.3f}")
PY
