#!/usr/bin/env bash
# Builds, here, what a GPU machine runs, and packs it into gpu-kit/ (ignored by git): the CUDA
# and server tests, the server, the CLI, the kernel benchmark and the RPC benchmark (the server
# against a gRPC echo of the same bytes), stripped, with every shared
# library they load except the C library's and the NVIDIA driver's, and run.sh
# (tools/gpu_kit_run.sh). A GPU machine needs nothing else installed: no build, no packages.
#
#   bash tools/gpu_kit.sh [build-dir] [kit-dir]     # defaults: build, gpu-kit
#   bash gpu-kit/run.sh                             # there; logs and report.md under $OUT
#
# The build is README's (build/, Release) with the CUDA backend required (TC_CUDA=ON, sm_90 for
# the H100 and H200: TC_CUDA_ARCHITECTURES), so CI's build already holds every binary. The kit
# stays under 60 MiB (the device tool carries at most 64 MiB with the repository).
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
kit=${2:-gpu-kit}
max_kit_mib=60
binaries=(
  server/tensorcompute-server
  client/tensorcompute
  tests/cuda/cuda_test
  tests/cuda/cuda_fake_test
  tests/server/server_test
  tests/bench/cuda_gather_bench
  tests/bench/rpc_bench
)

cmake -S . -B "$build" -G Ninja -DTC_CUDA=ON > /dev/null
targets=()
for b in "${binaries[@]}"; do targets+=("$(basename "$b")"); done
cmake --build "$build" -j"${TC_JOBS:-2}" --target "${targets[@]}"

rm -rf "$kit"
mkdir -p "$kit/bin" "$kit/lib"
for b in "${binaries[@]}"; do
  strip --strip-unneeded -o "$kit/bin/$(basename "$b")" "$build/$b"
done

# The C library (glibc: libc, libm, libpthread, libdl, librt, libresolv, the loader) comes from
# the machine, as does the driver (libcuda, loaded at run time by the static CUDA runtime).
is_system_library() {
  case "$1" in
    linux-vdso.so.* | ld-linux*.so.* | libc.so.* | libm.so.* | libpthread.so.* | libdl.so.* | \
      librt.so.* | libresolv.so.* | libutil.so.* | libanl.so.* | libcuda.so.* | libnvidia-*) return 0 ;;
    *) return 1 ;;
  esac
}
for bin in "$kit"/bin/*; do
  ldd "$bin" | awk '$2 == "=>" && $3 ~ /^\// {print $1, $3}'
done | sort -u | while read -r soname path; do
  is_system_library "$soname" || cp -L "$path" "$kit/lib/$soname"
done
strip --strip-unneeded "$kit"/lib/*.so* 2>/dev/null || true

cp tools/gpu_kit_run.sh "$kit/run.sh"
chmod +x "$kit/run.sh"
cp docs/errors.md "$kit/errors.md"  # malformed_request_test checks the doc against its table
{
  echo "$(git rev-parse --short HEAD)$(git diff --quiet HEAD -- . 2>/dev/null || echo '+changes')," \
    "built $(date -u +%Y-%m-%dT%H:%MZ) for CUDA architectures" \
    "$(grep -E '^TC_CUDA_ARCHITECTURES' "$build/CMakeCache.txt" | cut -d= -f2)"
} > "$kit/VERSION"

kit_kib=$(du -sk "$kit" | cut -f1)
echo "gpu_kit: $kit/ is $((kit_kib / 1024)) MiB ($(ls "$kit/bin" | wc -l) binaries, $(ls "$kit/lib" | wc -l) libraries)"
if [ "$kit_kib" -gt $((max_kit_mib * 1024)) ]; then
  echo "gpu_kit: over $max_kit_mib MiB" >&2
  exit 1
fi
