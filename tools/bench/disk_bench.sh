#!/usr/bin/env bash
# The disk's own random-read limit and our row reads against it, on the same file in one run
# (issue 43; docs/performance.md, "Tables on disk"):
#   1. fio lays out FILE (SIZE GiB of fio's random bytes, written with direct I/O) unless it is
#      there at that size;
#   2. fio: random 4 KiB direct reads at queue depth 64 through io_uring (the ceiling);
#   3. build/tests/bench/row_file_bench: random 256 B rows after a 128 B .npy header, batches
#      of 2,000, on 1, 2 and 4 threads (64 reads in flight each);
#   4. the ratio of the best rows/s to fio's IOPS.
# usage: tools/bench/disk_bench.sh [FILE] [SIZE_GIB] [SECONDS]
set -euo pipefail
cd "$(dirname "$0")/../.."
file="${1:-/var/tmp/tensorcompute-disk-bench.bin}"
gib="${2:-8}"
seconds="${3:-15}"
command -v fio >/dev/null || { echo "disk_bench: fio is missing (apt-get install fio)" >&2; exit 1; }
bench=build/tests/bench/row_file_bench
[ -x "$bench" ] || { echo "disk_bench: build $bench first" >&2; exit 1; }
want=$((gib << 30))
if [ ! -f "$file" ] || [ "$(stat -c %s "$file")" != "$want" ]; then
  echo "disk_bench: laying out $file ($gib GiB)"
  rm -f "$file"
  fio --name=layout --filename="$file" --rw=write --bs=1M --direct=1 --size="${gib}G" \
      --ioengine=io_uring --iodepth=16 --output-format=terse >/dev/null
fi
echo "disk_bench: $(date -u +%FT%TZ), $(nproc) CPUs, file system $(df -T "$file" | awk 'NR==2 {print $2}')"
iops=$(fio --name=randread --filename="$file" --rw=randread --bs=4k --direct=1 \
           --ioengine=io_uring --iodepth=64 --runtime="$seconds" --time_based \
           --output-format=json | python3 -c 'import json,sys; print(round(json.load(sys.stdin)["jobs"][0]["read"]["iops"]))')
echo "fio random 4 KiB direct reads, queue depth 64: $iops IOPS"
out=$("$bench" --file "$file" --row_bytes 256 --data_offset 128 --threads 1,2,4 --seconds "$seconds")
echo "$out"
# The same depth as fio's (one thread, 64 in flight), then the best over the thread counts.
one=$(echo "$out" | awk '$1 == 1 { print $2 }')
best=$(echo "$out" | awk '$1 ~ /^[0-9]+$/ && $2 > best { best = $2 } END { print best }')
python3 -c "print('rows/s over fio IOPS: %.2f at the same depth (1 thread), %.2f at best' % ($one / $iops, $best / $iops))"
