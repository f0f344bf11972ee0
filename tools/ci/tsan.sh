#!/usr/bin/env bash
# Runs the core, batcher and server tests under ThreadSanitizer, from nothing (CI's TSan step):
#   bash tools/ci/tsan.sh
# Any TSan report fails the run (halt_on_error=1); tools/ci/tsan.supp suppresses Debian's
# uninstrumented gRPC and protobuf only, nothing of ours.
#
# Why Abseil is rebuilt: our locks are absl::Mutex / absl::CondVar / absl::Notification, whose
# code lives in Debian's libabsl_synchronization.so, built without -fsanitize=thread. TSan then
# cannot see them lock, and reports every access they guard as a race. So this script builds
# the Abseil libraries our test binaries load from Debian's own source package of exactly the
# installed version (20220623.1-1+deb12u2, Debian's patches applied: same SONAMEs, same inline
# namespace `debian3`, same options.h), with -fsanitize=thread, and links the TSan binaries
# with an RPATH to them, so that every absl::Mutex in the process (gRPC's included) is
# instrumented. Only the libraries the binaries load are built (56 of them, ~2 min on 2 cores).
#
# Steps: 1. Abseil's source, downloaded once into the cache (/var/cache/tensorcompute, or
# $TC_CACHE) and checked against the .dsc's SHA-256; 2. build-tsan (-DTC_SANITIZE=thread,
# RelWithDebInfo, no CUDA, no benchmarks): the three test binaries and the server; 3. the
# libabsl_*.so the binaries load, built with TSan (a no-op when the cache has them); 4. checks
# that the binaries load only the instrumented libabsl_*, and that TSan sees absl::Mutex yet
# still reports a race (tools/ci/tsan_canary.cc); 5. ctest. Run as root (for the cache) on
# Debian 12 with tools/install-deps.sh's packages. Prints the time of each step.
set -euo pipefail
cd "$(dirname "$0")/../.."
repo=$(pwd)

absl_version=20220623.1
absl_debian_revision=1+deb12u2
mirror=${TC_DEBIAN_MIRROR:-http://deb.debian.org/debian}
cache=${TC_CACHE:-/var/cache/tensorcompute}/abseil-${absl_version}-${absl_debian_revision}-tsan
build=${TC_TSAN_BUILD:-build-tsan}
tests_regex='^(core_test|batching_test|disk_test|server_test)\.'
# Left out: tests that reach protobuf's reflection over map fields (Message::SpaceUsedLong, in
# the KServe JSON decoder's held bytes and proto/decoded_cost's object sizes). Under TSan,
# protobuf 3.21's map_field.h gives MapFieldBase two more members (seq1_, seq2_), so code built
# here and Debian's uninstrumented libprotobuf disagree on its layout, and the library's
# SpaceUsedLong crashes (SEGV) on maps our code built. Single-threaded decoders, or a server test
# whose threads the rest of this run covers; ASan+UBSan run them all. (KserveEmbeddingBag and
# KserveKeys decode their requests from JSON, through the same held-bytes count.)
tests_excluded='^server_test\.(KserveJson|KserveJsonRandom|KserveJsonMemory|KserveEmbeddingBag|KserveKeys|DecodedSizeTest)\.'
binaries=(tests/core/core_test tests/batching/batching_test tests/server/server_test
          server/tensorcompute-server)

start=$SECONDS
step_start=$SECONDS
step() {
  echo "=== tsan: $1"
  step_start=$SECONDS
}
done_step() { echo "    ($((SECONDS - step_start)) s)"; }

# ---- 1. Abseil's source: Debian's orig tarball with Debian's patches ----------------------
step "Abseil ${absl_version}-${absl_debian_revision} source (cache: $cache)"
src=$cache/src/abseil-${absl_version}
if [ ! -f "$src/.tc-patched" ]; then
  rm -rf "$cache/src" && mkdir -p "$cache/src"
  orig=abseil_${absl_version}.orig.tar.gz
  debian=abseil_${absl_version}-${absl_debian_revision}.debian.tar.xz
  for f in "$orig" "$debian"; do
    curl -fsSL --retry 3 -o "$cache/src/$f" "$mirror/pool/main/a/abseil/$f"
  done
  # From abseil_20220623.1-1+deb12u2.dsc (Checksums-Sha256).
  (cd "$cache/src" && sha256sum -c --quiet) <<EOF
abfe2897f3a30edaa74bc34365afe3c2a3cd012091a97dc7e008f7016adcd5fe  $orig
e08490fc7b6f3beca1925953b0c4fb92df2de5e2a01295e4641e2a3d4e528eeb  $debian
EOF
  tar -xzf "$cache/src/$orig" -C "$cache/src"
  tar -xJf "$cache/src/$debian" -C "$src"
  while read -r patch; do
    case "$patch" in '' | '#'*) continue ;; esac
    patch -d "$src" -p1 --quiet < "$src/debian/patches/$patch"
  done < "$src/debian/patches/series"
  touch "$src/.tc-patched"
fi
# The ABI must be the installed one: Debian's options.h (inline namespace, no std:: aliases).
cmp "$src/absl/base/options.h" /usr/include/absl/base/options.h
done_step

# ---- 2. build-tsan -------------------------------------------------------------------------
step "build $build (-DTC_SANITIZE=thread)"
# DT_RPATH (not RUNPATH): it also applies to the libraries' own dependencies, so libgrpc.so's
# libabsl_synchronization is the instrumented one too.
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTC_SANITIZE=thread \
  -DTC_BUILD_BENCHMARKS=OFF -DTC_CUDA=OFF \
  "-DCMAKE_EXE_LINKER_FLAGS=-Wl,-rpath,$cache/lib -Wl,--disable-new-dtags" >/dev/null
cmake --build "$build" -j2 --target core_test batching_test disk_test server_test \
  tensorcompute-server
done_step

# ---- 3. the Abseil libraries those binaries load, with -fsanitize=thread -------------------
step "instrumented Abseil"
libs=$(for b in "${binaries[@]}"; do ldd "$build/$b"; done \
       | grep -o 'libabsl_[a-z0-9_]*\.so\.[0-9]*' | sort -u)
targets=$(echo "$libs" | sed -e 's/^libabsl_//' -e 's/\.so\..*//')
# As debian/rules builds its shared libraries (C++17, shared, no NDEBUG), plus TSan.
cmake -S "$src" -B "$cache/build" -G Ninja -DCMAKE_BUILD_TYPE=None -DCMAKE_CXX_STANDARD=17 \
  -DABSL_PROPAGATE_CXX_STD=ON -DBUILD_SHARED_LIBS=ON -DBUILD_TESTING=OFF \
  -DCMAKE_CXX_FLAGS="-g -O2 -fsanitize=thread" -DCMAKE_SHARED_LINKER_FLAGS=-fsanitize=thread \
  >/dev/null
# shellcheck disable=SC2086  # one target per word
cmake --build "$cache/build" -j2 --target $targets
mkdir -p "$cache/lib"
for lib in $libs; do
  cp -f "$(find "$cache/build/absl" -name "$lib" -print -quit)" "$cache/lib/$lib.tmp"
  mv -f "$cache/lib/$lib.tmp" "$cache/lib/$lib"
done
done_step

# ---- 4. every libabsl_* in the test processes is the instrumented copy ---------------------
step "check: binaries load the instrumented Abseil"
for b in "${binaries[@]}"; do
  if ldd "$build/$b" | grep 'libabsl_' | grep -v -- "=> $cache/lib/"; then
    echo "FAIL: $b loads the Abseil libraries above from outside $cache/lib" >&2
    exit 1
  fi
done
if ! nm -D "$cache/lib/libabsl_synchronization.so.${absl_version%%.*}" \
     | grep -q '__tsan_mutex_pre_lock'; then
  echo "FAIL: $cache/lib/libabsl_synchronization is not built with TSan" >&2
  exit 1
fi
echo "    $(echo "$libs" | wc -w) instrumented libabsl_*.so in $cache/lib, loaded by ${binaries[*]}"
# tools/ci/tsan_canary.cc: TSan must be silent about a counter under an absl::Mutex and a value
# handed over by an absl::Notification, and must still report the same counter without a lock.
canary=$build/tsan_canary
# shellcheck disable=SC2046  # pkg-config's flags are words
g++ -std=c++17 -O1 -g -fsanitize=thread tools/ci/tsan_canary.cc -o "$canary" \
  -Wl,-rpath,"$cache/lib" -Wl,--disable-new-dtags $(pkg-config --cflags --libs absl_synchronization)
export TSAN_OPTIONS="suppressions=$repo/tools/ci/tsan.supp:halt_on_error=1:second_deadlock_stack=1"
"$canary"
if "$canary" racy > "$build/tsan_canary_racy.log" 2>&1 \
   || ! grep -q 'WARNING: ThreadSanitizer: data race' "$build/tsan_canary_racy.log"; then
  cat "$build/tsan_canary_racy.log" >&2
  echo "FAIL: TSan did not report the canary's race" >&2
  exit 1
fi
echo "    canary: no report with absl::Mutex and absl::Notification, a report without the lock"
done_step

# ---- 5. the tests -------------------------------------------------------------------------
step "ctest -R '$tests_regex' under TSan"
# Reports go to files (log_path), printed here, so that one in a server the tests start as a
# subprocess fails the run even where the test does not look at the server's exit code.
# TSan makes everything 5 to 15 times slower, and a few server tests have wall-clock deadlines
# (e.g. a 30 s drain of eight 32 MiB answers on one thread), so a test that fails gets a second
# try; a TSan report fails the run all the same, in whichever try it was written.
reports=$build/tsan-reports
rm -rf "$reports" && mkdir -p "$reports"
rc=0
TSAN_OPTIONS="$TSAN_OPTIONS:log_path=$reports/tsan" \
  ctest --test-dir "$build" -R "$tests_regex" -E "$tests_excluded" --output-on-failure -j2 \
    --repeat until-pass:2 \
  || rc=$?
if [ -n "$(ls -A "$reports")" ]; then
  cat "$reports"/* >&2
  echo "FAIL: ThreadSanitizer reports above (also in $reports)" >&2
  exit 1
fi
[ $rc -eq 0 ] || exit $rc
echo "    no ThreadSanitizer report"
done_step

echo "tsan: all green in $((SECONDS - start)) s"
