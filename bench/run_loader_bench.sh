#!/usr/bin/env bash
# Runs the data-loader benchmark and its PyTorch DataLoader peer side by side
# on Fashion-MNIST (scale + normalize + random crop 28/pad 4 + flip, batch 128,
# 1 and 2 workers) and prints samples/s of both and their ratio.
# Usage: bench/run_loader_bench.sh [build-dir]   (default: build-bench, configured
# standalone from bench/loader if it does not exist yet)
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
build="${1:-$repo/build-bench}"
workers="${WORKERS:-1,2}"

if [[ ! -f "$build/build.ninja" ]]; then
  cmake -S "$repo/bench/loader" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
fi
ninja -C "$build" loader_bench >/dev/null
bench="$(find "$build" -name loader_bench -type f -perm -u+x | head -n1)"

results="$(mktemp)"
trap 'rm -f "$results"' EXIT
echo "== trainer loader"
"$bench" --workers "$workers" --epochs 2 | tee -a "$results"
echo "== PyTorch DataLoader ($(/usr/bin/python3 -c 'import torch; print(torch.__version__)'))"
/usr/bin/python3 "$repo/bench/loader_torch.py" --workers "$workers" --epochs 1 | tee -a "$results"

echo
echo "workers  trainer samples/s  torch samples/s  ratio"
awk '$1 == "RESULT" { rate[$2 "," $3] = $4; seen[$3] = 1 }
     END {
       for (w in seen) {
         t = rate["trainer," w]; p = rate["torch," w];
         if (t && p) printf "%7s  %17.0f  %15.0f  %5.1fx\n", w, t, p, t / p;
       }
     }' "$results" | sort -n
