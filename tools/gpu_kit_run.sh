#!/usr/bin/env bash
# The GPU kit's run.sh (tools/gpu_kit.sh copies this file to gpu-kit/run.sh): everything a GPU
# machine is asked to prove, in one call, with nothing installed there but an NVIDIA driver.
# The kit's binaries load their libraries from the kit (LD_LIBRARY_PATH); only the C library
# and the driver's come from the machine.
#
#   bash gpu-kit/run.sh            # logs and report.md under $OUT (or ./gpu-kit-out)
#
# Steps, each with its result in report.md, each under a time limit (the whole run stays
# under 7 minutes on an H100):
#   1. nvidia-smi, and every binary's libraries resolved (ldd -r), from the kit but for the C
#      library's and the driver's; each test binary lists its tests: a missing library stops
#      the run at once, naming it;
#   2. the CUDA tests (cuda_test; cuda_fake_test), where a skip is a failure;
#   3. the server tests with TC_TEST_DEVICE=gpu (server_test, in parallel shards), same rule;
#   4. CPU and GPU byte for byte on random requests (GpuServerTest.*, in step 3's binary);
#   5. compute-sanitizer --tool memcheck over the CUDA tests (a refusal is reported, not fatal);
#   6. live tables: UpdateRows on GPU tables (as-is, float16, int8-rowwise), read back from the
#      GPU and from a CPU copy updated alike: the same bytes; keyed tables looked up by keys
#      (Gather, EmbeddingBag, missing keys) on the GPU and on the CPU: the same bytes;
#   7. the benchmarks: the kernels against a device-to-device copy (cuda_gather_bench); the
#      server against a gRPC echo of the same bytes, resident tables by name with and without
#      batching and inline (rpc_bench); batching on against --max_batch_size=1 at concurrency
#      64 through the CLI's load tester; lookups while 100k rows/s are updated, against none;
#      a 4 GiB table uploaded to the GPU against to the CPU.
# Tests that can only pass without a device are left out by name (*WithoutADevice*,
# *WithoutAUsableGpu*, *WithoutAGpu*); any other skip counts as a failure.
#
# TC_KIT_STEPS=tests runs steps 1 to 6 only (a rerun of the tests after a fix, in less time).
#
# Exit codes: 0 every step passed; 1 a step failed (report.md says which); 2 a library is
# missing (step 1); 3 no usable NVIDIA device (every GPU step says "no device").
set -uo pipefail
kit="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
out="${OUT:-$PWD/gpu-kit-out}"
mkdir -p "$out"
work="$(mktemp -d)"
trap 'rm -rf "$work"; kill $(jobs -p) 2>/dev/null' EXIT
export LD_LIBRARY_PATH="$kit/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export TC_SERVER_BINARY="$kit/bin/tensorcompute-server"
export TC_ERRORS_DOC="$kit/errors.md"
report="$out/report.md"
failed=0
start=$SECONDS

say() { echo "$*" | tee -a "$report"; }
step() { say ""; say "## $*"; step_start=$SECONDS; }
took() { say "($((SECONDS - step_start)) s)"; }

# Gtest's summary of a log: passed, failed and skipped counts, and the failing and skipped
# names. Returns non-zero when anything failed or was skipped (or the binary did not finish).
gtest_verdict() {
  local log=$1 passed failed skipped
  passed=$(grep -c '^\[       OK \]' "$log")
  failed=$(grep -E '^\[  FAILED  \] [A-Za-z0-9_/]+\.[A-Za-z0-9_/]+' "$log" | grep -v ' listed below' \
    | awk '{print $4}' | sort -u)
  skipped=$(grep -E '^\[  SKIPPED \] [A-Za-z0-9_/]+\.[A-Za-z0-9_/]+' "$log" | awk '{print $4}' | sort -u)
  say "- passed: $passed, failed: $(echo -n "$failed" | grep -c .), skipped: $(echo -n "$skipped" | grep -c .)"
  [ -z "$failed" ] || say "- FAILED: $(echo $failed)"
  [ -z "$skipped" ] || say "- SKIPPED (a failure here): $(echo $skipped)"
  if ! grep -q '^\[==========\] .* ran\.' "$log"; then say "- did not finish (crash or time limit)"; return 1; fi
  [ -z "$failed" ] && [ -z "$skipped" ]
}

{
  echo "# GPU kit run $(date -u +%Y-%m-%dT%H:%MZ)"
  echo
  echo "Kit: $(cat "$kit/VERSION" 2>/dev/null || echo unknown)"
} > "$report"

# ---- 1. the machine and the libraries -------------------------------------------------------
step "1. Device and libraries"
device=1
if ! command -v nvidia-smi >/dev/null 2>&1; then
  device=0; say "- no device: nvidia-smi is not installed"
elif ! nvidia-smi > "$out/env.log" 2>&1; then
  device=0; say "- no device: nvidia-smi failed: $(tail -1 "$out/env.log")"
else
  say "- GPU: $(nvidia-smi --query-gpu=name,driver_version,memory.total,compute_cap --format=csv,noheader | head -1)"
  say "- CUDA (driver): $(nvidia-smi | grep -o 'CUDA Version: [0-9.]*' | head -1)"
fi
# The C library's and the driver's libraries come from the machine; every other library must
# resolve inside the kit (on a machine that happens to have it installed too, a library the
# kit lacks would otherwise go unnoticed until a bare machine).
system_library='^(linux-vdso|ld-linux|libc|libm|libpthread|libdl|librt|libresolv|libutil|libanl|libcuda|libnvidia-)'
missing=0
for bin in "$kit"/bin/*; do
  ldd -r "$bin" > "$work/ldd" 2>&1
  { echo "== ldd -r $bin"; cat "$work/ldd"; } >> "$out/env.log"
  if grep -E 'not found|undefined symbol' "$work/ldd" > "$work/missing"; then
    missing=1
    say "- $(basename "$bin"): MISSING $(sort -u "$work/missing" | tr '\n' ' ')"
  fi
  awk '$2 == "=>" && $3 ~ /^\// {print $1, $3}' "$work/ldd" | while read -r name path; do
    [[ "$path" == "$kit/lib/"* ]] || [[ "$name" =~ $system_library ]] || echo "$name ($path)"
  done > "$work/outside"
  if [ -s "$work/outside" ]; then
    missing=1
    say "- $(basename "$bin"): not in the kit: $(tr '\n' ' ' < "$work/outside")"
  fi
done
for test_bin in cuda_test cuda_fake_test server_test; do
  if ! "$kit/bin/$test_bin" --gtest_list_tests > "$work/list" 2>&1; then
    missing=1; say "- $test_bin does not start: $(tail -2 "$work/list" | tr '\n' ' ')"
  fi
done
if ! "$kit/bin/tensorcompute" --help > "$work/list" 2>&1; then
  missing=1; say "- tensorcompute --help fails: $(tail -2 "$work/list" | tr '\n' ' ')"
fi
if [ $missing = 1 ]; then
  say "- stopped: a library is missing"; took; exit 2
fi
say "- every binary's libraries resolve from the kit ($(ls "$kit/lib" | wc -l) libraries)"
took

if [ $device = 0 ]; then
  for s in "2. CUDA tests" "3. Server tests on the GPU" "4. CPU and GPU byte for byte" \
           "5. compute-sanitizer" "6. Live tables" "7. Benchmarks"; do
    step "$s"; say "- no device"
  done
  say ""; say "Exit 3: no usable NVIDIA device ($((SECONDS - start)) s)."
  exit 3
fi

# ---- helpers of steps 6 and 7: servers, the load tester, .npy files ---------------------------
cli="$kit/bin/tensorcompute"
port=50071
: > "$out/e2e.log"
# start_server NAME FLAGS...: a server on the next port, healthy before it returns.
start_server() {
  local name=$1; shift
  port=$((port + 1))
  # Metrics on a port of its own: the last server's may not be free again yet.
  "$kit/bin/tensorcompute-server" --listen=127.0.0.1:$port --metrics_listen=127.0.0.1:0 "$@" \
    > "$work/server-$name.log" 2>&1 &
  server_pid=$!
  for _ in $(seq 100); do "$cli" health --target 127.0.0.1:$port >/dev/null 2>&1 && return 0; sleep 0.1; done
  say "- server $name did not become healthy"; failed=1
}
stop_server() {
  kill -TERM $server_pid; wait $server_pid
  { echo "==== server $1"; cat "$work/server-$1.log"; } >> "$out/e2e.log"
}
# load LABEL FLAGS...: three closed-loop runs at concurrency 64; one line each in the report.
load() {
  local label=$1; shift
  for rep in 1 2 3; do
    "$cli" load --target 127.0.0.1:$port --concurrency 64 --connections 4 --duration 3 \
      --warmup 1 --json "$work/load.json" "$@" >> "$out/e2e.log" 2>&1 || failed=1
    python3 - "$work/load.json" "$label" "$rep" <<'PY' | tee -a "$report"
import json, sys
j = json.load(open(sys.argv[1]))
print(f"- {sys.argv[2]} rep {sys.argv[3]}: {j['qps']:.0f} QPS, "
      f"p50 {j['latency_us_p50']:.0f} us, p99 {j['latency_us_p99']:.0f} us, codes {j['by_code']}"
      + (f"; updates {j['updates']['rows_per_s']:.0f} rows/s applied, errors "
         f"{j['updates']['errors']}" if "updates" in j else ""))
PY
  done
}
# npy FILE ROWS COLS [random]: a float32 .npy, random bytes or (sparse) zeros.
npy() {
  python3 - "$@" <<'PY'
import os, struct, sys
path, rows, cols = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
header = "{'descr': '<f4', 'fortran_order': False, 'shape': (%d, %d), }" % (rows, cols)
header += " " * ((64 - (10 + len(header) + 1) % 64) % 64) + "\n"
with open(path, "wb") as f:
    f.write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header.encode())
    if len(sys.argv) > 4:
        f.write(os.urandom(rows * cols * 4))
    else:
        f.truncate(f.tell() + rows * cols * 4)
PY
}

device_only_filter='-*WithoutADevice*:*WithoutAUsableGpu*:*WithoutAGpu*'

# ---- 2. the CUDA tests ------------------------------------------------------------------------
step "2. CUDA tests (cuda_test: the real device; cuda_fake_test: the fake runtime)"
timeout -k 5 120 "$kit/bin/cuda_test" --gtest_filter="$device_only_filter" > "$out/cuda_test.log" 2>&1
say "cuda_test (exit $?):"; gtest_verdict "$out/cuda_test.log" || failed=1
timeout -k 5 60 "$kit/bin/cuda_fake_test" --gtest_filter="$device_only_filter" > "$work/fake.log" 2>&1
say "cuda_fake_test (exit $?):"; gtest_verdict "$work/fake.log" || failed=1
{ echo "==== cuda_fake_test"; cat "$work/fake.log"; } >> "$out/cuda_test.log"
took

# ---- 3 and 4, with 5 beside them: server tests on the GPU, memcheck ---------------------------
step "3-4. Server tests with TC_TEST_DEVICE=gpu (server_test, 8 shards), CPU and GPU byte for byte"
# 5 runs beside them: compute-sanitizer is slow on the host side, not the device's.
sanitizer=""
for candidate in compute-sanitizer /usr/local/cuda/bin/compute-sanitizer; do
  command -v "$candidate" >/dev/null 2>&1 && { sanitizer=$(command -v "$candidate"); break; }
done
if [ -n "$sanitizer" ]; then
  timeout -k 5 200 "$sanitizer" --tool memcheck --error-exitcode 99 --leak-check no \
    "$kit/bin/cuda_test" --gtest_filter="$device_only_filter" \
    > "$out/sanitizer.log" 2>&1 &
  sanitizer_pid=$!
fi
shards=8
for i in $(seq 0 $((shards - 1))); do
  TC_TEST_DEVICE=gpu GTEST_TOTAL_SHARDS=$shards GTEST_SHARD_INDEX=$i \
    timeout -k 5 200 "$kit/bin/server_test" --gtest_filter="$device_only_filter" \
    > "$work/server_test.$i.log" 2>&1 &
  eval "shard_pid_$i=$!"
done
shard_failed=0
: > "$out/server_test.log"
for i in $(seq 0 $((shards - 1))); do
  eval "wait \$shard_pid_$i"; rc=$?
  { echo "==== shard $i (exit $rc)"; cat "$work/server_test.$i.log"; } >> "$out/server_test.log"
  grep -q '^\[==========\] .* ran\.' "$work/server_test.$i.log" || { shard_failed=1; say "- shard $i did not finish (exit $rc)"; }
done
gtest_verdict "$out/server_test.log" || failed=1
[ $shard_failed = 0 ] || failed=1
gpu_only='^\[       OK \] (GpuServerTest|CpuAndGpuServersTest)\.'
if grep -qE "$gpu_only" "$out/server_test.log"; then
  say "- GPU-only cases passed: $(grep -E "$gpu_only" "$out/server_test.log" | awk '{print $4}' | tr '\n' ' ')"
else
  say "- no GPU-only case (GpuServerTest, CpuAndGpuServersTest) passed"; failed=1
fi
took

step "5. compute-sanitizer --tool memcheck over the CUDA tests"
if [ -z "$sanitizer" ]; then
  say "- compute-sanitizer is not on this machine"
else
  wait "$sanitizer_pid"; rc=$?
  summary=$(grep -E 'ERROR SUMMARY|Device not supported|error' "$out/sanitizer.log" | tail -3 | tr '\n' ' ')
  if [ $rc = 0 ]; then
    say "- clean: $summary"
  elif grep -q 'Device not supported' "$out/sanitizer.log"; then
    say "- compute-sanitizer refused the device (not counted as a failure): $summary"
  else
    say "- exit $rc: $summary"; failed=1
  fi
fi
took

# ---- 6. live tables on the GPU --------------------------------------------------------------
step "6. Live tables on the GPU: UpdateRows on GPU tables, read back on the GPU and the CPU"
# One GPU server holds each table twice, on the GPU and on the CPU; the same UpdateRows goes to
# both, then the updated rows (and rows next to them) are read back by name from each. The two
# answers must be the same bytes, and for as-is tables the bytes that were sent.
python3 - "$work" <<'PY'
import random, struct, sys
work = sys.argv[1]
rng = random.Random(41)
idx = rng.sample(range(4096), 1000)
def write(path, descr, shape, data):
    header = "{'descr': '%s', 'fortran_order': False, 'shape': (%s), }" % (
        descr, ", ".join(str(d) for d in shape) + ("," if len(shape) == 1 else ""))
    header += " " * ((64 - (10 + len(header) + 1) % 64) % 64) + "\n"
    with open(path, "wb") as f:
        f.write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header.encode() + data)
# finite values, so that float16 and int8-rowwise storage take them
write(f"{work}/live.npy", "<f4", (4096, 64),
      struct.pack("<262144f", *(rng.uniform(-4, 4) for _ in range(262144))))
write(f"{work}/live_idx.npy", "<i8", (1000,), struct.pack("<1000q", *idx))
write(f"{work}/live_vals.npy", "<f4", (1000, 64),
      struct.pack("<64000f", *(rng.uniform(-4, 4) for _ in range(64000))))
# the updated rows, their neighbours and a few never touched
read = idx + [(i + 1) % 4096 for i in idx[:200]] + list(range(8))
write(f"{work}/live_read.npy", "<i8", (len(read),), struct.pack("<%dq" % len(read), *read))
PY
# npy_data A B: whether the data of two .npy files (past their headers) are the same bytes.
npy_data_equal() {
  python3 - "$1" "$2" <<'PY'
import struct, sys
def data(p):
    b = open(p, "rb").read()
    return b[10 + struct.unpack("<H", b[8:10])[0]:]
sys.exit(0 if data(sys.argv[1]) == data(sys.argv[2]) else 1)
PY
}
start_server live --device=gpu
for storage in as-is float16 int8-rowwise; do
  ok=1
  for device in gpu cpu; do
    "$cli" put "live_$device" --target 127.0.0.1:$port --input "$work/live.npy" --device $device \
      --storage $storage --replace >> "$out/e2e.log" 2>&1 || ok=0
    for chunk in 1048576 4096; do  # one message, then many small ones
      "$cli" update "live_$device" --target 127.0.0.1:$port --indices "$work/live_idx.npy" \
        --values "$work/live_vals.npy" --chunk-bytes $chunk >> "$out/e2e.log" 2>&1 || ok=0
    done
    "$cli" gather --target 127.0.0.1:$port --params-name "live_$device" \
      --indices "$work/live_read.npy" --out "$work/live_out_$device.npy" >> "$out/e2e.log" 2>&1 || ok=0
  done
  sequence=$("$cli" list --target 127.0.0.1:$port 2>> "$out/e2e.log" | grep -w live_gpu)
  if [ $ok = 0 ]; then
    say "- $storage: a put, update or gather failed (e2e.log)"; failed=1
  elif ! npy_data_equal "$work/live_out_gpu.npy" "$work/live_out_cpu.npy"; then
    say "- $storage: the GPU table's rows differ from the CPU table's after the same updates"; failed=1
  elif [ $storage = as-is ] && ! python3 - "$work" <<'PY'
import struct, sys
w = sys.argv[1]
def data(p):
    b = open(p, "rb").read()
    return b[10 + struct.unpack("<H", b[8:10])[0]:]
sys.exit(0 if data(f"{w}/live_out_gpu.npy")[:1000 * 256] == data(f"{w}/live_vals.npy") else 1)
PY
  then
    say "- $storage: the GPU table's updated rows are not the rows sent"; failed=1
  else
    say "- $storage: 1,000 rows updated twice (one message, then 4 KiB messages); 1,208 rows read back from the GPU equal the CPU's byte for byte ($(echo $sequence | tr -s ' '))"
  fi
done
# Keyed tables (issue 42): the same keyed table on the GPU and on the CPU, grown past its
# capacity by an update adding 100 keys (core/table_growth.h: the GPU copy is placed anew), then
# looked up by keys (some missing, some added) with Gather and with EmbeddingBag (SUM and MEAN,
# missing keys skipped): the same bytes, and the same found masks.
python3 - "$work" <<'PY'
import random, struct, sys
work = sys.argv[1]
rng = random.Random(42)
def write(path, descr, shape, data):
    header = "{'descr': '%s', 'fortran_order': False, 'shape': (%s), }" % (
        descr, ", ".join(str(d) for d in shape) + ("," if len(shape) == 1 else ""))
    header += " " * ((64 - (10 + len(header) + 1) % 64) % 64) + "\n"
    with open(path, "wb") as f:
        f.write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header.encode() + data)
keys = [-2**63, 2**63 - 1, 0, -1]
while len(keys) < 4096:
    k = rng.randrange(-2**63, 2**63)
    if k not in keys:
        keys.append(k)
write(f"{work}/keyed_keys.npy", "<i8", (4096,), struct.pack("<4096q", *keys))
added = []
while len(added) < 100:
    k = rng.randrange(-2**63, 2**63)
    if k not in keys and k not in added:
        added.append(k)
write(f"{work}/keyed_added.npy", "<i8", (100,), struct.pack("<100q", *added))
write(f"{work}/keyed_added_rows.npy", "<f4", (100, 64),
      struct.pack("<6400f", *[rng.uniform(-1, 1) for _ in range(6400)]))
held = set(keys) | set(added)
absent = [k + 1 for k in keys[4:200] if k + 1 not in held]
asked = [rng.choice(keys + added) if rng.random() < 0.8 else rng.choice(absent)
         for _ in range(3000)]
write(f"{work}/keyed_asked.npy", "<i8", (3000,), struct.pack("<3000q", *asked))
write(f"{work}/keyed_offsets.npy", "<i8", (100,), struct.pack("<100q", *range(0, 3000, 30)))
write(f"{work}/keyed_default.npy", "<f4", (64,), struct.pack("<64f", *([0.5] * 64)))
PY
start_server keyed --device=gpu
for storage in as-is float16 int8-rowwise; do
  ok=1
  for device in gpu cpu; do
    "$cli" put "keyed_$device" --target 127.0.0.1:$port --input "$work/live.npy" --device $device \
      --storage $storage --keys "$work/keyed_keys.npy" --missing default \
      --default-row "$work/keyed_default.npy" --replace >> "$out/e2e.log" 2>&1 || ok=0
    # Full at put (capacity: its 4,096 rows): the 100 keys added grow it to 8,192 slots.
    "$cli" update "keyed_$device" --target 127.0.0.1:$port --keys "$work/keyed_added.npy" \
      --values "$work/keyed_added_rows.npy" >> "$out/e2e.log" 2>&1 || ok=0
    "$cli" list --target 127.0.0.1:$port >> "$out/e2e.log" 2>&1 || ok=0
    "$cli" gather --target 127.0.0.1:$port --params-name "keyed_$device" \
      --keys "$work/keyed_asked.npy" --found-out "$work/keyed_found_$device.npy" \
      --out "$work/keyed_gather_$device.npy" >> "$out/e2e.log" 2>&1 || ok=0
    for mode in sum mean; do
      "$cli" embedding-bag --target 127.0.0.1:$port --params-name "keyed_$device" \
        --keys "$work/keyed_asked.npy" --offsets "$work/keyed_offsets.npy" --mode $mode \
        --missing skip --out "$work/keyed_bag_${mode}_$device.npy" >> "$out/e2e.log" 2>&1 || ok=0
    done
  done
  if [ $ok = 0 ]; then
    say "- keyed $storage: a put or lookup failed (e2e.log)"; failed=1; continue
  fi
  same=1
  for f in keyed_gather keyed_found keyed_bag_sum keyed_bag_mean; do
    npy_data_equal "$work/${f}_gpu.npy" "$work/${f}_cpu.npy" || { same=0; say "- keyed $storage: $f differs between the GPU and the CPU"; }
  done
  [ $same = 1 ] || { failed=1; continue; }
  say "- keyed $storage: grown from 4,096 to 8,192 slots by 100 keys added; 3,000 keys (about 20% missing) by Gather (missing: the default row) and by EmbeddingBag SUM and MEAN (missing: skipped), from a GPU table and a CPU one: the same bytes and found masks"
done
stop_server keyed
took

# ---- 7. benchmarks ---------------------------------------------------------------------------
step "7. Benchmarks"
if [ "${TC_KIT_STEPS:-all}" = tests ]; then
  say "- not run (TC_KIT_STEPS=tests)"
  say ""
  say "Exit $failed: steps 1 to 6 $([ $failed = 0 ] && echo passed || echo failed) ($((SECONDS - start)) s)."
  exit $failed
fi
say "### Kernels against a device-to-device copy (cuda_gather_bench)"
timeout -k 5 150 "$kit/bin/cuda_gather_bench" > "$out/bench.log" 2>&1
rc=$?
say '```'; cat "$out/bench.log" >> "$report"; say '```'
[ $rc = 0 ] || { say "- cuda_gather_bench exit $rc"; failed=1; }

say "### The server against a gRPC echo of the same bytes (rpc_bench --device=gpu, C = 64)"
say "Inline requests (params travel), then a resident 1 GiB table of 256 B rows by name with"
say "batching, by name with --max_batch_size=1, and inline with the rows it touches."
say '```'
timeout -k 5 100 "$kit/bin/rpc_bench" --device=gpu --concurrency=64 --cases=small,1MiB \
  --repetitions=3 --duration_s=2 >> "$report" 2>> "$out/e2e.log" || { say "rpc_bench failed"; failed=1; }
timeout -k 5 120 "$kit/bin/rpc_bench" --device=gpu --embedding --table_mib=1024 --concurrency=64 \
  --lookups=16,256 --repetitions=3 --duration_s=2 >> "$report" 2>> "$out/e2e.log" \
  || { say "rpc_bench --embedding failed"; failed=1; }
say '```'

say "### End to end through the CLI's load tester: batching on against --max_batch_size=1 (C = 64)"
say "A resident float32 [1024, 64] table, 16 rows a call by name; and the same rows inline."
npy "$work/small.npy" 1024 64 random
for mbs in 32 1; do
  start_server "mbs$mbs" --device=gpu --max_batch_size=$mbs
  "$cli" put small --target 127.0.0.1:$port --input "$work/small.npy" >> "$out/e2e.log" 2>&1 || failed=1
  load "max_batch_size=$mbs, resident" --params-name small --indices 16
  [ $mbs = 1 ] || load "max_batch_size=$mbs, inline" --rows 1024 --slice 64 --indices 16
  stop_server "mbs$mbs"
done

say "### Live tables: lookups while rows are updated, against none (C = 64, the same table)"
say "16 rows a call by name from a resident float32 [1048576, 64] GPU table (256 MiB); beside"
say "them, UpdateRows replaces 100,000 random rows a second in messages of 1,000."
npy "$work/live_big.npy" 1048576 64 random
start_server updates --device=gpu
"$cli" put live --target 127.0.0.1:$port --input "$work/live_big.npy" >> "$out/e2e.log" 2>&1 || failed=1
load "no updates" --params-name live --indices 16
load "100k rows/s updated" --params-name live --indices 16 --update-rate 100000 --update-rows 1000
stop_server updates
rm -f "$work/live_big.npy"

say "### A 4 GiB table uploaded: to the GPU (pinned chunks) against to the CPU, same server and wire"
npy "$work/big.npy" 1048576 1024
start_server upload --device=gpu --max_resident_bytes=9663676416
for device in gpu cpu; do
  t0=$(date +%s.%N)
  "$cli" put "big_$device" --target 127.0.0.1:$port --input "$work/big.npy" --device $device \
    >> "$out/e2e.log" 2>&1 || { say "- put --device $device failed"; failed=1; }
  t1=$(date +%s.%N)
  python3 -c "import sys; s=float(sys.argv[2])-float(sys.argv[1]); print(f'- put --device {sys.argv[3]}: {s:.2f} s, {4*2**30/s/1e9:.2f} GB/s')" \
    "$t0" "$t1" "$device" | tee -a "$report"
  "$cli" delete "big_$device" --target 127.0.0.1:$port >> "$out/e2e.log" 2>&1
done
stop_server upload
rm -f "$work/big.npy"
took

say ""
if [ $failed = 0 ]; then
  say "Exit 0: every step passed ($((SECONDS - start)) s)."
else
  say "Exit 1: a step failed ($((SECONDS - start)) s); see above and the logs."
fi
exit $failed
