#!/usr/bin/env bash
# The compiler cache (tools/ccache.sh) is never wrong and works across clones: two "clones" in
# different folders, each with its own copy of the launcher, compile the same sources with
# absolute paths (as CMake does), under different locales. The second clone's compiles hit what the first compiled; a
# changed header misses for the file that includes it (and only for it), and the program then
# prints the header's new value.
#   bash tests/tools/ccache_test.sh     (exit 0: all held)
set -euo pipefail
launcher="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)/tools/ccache.sh"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export CCACHE_DIR="$work/cache"

for clone in one two; do
  mkdir -p "$work/$clone/tools" "$work/$clone/src" "$work/$clone/build"
  cp "$launcher" "$work/$clone/tools/ccache.sh"
  printf '#define VALUE 1\n' > "$work/$clone/src/value.h"
  printf '#include "value.h"\nint Value() { return VALUE; }\n' > "$work/$clone/src/value.cc"
  printf '#include <cstdio>\nint Value();\nint main() { std::printf("%%d\\n", Value()); }\n' \
    > "$work/$clone/src/main.cc"
done

# Builds clone $1 and prints what its program prints. Clone one compiles with LANG=C.UTF-8 (as
# CI's host), clone two with no locale at all (as the image's build stage): a locale only
# translates the compiler's messages, so it must not keep the second from hitting.
build() {
  local root="$work/$1" locale=(env LANG=C.UTF-8)
  [ "$1" = one ] || locale=(env -u LANG -u LC_ALL -u LC_CTYPE -u LC_MESSAGES)
  (
    cd "$root/build"
    for f in value main; do
      "${locale[@]}" bash "$root/tools/ccache.sh" g++ -O2 -I"$root/src" -c "$root/src/$f.cc" -o "$f.o"
    done
    g++ value.o main.o -o program
    ./program
  )
}
stats() {
  ccache --print-stats | awk -F'\t' '
    $1 == "direct_cache_hit" || $1 == "preprocessed_cache_hit" { h += $2 }
    $1 == "cache_miss" { m += $2 }
    END { print h + 0, m + 0 }'
}
check() {  # check WHAT GOT WANT
  if [ "$2" != "$3" ]; then echo "ccache_test: $1: got '$2', want '$3'" >&2; exit 1; fi
  echo "ccache_test: $1: $2"
}

ccache --zero-stats > /dev/null
check "first clone prints" "$(build one)" 1
check "first clone: hits, misses" "$(stats)" "0 2"
ccache --zero-stats > /dev/null
check "second clone, another folder, prints" "$(build two)" 1
check "second clone: hits, misses" "$(stats)" "2 0"
printf '#define VALUE 2\n' > "$work/two/src/value.h"
ccache --zero-stats > /dev/null
check "second clone after a header change prints" "$(build two)" 2
check "after the header change: hits, misses" "$(stats)" "1 1"
echo "ccache_test: ok"
