#!/usr/bin/env bash
# package_install_test (tests/package/CMakeLists.txt sets the environment below): what a user of
# the installed tensorcompute gets.
#   1. cmake --install of this build into a temporary prefix, which is then moved elsewhere
#      (the CMake package must be relocatable) and must name no path of this source or build tree;
#   2. consumer/, an outside project, configured with CMAKE_PREFIX_PATH only and built against
#      it (find_package(tensorcompute CONFIG), tensorcompute::client);
#   3. the installed tensorcompute-server started on a free port, the installed CLI's health
#      check and the consumer's Gathers against it (a wrong answer fails the test);
#   4. cpack -G DEB: the tensorcompute .deb holds usr/bin/tensorcompute-server and
#      usr/bin/tensorcompute and has a Depends line (dpkg-shlibdeps); tensorcompute-dev holds
#      the client library, its headers and the CMake package.
# Exits 0 when all hold, 1 when one does not, 77 (skipped) when a tool it needs is missing.
set -euo pipefail

: "${TC_BUILD_DIR:?}" "${TC_CMAKE:?}" "${TC_CPACK:?}" "${TC_GENERATOR:?}" "${TC_CXX:?}"
: "${TC_CONSUMER_SOURCE:?}" "${TC_VERSION:?}"
config="${TC_CONFIG:-}"
source_dir="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"

fail() { echo "FAILED: $*" >&2; exit 1; }
skip() { echo "SKIPPED: $*"; exit 77; }
step() { echo "--- $* ($SECONDS s)"; }

for tool in dpkg-deb dpkg-shlibdeps; do
  command -v "$tool" >/dev/null || skip "no $tool (Debian's dpkg-dev; tools/install-deps.sh installs it)"
done

work="$(mktemp -d "${TMPDIR:-/tmp}/tc-package-test.XXXXXX")"
server_pid=""
cleanup() {
  if [ -n "$server_pid" ] && kill -0 "$server_pid" 2>/dev/null; then
    kill "$server_pid" 2>/dev/null || true
    wait "$server_pid" 2>/dev/null || true
  fi
  rm -rf "$work"
}
trap cleanup EXIT

# --- 1. install, move, look -------------------------------------------------------------
step "cmake --install $TC_BUILD_DIR --prefix $work/stage"
"$TC_CMAKE" --install "$TC_BUILD_DIR" --prefix "$work/stage" ${config:+--config "$config"} \
  > "$work/install.log" || { cat "$work/install.log"; fail "cmake --install"; }
mv "$work/stage" "$work/prefix"
prefix="$work/prefix"

for f in bin/tensorcompute-server bin/tensorcompute; do
  [ -x "$prefix/$f" ] || fail "the install has no executable $f"
done
for h in client/client.h core/dtype.h core/tensor.h tensorcompute/v1/tensorcompute.pb.h \
         tensorcompute/v1/tensorcompute.grpc.pb.h; do
  [ -f "$prefix/include/tensorcompute/$h" ] || fail "the install has no include/tensorcompute/$h"
done
config_file="$(find "$prefix" -name tensorcompute-config.cmake)"
[ -n "$config_file" ] || fail "the install has no tensorcompute-config.cmake"
echo "package: ${config_file#"$prefix"/}"
cmake_dir="$(dirname "$config_file")"
if grep -n -F -e "$source_dir" -e "$TC_BUILD_DIR" "$cmake_dir"/*.cmake; then
  fail "the installed CMake package names this source or build tree (above): not relocatable"
fi

# --- 2. an outside project against the moved prefix ------------------------------------
step "configure and build consumer/ with CMAKE_PREFIX_PATH=$prefix"
"$TC_CMAKE" -S "$TC_CONSUMER_SOURCE" -B "$work/consumer" -G "$TC_GENERATOR" \
  ${TC_MAKE_PROGRAM:+-DCMAKE_MAKE_PROGRAM="$TC_MAKE_PROGRAM"} \
  -DCMAKE_CXX_COMPILER="$TC_CXX" -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$prefix" \
  > "$work/consumer-configure.log" 2>&1 \
  || { cat "$work/consumer-configure.log"; fail "configuring consumer/ against the install"; }
"$TC_CMAKE" --build "$work/consumer" > "$work/consumer-build.log" 2>&1 \
  || { cat "$work/consumer-build.log"; fail "building consumer/ against the install"; }
# Its headers and libraries came from the install, not from this tree.
if grep -r -l -I -F -e "-I$source_dir" -e "-isystem $source_dir" -e "$TC_BUILD_DIR" \
     "$work/consumer"; then
  fail "consumer/ was built with include paths or libraries of this tree (files above)"
fi

# --- 3. the installed server, CLI and the consumer ------------------------------------
step "start $prefix/bin/tensorcompute-server on a free port"
"$prefix/bin/tensorcompute-server" --listen=127.0.0.1:0 --metrics_listen=127.0.0.1:0 \
  --device=cpu --cpu_threads=1 > "$work/server.log" 2>&1 &
server_pid=$!
port=""
for _ in $(seq 300); do
  port="$(grep -o -m1 '\bport=[0-9]*' "$work/server.log" | cut -d= -f2 || true)"
  [ -n "$port" ] && break
  kill -0 "$server_pid" 2>/dev/null || { cat "$work/server.log"; fail "the installed server exited"; }
  sleep 0.1
done
[ -n "$port" ] || { cat "$work/server.log"; fail "the installed server printed no port in 30 s"; }

"$prefix/bin/tensorcompute" health --target "127.0.0.1:$port" \
  || fail "the installed CLI's health check of 127.0.0.1:$port"
step "consumer 127.0.0.1:$port"
"$work/consumer/consumer" "127.0.0.1:$port" || fail "the consumer's answers (above)"

kill "$server_pid"
wait "$server_pid" || { cat "$work/server.log"; fail "the server's exit on SIGTERM"; }
server_pid=""

# --- 4. Debian packages ------------------------------------------------------------------
step "cpack -G DEB"
"$TC_CPACK" -G DEB --config "$TC_BUILD_DIR/CPackConfig.cmake" -B "$work/deb" \
  ${config:+-C "$config"} > "$work/cpack.log" 2>&1 || { cat "$work/cpack.log"; fail "cpack -G DEB"; }
runtime_deb="$(ls "$work"/deb/tensorcompute_"$TC_VERSION"_*.deb 2>/dev/null || true)"
dev_deb="$(ls "$work"/deb/tensorcompute-dev_"$TC_VERSION"_*.deb 2>/dev/null || true)"
[ -f "$runtime_deb" ] || { cat "$work/cpack.log"; fail "no tensorcompute_${TC_VERSION}_*.deb"; }
[ -f "$dev_deb" ] || { cat "$work/cpack.log"; fail "no tensorcompute-dev_${TC_VERSION}_*.deb"; }

dpkg-deb --info "$runtime_deb" > "$work/runtime.info"
dpkg-deb --contents "$runtime_deb" > "$work/runtime.contents"
cat "$work/runtime.info" "$work/runtime.contents"
grep -q '^ Package: tensorcompute$' "$work/runtime.info" || fail "the .deb's Package is not tensorcompute"
grep -q "^ Version: $TC_VERSION\$" "$work/runtime.info" || fail "the .deb's Version is not $TC_VERSION"
grep -q '^ Maintainer: .' "$work/runtime.info" || fail "the .deb has no Maintainer"
grep -q '^ Depends: .*libc6' "$work/runtime.info" \
  || fail "the .deb has no Depends line from dpkg-shlibdeps (libc6 at least)"
grep -q '^ Depends: .*libgrpc++' "$work/runtime.info" \
  || fail "the .deb's Depends lacks gRPC (dpkg-shlibdeps did not scan the server)"
for f in usr/bin/tensorcompute-server usr/bin/tensorcompute; do
  grep -q " \./$f\$" "$work/runtime.contents" || fail "the .deb does not hold /$f"
done
if grep -q -e '\.a$' -e '\.h$' "$work/runtime.contents"; then
  fail "the runtime .deb holds libraries or headers (the -dev package's)"
fi

dpkg-deb --contents "$dev_deb" > "$work/dev.contents"
for f in 'libtc_client\.a' 'include/tensorcompute/client/client\.h' \
         'include/tensorcompute/tensorcompute/v1/tensorcompute\.pb\.h' \
         'cmake/tensorcompute/tensorcompute-config\.cmake'; do
  grep -q "$f\$" "$work/dev.contents" || fail "the -dev .deb holds no $f"
done
grep -q '^ Depends: .*libgrpc++-dev' <(dpkg-deb --info "$dev_deb") \
  || fail "the -dev .deb does not depend on libgrpc++-dev"

step "all checks passed"
