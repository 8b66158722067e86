#!/usr/bin/env bash
# Builds trainer and runs its tests (everything but the `slow` label; pass
# --all to include slow tests). GPU tests skip themselves without a GPU.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
exclude=(-LE slow)
[ "${1:-}" = "--all" ] && exclude=()
ctest --test-dir build --output-on-failure -j 2 "${exclude[@]}"
