#!/usr/bin/env bash
# Activation memory of the ResNet config with and without activation
# checkpointing, from the memory plan (`trainer plan`; nothing is allocated).
# Usage: bench/recompute_memory.sh [path/to/trainer]
set -euo pipefail
trainer=${1:-build/trainer}
config=configs/fashion_mnist_resnet.yaml
printf '%-44s %14s %14s\n' "model.recompute" "activations" "total"
for spec in '' '{every: 2}' '[stage1, stage2, stage2b, stage3, stage3b]'; do
  if [ -z "$spec" ]; then out=$("$trainer" plan "$config"); label="(none)"
  else out=$("$trainer" plan "$config" "model.recompute=$spec"); label=$spec; fi
  activations=$(awk '/activations \(peak\)/ {print $3}' <<<"$out")
  total=$(awk '/^  total/ {print $2}' <<<"$out")
  printf '%-44s %10s MiB %10s MiB\n' "$label" "$activations" "$total"
done
