#!/usr/bin/env bash
# Builds the device allocators devalloc is compared with (benchmarks/device_peers.py)
# for sm_90 into .peers/, from their sources (no network needed here):
#   bash benchmarks/build_peers.sh path/to/gallatin path/to/Ouroboros
# Gallatin: github.com/saltsystemslab/gallatin, its tests/src/gallatin_test.cu, as its
# README builds it. Ouroboros: github.com/GPUPeople/Ouroboros, src/main.cu, as its
# CMakeLists builds main_c (chunks) and main_p (pages), with one change: CUDA 13
# removed cudaDeviceProp::clockRate, which its statistics file only prints, so the
# build prints 0 there instead (a copy of the file is changed, not the source tree).
set -euo pipefail
gallatin=${1:?path to the gallatin sources}; ouroboros=${2:?path to the Ouroboros sources}
out=$(cd "$(dirname "$0")/.." && pwd)/.peers; mkdir -p "$out"
arch=${ARCH:-sm_90}
nvcc -O3 -std=c++17 -arch="$arch" -I "$gallatin/include" \
  "$gallatin/tests/src/gallatin_test.cu" -o "$out/gallatin_test"
patched=$(mktemp -d); trap 'rm -rf "$patched"' EXIT
cp -r "$ouroboros/include" "$patched/include"
sed -i 's/<< prop.clockRate \* 1000 << /<< 0 << /' "$patched/include/Statistics.h"
for kind in c:TEST_CHUNKS p:TEST_PAGES; do
  nvcc -O3 -std=c++17 -arch="$arch" -D"${kind#*:}" -D_FORCE_INLINES --expt-extended-lambda \
    -use_fast_math --expt-relaxed-constexpr -I "$patched/include" \
    "$ouroboros/src/main.cu" -o "$out/main_${kind%%:*}"
done
ls -l "$out"
