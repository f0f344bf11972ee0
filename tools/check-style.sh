#!/usr/bin/env bash
# Architecture and style checks that CI runs (STYLE.md):
#  1. core/ knows nothing of the wire: no gRPC, protobuf or spdlog includes under core/.
#  2. CUDA headers only under core/cuda/ (and in the fake CUDA runtime, a test double that
#     defines the runtime's functions: tests/cuda/testing/).
#  3. Every C++ source is clang-format clean (Google style, .clang-format).
set -euo pipefail
cd "$(dirname "$0")/.."
fail=0

if grep -rnE '#include\s*[<"](grpc|grpcpp|google/protobuf|spdlog|tensorcompute/v1)' core/; then
  echo "check-style: core/ must not include gRPC, protobuf, spdlog or generated wire code" >&2
  fail=1
fi
if grep -rnE '#include\s*[<"]cuda' --include='*.h' --include='*.cc' --exclude-dir=.venv --exclude-dir=.venv-triton . \
     | grep -v '^./core/cuda/' | grep -v '^./tests/cuda/testing/' | grep -v '^./build'; then
  echo "check-style: only core/cuda/ may include CUDA headers" >&2
  fail=1
fi
if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  files=$(git ls-files '*.h' '*.cc' '*.cu' '*.cuh')
else  # an exported tree (no .git): every source outside build folders and the Python venv
  files=$(find . \( -path './build*' -o -path './.venv' -o -path './.venv-triton' -o -path './client/python/build' \) -prune \
          -o -type f \( -name '*.h' -o -name '*.cc' -o -name '*.cu' -o -name '*.cuh' \) -print)
fi
if [ -n "$files" ] && ! clang-format --dry-run --Werror $files; then
  echo "check-style: run clang-format -i on the files above" >&2
  fail=1
fi
[ $fail -eq 0 ] && echo "check-style: ok"
exit $fail
