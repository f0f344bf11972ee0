#!/usr/bin/env bash
# Builds the container image from the repository's Dockerfile, unchanged, and checks it end to
# end without a Docker engine: buildah builds it and podman runs it (vfs storage, chroot build
# isolation, runc; what works in an unprivileged CI sandbox). Run as root on Debian 12:
#   bash deploy/test-image.sh
# It installs what it lacks (buildah, podman, debootstrap, runc), makes the Debian 12 base image
# from debootstrap (the rootfs is cached in /var/cache/tensorcompute), and checks that
#   - the server in the container becomes SERVING, and answers a Gather and a GatherNd sent
#     from the host with the CLI (build/client/tensorcompute, or $TC_CLI) exactly;
#   - the image's HEALTHCHECK passes, the server is PID 1 and runs as uid 10001, and the
#     image has no compiler;
#   - `podman stop` (SIGTERM) makes it drain and exit 0 by itself, well before the kill;
#   - the edge (deploy/edge/Dockerfile, unchanged: Debian's nginx, docs/deploy.md "The edge")
#     in front of it, as deployed: the server listening on loopback only, the edge sharing its
#     network namespace, TLS on 8443 with certificates made for the run, tokens required. The
#     same Gather and GatherNd checks pass through the edge from the host CLI over TLS, then
#     tests/deploy/edge_test.py against the pair (tritonclient over TLS, and hostile clients:
#     bodies, header floods, slow and idle connections, HTTP/2 rapid reset; none reaches the
#     server unbounded), with .venv-triton's Python; both stop cleanly.
# Everything it creates is removed on exit, except the base images and the Dockerfile's
# toolchain stage (TC_KEEP_BASE=0 removes them too; the next run makes the base images again
# from the cache in a few seconds, the toolchain with apt). The compile goes through this
# machine's compiler cache (tools/ccache.sh), mounted into the build. Prints the image
# size and the time of each step. TC_CLI=PATH: the CLI to use; TC_IMAGE=NAME: check that image
# instead of building one; TC_DEBIAN_MIRROR: debootstrap's mirror.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$(pwd)

base=localhost/debian:12            # debootstrap minbase, apt sources as on this machine
base_slim=localhost/debian:12-slim  # the same without docs, man pages and locales (debian:12-slim)
toolchain=localhost/tensorcompute-toolchain:12  # the Dockerfile's toolchain stage, kept
cache=/var/cache/tensorcompute/bookworm-minbase.tar
# TC_IMAGE=NAME checks an image built before instead of building one (and keeps it).
image=${TC_IMAGE:-localhost/tensorcompute:test-$$}
container=tensorcompute-test-$$
edge_image=localhost/tensorcompute-edge:test-$$
edge_server=tensorcompute-edge-server-$$   # the server behind the edge
edge=tensorcompute-edge-$$                 # the edge, in edge_server's network namespace
uid=10001
work=$(mktemp -d /tmp/tensorcompute-image-test.XXXXXX)

# runc, and explicit limits: crun and podman's default ulimits fail in CI's sandbox.
run_flags=(--runtime runc --ulimit nofile=1024:1024 --ulimit nproc=1000:1000)

podman() { command podman --storage-driver vfs "$@"; }
buildah() { command buildah --storage-driver vfs "$@"; }
# For a container with a HEALTHCHECK, podman asks systemd for a timer that runs it, and logs
# "unable to get systemd connection" where there is none (CI), then goes on without
# (--health-interval=disable does not stop it in podman 4.3). Step 8 runs the check itself.
# This runs a podman command without those lines.
without_timer_noise() {
  local rc=0
  "$@" 2> "$work/podman.err" || rc=$?
  grep -v 'unable to get systemd connection' "$work/podman.err" >&2 || true
  return $rc
}

# ---- steps, timing, failure and cleanup ---------------------------------------------------
start=$SECONDS
step_name=""
step_start=$SECONDS
timings=()
step() {
  end_step
  step_name=$1
  step_start=$SECONDS
  echo
  echo "=== $step_name"
}
end_step() {
  if [ -n "$step_name" ]; then
    timings+=("$(printf '%5d s  %s' $((SECONDS - step_start)) "$step_name")")
    step_name=""
  fi
}
fail() {
  echo "FAIL: $*" >&2
  exit 1
}
cleanup() {
  local rc=$?
  set +e
  if [ $rc -ne 0 ] && podman container exists "$container" 2>/dev/null; then
    echo "--- container log ($container)"
    podman logs "$container" 2>&1 | tail -100
    echo "--- container state"
    podman inspect -f '{{.State.Status}} exit={{.State.ExitCode}} {{.State.Error}}' "$container"
  fi
  for c in "$edge_server" "$edge"; do
    if [ $rc -ne 0 ] && podman container exists "$c" 2>/dev/null; then
      echo "--- container log ($c)"
      podman logs "$c" 2>&1 | tail -40
    fi
  done
  podman rm -f -t 0 "$container" "$edge" "$edge_server" >/dev/null 2>&1
  if [ -z "${TC_IMAGE:-}" ]; then podman rmi -f "$image" >/dev/null 2>&1; fi
  podman rmi -f "$edge_image" >/dev/null 2>&1
  if [ "${TC_KEEP_BASE:-1}" = 0 ]; then
    podman rmi -f "$toolchain" "$base" "$base_slim" >/dev/null 2>&1
  fi
  # The intermediate layers of this run's builds (--layers), the tagged images' excepted.
  buildah rmi --prune >/dev/null 2>&1
  rm -rf "$work"
  if [ $rc -ne 0 ]; then echo "test-image: FAILED (exit $rc) after $((SECONDS - start)) s" >&2; fi
  exit $rc
}
trap cleanup EXIT

# ---- 1. tools ------------------------------------------------------------------------------
step "tools: buildah, podman, debootstrap, runc"
[ "$(id -u)" -eq 0 ] || fail "run as root (buildah and podman with vfs storage, debootstrap)"
missing=()
for p in buildah podman debootstrap runc; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed'; then
    missing+=("$p")
  fi
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "installing ${missing[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
fi
echo "$(command buildah --version), $(command podman --version), $(runc --version | head -n1)"

# ---- 2. the CLI on the host ----------------------------------------------------------------
step "CLI on the host"
if [ -n "${TC_CLI:-}" ]; then
  cli=$TC_CLI
else
  # build/ as README makes it (never other options in it: the test command reuses it).
  cli=$repo/build/client/tensorcompute
  if [ ! -f build/CMakeCache.txt ]; then
    bash tools/install-deps.sh
    cmake -S . -B build -G Ninja
  fi
  cmake --build build -j2 --target tensorcompute
fi
[ -x "$cli" ] || fail "no CLI at $cli"
echo "CLI: $cli"

# ---- 3. base images ------------------------------------------------------------------------
step "base images $base and $base_slim"
if podman image exists "$base" && podman image exists "$base_slim"; then
  echo "present"
else
  if [ ! -f "$cache" ]; then
    echo "debootstrap bookworm (minbase) -> $cache"
    mkdir -p "$(dirname "$cache")"
    debootstrap --variant=minbase bookworm "$work/debootstrap" \
      "${TC_DEBIAN_MIRROR:-http://deb.debian.org/debian}" > "$work/debootstrap.log" 2>&1 \
      || { tail -20 "$work/debootstrap.log"; fail "debootstrap"; }
    tar -C "$work/debootstrap" -cf "$cache.$$" . && mv "$cache.$$" "$cache"
    rm -rf "$work/debootstrap"
  fi
  rootfs=$work/rootfs
  mkdir "$rootfs"
  tar -C "$rootfs" -xf "$cache"
  # apt inside the build uses the package sources, apt settings and CA certificates of this
  # machine (bookworm, bookworm-updates, bookworm-security here; a mirror where CI has one).
  # debootstrap's own sources.list names only bookworm main.
  rm -rf "$rootfs/etc/apt" && cp -a /etc/apt "$rootfs/etc/apt"
  cp /etc/ssl/certs/ca-certificates.crt "$rootfs/etc/ssl/certs/" 2>/dev/null || true
  # as in Docker's debian images: no package lists or caches
  rm -rf "$rootfs"/var/lib/apt/lists/* "$rootfs"/var/cache/apt/*.bin \
    "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/log/*.log
  changes=(--change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin'
    --change 'CMD ["bash"]')
  tar -C "$rootfs" -c . | podman import --quiet "${changes[@]}" - "$base" >/dev/null
  # -slim: the dpkg path excludes of Docker's debian:12-slim, and those paths emptied
  cat > "$rootfs/etc/dpkg/dpkg.cfg.d/docker-slim" <<'EOF'
path-exclude /usr/share/doc/*
path-include /usr/share/doc/*/copyright
path-exclude /usr/share/man/*
path-exclude /usr/share/groff/*
path-exclude /usr/share/info/*
path-exclude /usr/share/locale/*
path-exclude /usr/share/lintian/*
path-exclude /usr/share/linda/*
EOF
  find "$rootfs/usr/share/doc" -mindepth 1 ! -name copyright ! -type d -delete
  find "$rootfs/usr/share/doc" -mindepth 1 -type d -empty -delete
  rm -rf "$rootfs"/usr/share/{man,groff,info,locale,lintian,linda}/*
  tar -C "$rootfs" -c . | podman import --quiet "${changes[@]}" - "$base_slim" >/dev/null
  rm -rf "$rootfs"
fi
for b in "$base" "$base_slim"; do
  echo "$b: $(( $(podman image inspect --format '{{.Size}}' "$b") / 1000000 )) MB"
done

# ---- 4. build ------------------------------------------------------------------------------
step "build $image (buildah bud, Dockerfile unchanged)"
# The toolchain stage is built alone first and tagged ($toolchain, kept like the base images),
# so that --layers finds its apt layer and the next build installs nothing; the layers this
# build adds above it are pruned on exit. The compiler cache of this machine (tools/ccache.sh)
# is mounted where the Dockerfile's CCACHE_DIR points.
ccache_dir=${CCACHE_DIR:-/var/cache/tensorcompute/ccache}
mkdir -p "$ccache_dir"
# docker format: the OCI image format has no HEALTHCHECK, and buildah would drop it.
# The whole log is kept; the steps, the compile progress and warnings are shown.
build_image() {
  local rc
  set +e
  if ! buildah bud --isolation chroot --format docker --layers --target toolchain \
      --build-arg BUILD_IMAGE="$base" -f Dockerfile -t "$toolchain" . > "$work/toolchain.log" 2>&1; then
    tail -30 "$work/toolchain.log"
    fail "buildah bud --target toolchain failed"
  fi
  grep -q 'Using cache' "$work/toolchain.log" && echo "toolchain: $toolchain from the layer cache"
  buildah bud --isolation chroot --format docker --layers \
    --volume "$ccache_dir:/ccache" \
    --build-arg BUILD_IMAGE="$base" --build-arg RUNTIME_IMAGE="$base_slim" --build-arg JOBS=2 \
    -f Dockerfile -t "$image" . 2>&1 | tee "$work/build.log" \
    | grep --line-buffered -E \
      '^(STEP|COMMIT|runtime packages:|\[[0-9]+/[0-9]+\] )|(error|warning|WARN)'
  rc=${PIPESTATUS[0]}
  set -e
  if [ "$rc" -ne 0 ] || ! podman image exists "$image"; then
    tail -50 "$work/build.log"
    fail "buildah bud exited $rc"
  fi
}
if [ -n "${TC_IMAGE:-}" ]; then
  podman image exists "$image" || fail "TC_IMAGE=$image does not exist"
  echo "not building: TC_IMAGE=$image"
else
  build_image
fi
size_mb=$(( $(podman image inspect --format '{{.Size}}' "$image") / 1000000 ))
echo "image size: $size_mb MB"

# ---- 5. image configuration ----------------------------------------------------------------
step "image configuration"
config() { podman image inspect --format "$1" "$image"; }
[ "$(config '{{.Config.User}}')" = "$uid:$uid" ] || fail "User is '$(config '{{.Config.User}}')'"
[ "$(config '{{.Config.StopSignal}}')" = SIGTERM ] || fail "StopSignal is not SIGTERM"
[ "$(config '{{json .Config.Entrypoint}}')" = '["/usr/local/bin/tensorcompute-server"]' ] \
  || fail "Entrypoint is $(config '{{json .Config.Entrypoint}}')"
ports=$(config '{{json .Config.ExposedPorts}}')
[[ $ports == *'"50051/tcp"'* && $ports == *'"9090/tcp"'* ]] || fail "ExposedPorts are $ports"
health=$(podman inspect --type image --format '{{json .HealthCheck}}' "$image" 2>/dev/null \
  || config '{{json .Config.Healthcheck}}')
[[ $health == *'"/usr/local/bin/tensorcompute","health","--target","localhost:50051"'* ]] \
  || fail "HEALTHCHECK is $health"
echo "user $uid:$uid, SIGTERM, ports $ports"
echo "healthcheck $health"
leftovers=$(podman run --rm "${run_flags[@]}" --no-healthcheck --entrypoint sh "$image" -c \
  'command -v g++ gcc cc c++ cmake ld as; ls -d /usr/include/grpcpp /src 2>/dev/null; true')
[ -z "$leftovers" ] || fail "the runtime image has build tools or sources: $leftovers"
echo "no compiler, linker, headers or sources in the image"

# ---- 6. run --------------------------------------------------------------------------------
step "run $container and wait for SERVING"
# Locked down as a Kubernetes securityContext would have it: read-only root filesystem (podman
# mounts a tmpfs on /tmp), no capabilities, no privilege escalation.
without_timer_noise podman run -d --name "$container" "${run_flags[@]}" --log-driver k8s-file \
  --read-only --cap-drop all --security-opt no-new-privileges \
  -p 127.0.0.1::50051 "$image" >/dev/null
# (No `| head` or `grep -m1` on a live pipe: with pipefail, the writer's SIGPIPE fails the script.)
ports=$(podman port "$container" 50051/tcp)
port=${ports%%$'\n'*}
port=${port##*:}
[ -n "$port" ] || fail "no host port for 50051"
target=127.0.0.1:$port
serving=0
for _ in $(seq 120); do
  [ "$(podman inspect -f '{{.State.Running}}' "$container")" = true ] || fail "the container exited"
  if "$cli" health --target "$target" --timeout 2 >/dev/null 2>&1; then serving=1; break; fi
  sleep 0.5
done
[ $serving = 1 ] || fail "not SERVING on $target after 60 s"
"$cli" health --target "$target" --timeout 2
logs=$(podman logs "$container" 2>&1)
grep -m1 'listening on' <<<"$logs"

# ---- 7. requests from the host -------------------------------------------------------------
# check_requests TARGET [CLI FLAGS...]: tf.gather and tf.gather_nd examples answered exactly, and
# an index out of range is INVALID_ARGUMENT (exit 3), saying where. Run direct, then through
# the edge.
check_requests() {
  local target=$1
  shift
  cd "$work"
  # tf.gather: rows 2 and -3 of a 3x2 matrix
  echo '{"dtype": "float32", "shape": [3, 2], "values": [1, 2, 3, 4, 5, 6]}' > params.json
  echo '{"dtype": "int64", "values": [2, -3]}' > indices.json
  "$cli" gather --target "$target" "$@" --params params.json --indices indices.json \
    --out gather.json
  local expected='{"dtype": "float32", "shape": [2, 2], "values": [5, 6, 1, 2]}'
  [ "$(cat gather.json)" = "$expected" ] || fail "gather answered $(cat gather.json), not $expected"
  echo "gather:    $(cat gather.json)"
  # tf.gather_nd, from its documentation: indices [[[0, 1]], [[1, 0]]] into a 2x2x2 of strings
  echo '{"dtype": "string", "shape": [2, 2, 2],
         "values": ["a0", "b0", "c0", "d0", "a1", "b1", "c1", "d1"]}' > nd_params.json
  echo '{"dtype": "int32", "shape": [2, 1, 2], "values": [0, 1, 1, 0]}' > nd_indices.json
  "$cli" gather-nd --target "$target" "$@" --params nd_params.json --indices nd_indices.json \
    --out gather_nd.json
  expected='{"dtype": "string", "shape": [2, 1, 2], "values": ["c0", "d0", "a1", "b1"]}'
  [ "$(cat gather_nd.json)" = "$expected" ] \
    || fail "gather-nd answered $(cat gather_nd.json), not $expected"
  echo "gather-nd: $(cat gather_nd.json)"
  echo '{"dtype": "int64", "values": [3]}' > bad_indices.json
  local rc=0
  "$cli" gather --target "$target" "$@" --params params.json --indices bad_indices.json \
    > bad.out 2> bad.err || rc=$?
  if [ $rc != 3 ] || ! grep -q 'INVALID_ARGUMENT: indices\[0\] = 3 is not in \[-3, 3)' bad.err; then
    fail "a bad index gave exit $rc: $(cat bad.err)"
  fi
  echo "bad index: $(cat bad.err)"
  cd "$repo"
}
step "Gather and GatherNd from the host"
check_requests "$target"

# ---- 8. inside the container ---------------------------------------------------------------
step "inside the container: HEALTHCHECK, PID 1, uid"
if podman healthcheck run "$container" > "$work/healthcheck.out" 2>&1; then
  echo "podman healthcheck run: exit 0," \
    "$(podman inspect -f '{{.State.Health.Status}}' "$container" 2>/dev/null || true)"
else
  # podman runs the image's HEALTHCHECK command; without systemd some podman versions cannot.
  echo "podman healthcheck run failed ($(tr '\n' ' ' < "$work/healthcheck.out"));" \
    "running the command"
  podman exec "$container" /usr/local/bin/tensorcompute health --target localhost:50051 \
    --timeout 2 || fail "the HEALTHCHECK command failed in the container"
fi
pid1=$(podman exec "$container" sh -c 'tr "\0" " " < /proc/1/cmdline')
[[ $pid1 == "/usr/local/bin/tensorcompute-server "* ]] || fail "PID 1 is '$pid1'"
uids=$(podman exec "$container" sh -c 'grep ^Uid: /proc/1/status' | awk '{print $2, $3, $4, $5}')
[ "$uids" = "$uid $uid $uid $uid" ] || fail "PID 1 runs as uids $uids"
gids=$(podman exec "$container" sh -c 'grep ^Gid: /proc/1/status' | awk '{print $2}')
[ "$gids" = "$uid" ] || fail "PID 1 runs as gid $gids"
echo "PID 1: $pid1(uid $uid, gid $gids)"

# ---- 9. stop: drain and exit 0 -------------------------------------------------------------
step "podman stop -t 20: drain and exit 0"
stop_start=$EPOCHREALTIME
without_timer_noise podman stop -t 20 "$container" >/dev/null
stop_s=$(awk -v a="$EPOCHREALTIME" -v b="$stop_start" 'BEGIN { printf "%.2f", a - b }')
code=$(podman inspect -f '{{.State.ExitCode}}' "$container")
podman logs "$container" > "$work/server.log" 2>&1
tail -5 "$work/server.log"
[ "$code" = 0 ] || fail "exit code $code after podman stop (137: killed after the timeout)"
awk -v s="$stop_s" 'BEGIN { exit !(s < 10) }' || fail "podman stop took $stop_s s"
for line in 'received SIGTERM, draining' 'drained: ' 'exiting'; do
  grep -q "$line" "$work/server.log" || fail "no '$line' in the server log"
done
echo "stopped in ${stop_s} s, exit code 0, drained"

# ---- 10. the edge ----------------------------------------------------------------------------
step "build $edge_image (deploy/edge/Dockerfile, unchanged)"
set +e
buildah bud --isolation chroot --format docker --build-arg RUNTIME_IMAGE="$base_slim" \
  -f deploy/edge/Dockerfile -t "$edge_image" deploy/edge > "$work/edge-build.log" 2>&1
rc=$?
set -e
[ $rc -eq 0 ] || { tail -30 "$work/edge-build.log"; fail "buildah bud (edge) exited $rc"; }
echo "edge image size: $(( $(podman image inspect --format '{{.Size}}' "$edge_image") / 1000000 )) MB," \
  "$(podman run --rm "${run_flags[@]}" --entrypoint /usr/sbin/nginx "$edge_image" -v 2>&1)"

step "the server on loopback, the edge in its network namespace (TLS :8443, tokens)"
# A certificate for localhost (its own CA: the clients trust it directly) and a token, readable
# by the two images' users (10001, 10002).
mkdir -p "$work/tls" "$work/auth"
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 1 \
  -keyout "$work/tls/tls.key" -out "$work/tls/tls.crt" -subj /CN=localhost \
  -addext subjectAltName=DNS:localhost,IP:127.0.0.1 2>/dev/null
token=$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')
echo "$token" > "$work/auth/tokens"
echo "$token" > "$work/token"
chmod 755 "$work" "$work/tls" "$work/auth"
chmod 644 "$work/tls/tls.key" "$work/tls/tls.crt" "$work/auth/tokens"
# Only the edge's port (and the metrics, for the test) is published: the server's gRPC and
# HTTP ports are on the loopback of the shared namespace.
without_timer_noise podman run -d --name "$edge_server" "${run_flags[@]}" --log-driver k8s-file \
  --read-only --cap-drop all --security-opt no-new-privileges \
  -v "$work/auth:/etc/tensorcompute/auth:ro" -p 127.0.0.1::8443 -p 127.0.0.1::9090 "$image" \
  --listen=127.0.0.1:50051 --http_listen=127.0.0.1:8000 --trusted_proxies=127.0.0.1,::1 \
  --auth_token_file=/etc/tensorcompute/auth/tokens >/dev/null
without_timer_noise podman run -d --name "$edge" "${run_flags[@]}" --log-driver k8s-file \
  --read-only --cap-drop all --security-opt no-new-privileges \
  --network "container:$edge_server" -v "$work/tls:/etc/tensorcompute/tls:ro" \
  "$edge_image" >/dev/null
ports=$(podman port "$edge_server" 8443/tcp)
edge_port=${ports%%$'\n'*}
edge_port=${edge_port##*:}
ports=$(podman port "$edge_server" 9090/tcp)
metrics_port=${ports%%$'\n'*}
metrics_port=${metrics_port##*:}
edge_target=localhost:$edge_port
edge_tls=(--tls-ca "$work/tls/tls.crt")
serving=0
for _ in $(seq 120); do
  for c in "$edge_server" "$edge"; do
    [ "$(podman inspect -f '{{.State.Running}}' "$c")" = true ] || fail "$c exited"
  done
  if "$cli" health --target "$edge_target" "${edge_tls[@]}" --timeout 2 >/dev/null 2>&1; then
    serving=1
    break
  fi
  sleep 0.5
done
[ $serving = 1 ] || fail "not SERVING through the edge on $edge_target after 60 s"
"$cli" health --target "$edge_target" "${edge_tls[@]}" --timeout 2
podman exec "$edge_server" sh -c 'cat /proc/net/tcp /proc/net/tcp6 2>/dev/null' \
  | awk 'NR > 1 && $4 == "0A" { print $2 }' > "$work/listening"
# 127.0.0.1, or gRPC's IPv4-mapped IPv6 socket for it (::ffff:127.0.0.1)
loopback='^(0100007F|0000000000000000FFFF00000100007F):'
for port_hex in C383 1F40; do  # 50051, 8000: on 127.0.0.1 only
  grep -q ":$port_hex\$" "$work/listening" || fail "the server does not listen on port 0x$port_hex"
  if grep ":$port_hex\$" "$work/listening" | grep -Eqv "$loopback"; then
    fail "the server listens on port 0x$port_hex beyond loopback: $(cat "$work/listening")"
  fi
done
echo "server: 50051 and 8000 on 127.0.0.1 only; edge: TLS on $edge_target"

step "through the edge: Gather and GatherNd from the host CLI over TLS, with the token"
rc=0
"$cli" gather --target "$edge_target" "${edge_tls[@]}" --params "$work/params.json" \
  --indices "$work/indices.json" > /dev/null 2> "$work/noauth.err" || rc=$?
[ $rc != 0 ] && grep -q UNAUTHENTICATED "$work/noauth.err" \
  || fail "without the token, exit $rc: $(cat "$work/noauth.err")"
echo "without the token: $(cat "$work/noauth.err")"
check_requests "$edge_target" "${edge_tls[@]}" --auth-token-file "$work/token"

step "through the edge: tritonclient over TLS, and hostile clients (tests/deploy/edge_test.py)"
python=${TC_TRITON_PYTHON:-$repo/.venv-triton/bin/python3}
[ -x "$python" ] || fail "no Python with tritonclient at $python (run tools/install-deps.sh)"
(cd tests/deploy && TC_EDGE_TARGET="$edge_target" TC_EDGE_CA="$work/tls/tls.crt" \
  TC_EDGE_TOKEN="$token" TC_EDGE_SERVER_EXEC="podman --storage-driver vfs exec $edge_server" \
  TC_EDGE_SERVER_METRICS="127.0.0.1:$metrics_port" TC_CLI_BINARY="$cli" \
  PYTHONPATH="$repo/tests/testing" PYTHONDONTWRITEBYTECODE=1 "$python" -m unittest edge_test) \
  || fail "tests/deploy/edge_test.py failed against the pair"
podman logs "$edge" > "$work/edge.log" 2>&1
grep -m1 '^{"time"' "$work/edge.log" > "$work/access.json" \
  || fail "no JSON access log line from the edge: $(tail -5 "$work/edge.log")"
"$python" -c 'import json, sys; print("edge access log:", sorted(json.load(open(sys.argv[1]))))' \
  "$work/access.json"

step "stop the pair: both exit 0"
without_timer_noise podman stop -t 20 "$edge" >/dev/null
without_timer_noise podman stop -t 20 "$edge_server" >/dev/null
for c in "$edge" "$edge_server"; do
  code=$(podman inspect -f '{{.State.ExitCode}}' "$c")
  [ "$code" = 0 ] || fail "$c exited $code"
done
echo "edge and server exited 0"

# ---- summary -------------------------------------------------------------------------------
end_step
echo
echo "=== test-image: all checks passed in $((SECONDS - start)) s; image $size_mb MB"
printf '%s\n' "${timings[@]}"
