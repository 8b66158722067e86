#!/usr/bin/env bash
# Runs HERE (the build machine): builds the CUDA-enabled Release binaries for
# sm_90 into build-gpu/ and packs what the GPU machine needs into
# build-gpu/bundle/ (bin/: trainer and the GPU test binaries; lib/: the non-CUDA
# shared libraries they load). cuDNN, cuBLAS(Lt) and NCCL are NOT packed: the GPU
# machine has them as PyTorch's nvidia-* wheels (gpu-check.sh finds them).
# The GPU machine has no Debian packages, so no Fashion-MNIST either:
# build-gpu/carry/ holds the bundle compressed (bundle.tar.xz) and the dataset's
# four .gz files. Carry build-gpu/carry (limit 64 MiB) and run scripts/gpu-check.sh there.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="$root/build-gpu"
bundle="$build/bundle"
# Every test whose "// labels:" line names gpu; bundle/GPU_TESTS lists them for gpu-check.sh.
mapfile -t gpu_tests < <(grep -l '^// labels:.*\bgpu\b' "$root"/tests/test_*.cpp |
  xargs -n 1 basename | sed 's/\.cpp$//')
targets=(trainer "${gpu_tests[@]}")

cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DTRAINER_CUDA=ON \
  -DCMAKE_CUDA_ARCHITECTURES=90 >"$build.configure.log" 2>&1 ||
  { cat "$build.configure.log"; exit 1; }
ninja -C "$build" -j"${JOBS:-2}" "${targets[@]}"

rm -rf "$bundle"
mkdir -p "$bundle/bin" "$bundle/lib"
cp "$build/trainer" "$bundle/bin/"
for t in "${targets[@]:1}"; do cp "$build/tests/$t" "$bundle/bin/"; done
strip --strip-unneeded "$bundle"/bin/* 2>/dev/null || true
printf '%s\n' "${gpu_tests[@]}" >"$bundle/GPU_TESTS"

# Shared libraries to carry: everything ldd resolves except the C library
# family (always on the target) and the big CUDA libraries (from the wheels).
skip='^(linux-vdso|ld-linux|libc\.so|libm\.so|libdl\.so|libpthread\.so|librt\.so|libcuda\.so|libcudnn|libcublas|libnccl)'
for bin in "$bundle"/bin/*; do
  if ldd "$bin" | grep -q "not found"; then
    echo "error: $bin needs libraries this machine cannot resolve:" >&2
    ldd "$bin" | grep "not found" >&2
    exit 1
  fi
  ldd "$bin" | awk '$2 == "=>" && $3 ~ /^\// {print $1, $3}'
done | sort -u | while read -r name path; do
  if [[ "$name" =~ $skip ]]; then continue; fi
  cp -L "$path" "$bundle/lib/$name"
done
strip --strip-unneeded "$bundle"/lib/*.so* 2>/dev/null || true
# The newest C library version each carried file needs ("2.36 lib/libstdc++.so.6"):
# gpu-check.sh compares it with the GPU machine's, and where the machine's is
# older uses the machine's own copy of such a library instead.
for f in "$bundle"/bin/* "$bundle"/lib/*; do
  need=$(objdump -T "$f" 2>/dev/null | { grep -o 'GLIBC_[0-9][0-9.]*' || true; } | sed 's/GLIBC_//' |
    sort -V | tail -n 1)
  echo "${need:-0} ${f#"$bundle"/}"
done >"$bundle/GLIBC_NEEDS"
# The commit, marked -dirty when the tree had uncommitted changes.
git -C "$root" describe --always --dirty >"$bundle/COMMIT" 2>/dev/null || true

echo "bundle: $bundle"
ls -la "$bundle/bin" "$bundle/lib" | awk 'NF > 5 {print "  " $5, $9}'

carry="$build/carry"
data=/usr/share/datasets/fashion-mnist
rm -rf "$carry"
mkdir -p "$carry/fashion-mnist"
tar -C "$bundle" -cf - . | xz -T"${JOBS:-2}" -6 >"$carry/bundle.tar.xz"
cp "$data"/*-ubyte.gz "$carry/fashion-mnist/" ||
  { echo "error: Fashion-MNIST is missing ($data): apt-get install dataset-fashion-mnist" >&2; exit 1; }
size_kib=$(du -sk "$carry" | cut -f1)
echo "carry: $carry, $((size_kib / 1024)) MiB (limit 64 MiB)"
if ((size_kib > 60 * 1024)); then
  echo "error: build-gpu/carry is over 60 MiB: it will not fit the carry limit" >&2
  exit 1
fi
