#!/usr/bin/env bash
# Data-parallel scaling on CPU ranks: the shipped CNN (Fashion-MNIST, global
# batch 128) trained for a few dozen steps as 1 rank with 1 thread, 1 rank with
# 2 threads, and 2 ranks with 1 thread each (trainer's own mpirun launcher).
# Reports samples/s (mean of the logged windows after the first) and the
# efficiency of 2 ranks against twice 1 rank. Writes bench/results/dist_scaling.json.
# Usage: bench/dist_scaling.sh [BUILD_DIR] [STEPS]   (defaults: build, 60)
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="${1:-$root/build}"
steps="${2:-60}"
trainer="$build/trainer"
[[ -x "$trainer" ]] || { echo "no trainer at $trainer: build it first (ninja -C $build trainer)" >&2; exit 1; }
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
mkdir -p "$root/bench/results"

run() {  # name ranks threads
  "$trainer" run "$root/configs/fashion_mnist_cnn.yaml" "devices.world_size=$2" "backend.threads=$3" \
    "train.max_steps=$steps" train.log_every=10 train.eval_batches=1 checkpoint.every_epochs=0 \
    --out "$work/$1" >"$work/$1.log" 2>&1 || { echo "run $1 failed:" >&2; tail -20 "$work/$1.log" >&2; exit 1; }
}

echo "cores: $(nproc); load average: $(cut -d' ' -f1-3 /proc/loadavg)"
run one_rank_1thread 1 1
run one_rank_2threads 1 2
run two_ranks_1thread 2 1

WORK="$work" STEPS="$steps" NPROC="$(nproc)" LOAD="$(cut -d' ' -f1-3 /proc/loadavg)" \
  OUT="$root/bench/results/dist_scaling.json" python3 - <<'PY'
import json, os
work = os.environ["WORK"]
def rate(name):
    rows = [json.loads(l) for l in open(os.path.join(work, name, "metrics.jsonl"))]
    windows = [r["samples_per_s"] for r in rows if r.get("split") == "train"][1:]  # first: warm-up
    return sum(windows) / len(windows)
r1, r1t2, r2 = rate("one_rank_1thread"), rate("one_rank_2threads"), rate("two_ranks_1thread")
ranks = []
path = os.path.join(work, "two_ranks_1thread", "ranks.jsonl")
if os.path.exists(path):
    ranks = [json.loads(l) for l in open(path)][-1]["ranks"]
result = {
    "config": "configs/fashion_mnist_cnn.yaml (batch 128)", "steps": int(os.environ["STEPS"]),
    "cores": int(os.environ["NPROC"]), "load_average_after": os.environ["LOAD"],
    "samples_per_s": {"1 rank x 1 thread": round(r1), "1 rank x 2 threads": round(r1t2),
                      "2 ranks x 1 thread": round(r2)},
    "efficiency_2_ranks_vs_2x_1_rank": round(r2 / (2 * r1), 3),
    "speedup_2_ranks_vs_1_rank_2_threads": round(r2 / r1t2, 3),
    "last_window_per_rank_ms": ranks,
}
json.dump(result, open(os.environ["OUT"], "w"), indent=2)
print(json.dumps(result, indent=2))
PY
