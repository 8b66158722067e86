#!/usr/bin/env bash
# Installs what trainer needs on Debian 12 (a no-op when everything is there),
# then configures and builds it (Release) into ./build.
#   scripts/setup.sh             install + build
#   scripts/setup.sh --no-build  install only
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(
  build-essential cmake ninja-build ccache pkg-config git
  libyaml-cpp-dev libcli11-dev libspdlog-dev catch2 libdnnl-dev zlib1g-dev
  ocl-icd-opencl-dev  # oneDNN's CMake package asks for OpenCL (only recommended by libdnnl-dev)
  libpng-dev libjpeg-dev nlohmann-json3-dev libopenmpi-dev openmpi-bin
  dataset-fashion-mnist
  python3-torch libopenblas0-openmp python3-numpy
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
# Node.js runs the schema validator; any installed node/npm will do.
command -v npm >/dev/null 2>&1 || missing+=(nodejs npm)
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo apt-get update -q
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q --no-install-recommends "${missing[@]}"
fi

# The independent JSON Schema validator used by the schema tests.
if [ -f tools/schema-check/package-lock.json ] && [ ! -d tools/schema-check/node_modules ]; then
  echo "setup: installing the JSON Schema validator (npm ci)"
  npm ci --prefix tools/schema-check --no-audit --no-fund --loglevel=error
fi

[ "${1:-}" = "--no-build" ] && exit 0

cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release ${TRAINER_CMAKE_ARGS:-}
cmake --build build -j "$(nproc)"
echo "setup: built ./build/trainer"
