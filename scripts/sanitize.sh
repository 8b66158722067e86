#!/usr/bin/env bash
# Builds the data-pipeline tests (the threaded loader and everything it calls)
# under ThreadSanitizer and AddressSanitizer and runs them. Each build holds
# only ops/ and data/ (`// links: trainer_data` in the test files).
#   scripts/sanitize.sh [thread|address ...]   (default: both)
set -euo pipefail
cd "$(dirname "$0")/.."
kinds=("$@")
((${#kinds[@]})) || kinds=(thread address)
tests=(test_data_loader test_data_transforms test_data_formats test_data_idx test_data_corruption
       test_data_scan)
for kind in "${kinds[@]}"; do
  dir="build-$kind"
  cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTRAINER_SANITIZE="$kind" \
    -DTRAINER_CUDA=OFF >/dev/null
  cmake --build "$dir" -j "$(nproc)" --target "${tests[@]}"
  # Sanitizer reports fail the test (TSAN/ASAN exit non-zero on a report).
  TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1" ASAN_OPTIONS="detect_leaks=1" \
    ctest --test-dir "$dir" --output-on-failure -R "^($(IFS='|'; echo "${tests[*]}"))$"
done
