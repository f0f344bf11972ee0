#!/usr/bin/env bash
# Architecture and style checks that CI runs (STYLE.md):
#  1. core/ knows nothing of the wire: no gRPC, protobuf or spdlog includes under core/.
#  2. CUDA headers only under core/cuda/ (and in the fake CUDA runtime, a test double that
#     defines the runtime's functions: tests/cuda/testing/).
#  2b. io_uring (liburing) only under core/disk/, whose headers keep it out of their API.
#  3. server/kserve/ is a front end on the server, never the reverse: nothing outside it
#     includes it (server/main.cc, which assembles the binary, and its own tests excepted), and
#     nothing else in server/ (the compute entry server/compute_service.* included) includes
#     KServe's protocol (inference/, proto/kserve_wire.h).
#  4. server/'s layers include only the layers below them (server/CMakeLists.txt): metrics/,
#     then admission/, compute/, native/, then the folder itself (start-up and options), then
#     kserve/ (rule 3).
#  5. Every C++ source is clang-format clean (Google style, .clang-format).
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
if grep -rnE '#include\s*[<"]liburing' --include='*.h' --include='*.cc' core server client tools tests \
     | grep -v '^core/disk/[a-z_]*\.cc:'; then
  echo "check-style: only core/disk/'s sources may include liburing" >&2
  fail=1
fi
if grep -rnE '#include\s*"server/kserve/' --include='*.h' --include='*.cc' \
     core proto client server tools 2>/dev/null | grep -vE '^(server/kserve/|server/main\.cc:)'; then
  echo "check-style: only server/kserve/ itself and server/main.cc may include server/kserve/" >&2
  fail=1
fi
if grep -rnE '#include\s*[<"](inference/|proto/kserve)' --include='*.h' --include='*.cc' server \
     | grep -v '^server/kserve/'; then
  echo "check-style: only server/kserve/ may include inference/ or proto/kserve_wire.h" \
       "(server/compute_service.* knows no protocol)" >&2
  fail=1
fi
# Each server layer, with what it must not include: the layers above it and the top folder.
server_layers=(metrics admission compute native)
for i in "${!server_layers[@]}"; do
  above=("${server_layers[@]:$((i + 1))}")
  pattern='#include\s*"server/([a-z_]+\.h|kserve/'
  for layer in "${above[@]}"; do pattern+="|$layer/"; done
  pattern+=')'
  below="${server_layers[*]:0:$i}"
  if grep -rnE "$pattern" --include='*.h' --include='*.cc' "server/${server_layers[$i]}"; then
    echo "check-style: server/${server_layers[$i]}/ may include only the server layers below it" \
         "(${below:-none}), never server/*.h or the layers above (server/CMakeLists.txt)" >&2
    fail=1
  fi
done
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
