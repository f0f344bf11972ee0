#!/usr/bin/env bash
# The compiler launcher of every build (CMakeLists.txt sets it when ccache is installed): ccache
# with the project's settings, so that a clean clone in any folder, CI's image build and the
# sanitizer builds reuse what an earlier build compiled.
#   CCACHE_DIR      /var/cache/tensorcompute/ccache when it can be written (it outlives clones;
#                   tools/ci/tsan.sh keeps its Abseil there too), else
#                   ~/.cache/tensorcompute-ccache; an explicit CCACHE_DIR wins.
#   CCACHE_BASEDIR  the repository root: paths under it are hashed relative to the build folder,
#                   so that another clone's build/ hits the same entries.
#   hash_dir off    the working directory is not hashed either (it only reaches debug info).
# ccache keys an entry by the compiler, its flags and the preprocessed source (every header
# included, as read now), so a changed header misses for every file that includes it
# (tests/tools/ccache_test.sh checks it).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
if [ -z "${CCACHE_DIR:-}" ]; then
  shared=/var/cache/tensorcompute/ccache
  if mkdir -p "$shared" 2>/dev/null && [ -w "$shared" ]; then
    export CCACHE_DIR="$shared"
  else
    export CCACHE_DIR="${HOME:-/tmp}/.cache/tensorcompute-ccache"
  fi
fi
export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$root}"
export CCACHE_NOHASHDIR="${CCACHE_NOHASHDIR:-true}"
# Precompiled headers (CMake's target_precompile_headers) need the first four to be cacheable.
# locale: ccache hashes LANG and LC_* by default (they only translate the compiler's messages),
# and the image's build stage has no LANG where CI has C.UTF-8: without it, the image's compile
# missed every entry of the Release build just before it.
export CCACHE_SLOPPINESS="${CCACHE_SLOPPINESS:-pch_defines,time_macros,include_file_mtime,include_file_ctime,locale}"
export CCACHE_MAXSIZE="${CCACHE_MAXSIZE:-20G}"
exec ccache "$@"
