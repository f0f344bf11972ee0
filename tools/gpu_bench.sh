#!/usr/bin/env bash
# Everything issue 5 asks of a GPU machine, in one command (for the device tool or any GPU box):
# build with nvcc, run the CUDA and server tests, the kernel benchmark, and the end-to-end
# comparison of batching on vs --max_batch_size=1 at concurrency 64. The kernel benchmark
# includes the EmbeddingBag kernel (SUM over bags of 32 of a 1 GiB table of 256 B rows). Writes a
# Markdown report to ${OUT:-.}/gpu-results-run.md (copy its tables into docs/gpu-results.md).
#   bash tools/gpu_bench.sh [build-dir]
set -uo pipefail
cd "$(dirname "$0")/.."
build=${1:-build-gpu}
out=${OUT:-.}/gpu-results-run.md
mkdir -p "$(dirname "$out")"
{
  echo "# GPU run $(date -u +%Y-%m-%dT%H:%MZ)"
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1 | sed 's/^/GPU: /'
  echo
} > "$out"

cmake -S . -B "$build" -G Ninja -DTC_CUDA=ON -DCMAKE_BUILD_TYPE=Release > "$build.configure.log" 2>&1 \
  && cmake --build "$build" -j"$(nproc)" > "$build.build.log" 2>&1 \
  || { echo "build failed; see $build.build.log" | tee -a "$out"; tail -50 "$build.build.log" >> "$out"; exit 1; }

echo "## Tests (ctest -R 'cuda|server')" >> "$out"
ctest --test-dir "$build" -R 'cuda|server' --output-on-failure -j4 > "$build.ctest.log" 2>&1
grep -E "tests passed|tests failed|Skipped|Failed" "$build.ctest.log" | sed 's/^/    /' >> "$out"

echo "## Kernels (gather, EmbeddingBag) vs device-to-device copy (tests/bench/cuda_gather_bench)" >> "$out"
"$build/tests/bench/cuda_gather_bench" >> "$out" 2>&1

echo "## End to end: small requests at concurrency 64, batching on vs --max_batch_size=1" >> "$out"
cli="$build/client/tensorcompute"
for mbs in 32 1; do
  "$build/server/tensorcompute-server" --device=gpu --listen=127.0.0.1:50071 --max_batch_size=$mbs \
    > "$build.server-$mbs.log" 2>&1 &
  pid=$!
  for _ in $(seq 50); do "$cli" health --target 127.0.0.1:50071 >/dev/null 2>&1 && break; sleep 0.2; done
  head -3 "$build.server-$mbs.log" | sed 's/^/    /' >> "$out"
  for rep in 1 2 3; do
    "$cli" load --target 127.0.0.1:50071 --rows 1024 --slice 64 --indices 16 --concurrency 64 \
      --connections 4 --duration 5 --warmup 1 --json - 2>/dev/null \
      | python3 -c "import json,sys; j=json.load(sys.stdin); print(f'    max_batch_size=$mbs rep $rep: {j[\"qps\"]:.0f} QPS, p50 {j[\"latency_us_p50\"]:.0f} us, p99 {j[\"latency_us_p99\"]:.0f} us, codes {j[\"by_code\"]}')" \
      >> "$out"
  done
  kill -TERM $pid; wait $pid
done
cat "$out"
