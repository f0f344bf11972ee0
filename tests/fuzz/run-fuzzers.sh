#!/usr/bin/env bash
# Fuzzes each target for a bounded time, one after the other (one process, one CPU: no
# -jobs/-workers, which would also send the output to fuzz-N.log), on a scratch copy of
# its checked-in corpus; builds nothing. Fails on any crash, sanitizer report, mismatch
# (abort), leak, timeout or out-of-memory, and prints libFuzzer's final figures per target.
#
#   tests/fuzz/run-fuzzers.sh SECONDS [BUILD_DIR] [TARGET...]
#
# BUILD_DIR defaults to build-fuzz (any build configured with -DTC_BUILD_FUZZERS=ON: CI uses its
# ASan build, build-asan); TARGET defaults to
# the three fuzzers. Crash reproducers are written to $TC_FUZZ_ARTIFACTS (default: a scratch folder,
# kept on failure); the grown corpus is kept in $TC_FUZZ_KEEP_CORPUS/<target> when that is set,
# and $TC_FUZZ_EXTRA_CORPUS/<target>, when set and present, is read as well (to go on from an
# earlier run).
set -euo pipefail

seconds="${1:?usage: run-fuzzers.sh SECONDS [BUILD_DIR] [TARGET...]}"
build_dir="${2:-build-fuzz}"
shift $(( $# >= 2 ? 2 : 1 ))
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
  targets=(core_gather_fuzzer wire_request_fuzzer http_request_fuzzer)
fi

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
scratch="$(mktemp -d -t tc-fuzz.XXXXXX)"
artifacts="${TC_FUZZ_ARTIFACTS:-$scratch/artifacts}"
mkdir -p "$artifacts"
status=0
for t in "${targets[@]}"; do
  binary="$build_dir/tests/fuzz/$t"
  if [ ! -x "$binary" ]; then
    echo "run-fuzzers: $binary is missing; build it first (TC_BUILD_FUZZERS=ON)" >&2
    exit 2
  fi
  corpus="$scratch/corpus/$t"
  mkdir -p "$corpus"
  cp "$here/corpus/$t/"* "$corpus/"
  extra=()
  if [ -n "${TC_FUZZ_EXTRA_CORPUS:-}" ] && [ -d "$TC_FUZZ_EXTRA_CORPUS/$t" ]; then
    extra=("$TC_FUZZ_EXTRA_CORPUS/$t")
  fi
  log="$scratch/$t.log"
  echo "run-fuzzers: $t for ${seconds}s"
  start=$(date +%s)
  # -max_len 8192: mutations stay small (one seed of the wire corpus is larger; it runs whole
  # in the ctest regression run). -timeout/-rss_limit_mb turn a hang or a blow-up into a failure.
  if "$binary" "$corpus" "${extra[@]}" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
      -max_len=8192 -print_final_stats=1 -artifact_prefix="$artifacts/$t-" \
      >"$log" 2>&1; then
    result=ok
  else
    result=FAILED
    status=1
    tail -n 60 "$log"
  fi
  elapsed=$(( $(date +%s) - start ))
  units=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -1)
  last=$(grep -E '^#[0-9]+' "$log" | tail -1)
  cov=$(sed -n 's/.* cov: \([0-9]*\).*/\1/p' <<<"$last")
  ft=$(sed -n 's/.* ft: \([0-9]*\).*/\1/p' <<<"$last")
  corp=$(sed -n 's/.* corp: \([^ ]*\).*/\1/p' <<<"$last")
  echo "run-fuzzers: $t $result: ${elapsed}s, ${units:-?} executions (${rate:-?}/s)," \
    "cov ${cov:-?}, ft ${ft:-?}, corpus ${corp:-?}"
  if [ -n "${TC_FUZZ_KEEP_CORPUS:-}" ]; then
    mkdir -p "$TC_FUZZ_KEEP_CORPUS/$t"
    cp "$corpus/"* "$TC_FUZZ_KEEP_CORPUS/$t/"
    cp "$log" "$TC_FUZZ_KEEP_CORPUS/$t.log"
  fi
done
if [ $status -eq 0 ]; then
  rm -rf "$scratch"
else
  echo "run-fuzzers: FAILED; reproducers in $artifacts, logs in $scratch" >&2
fi
exit $status
