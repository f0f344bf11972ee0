#!/usr/bin/env bash
# Installs what tensorcompute needs to build and test on Debian 12 (bookworm), and nothing
# that is already there. System packages come from Debian's own packages; the Python client's
# dependencies (numpy, grpcio, ...) go into a virtual environment at <repo>/.venv, from PyPI.
# Safe to re-run: a second run with everything present touches neither apt nor the network.
# Runs apt-get as root, or through sudo when started as another user.
set -euo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

packages=(
  # toolchain; ccache keeps what was compiled for the next build (tools/ccache.sh)
  g++ cmake ninja-build pkg-config ccache
  # cpack -G DEB computes the package's Depends with dpkg-shlibdeps, and finds the binaries
  # to scan with `file` (tests/package)
  dpkg-dev file
  # libraries
  libabsl-dev libprotobuf-dev protobuf-compiler libgrpc++-dev protobuf-compiler-grpc libspdlog-dev
  nlohmann-json3-dev libcli11-dev prometheus-cpp-dev
  # KServe v2 HTTP/REST on Boost.Beast and Asio (header-only; TLS with libssl-dev below): the
  # server's front end and the load tester's client; JSON with nlohmann-json above
  libboost1.81-dev
  # tables on disk (core/disk): io_uring for many direct reads in flight
  liburing-dev
  # tests and benchmarks (fio: the disk's own limit, tools/bench/disk_bench.sh)
  libgtest-dev libgmock-dev libbenchmark-dev fio
  # style check in CI
  clang-format
  # TLS: libssl-dev for the server (PEM checks, SHA-256 of tokens), the openssl command for
  # the certificates the tests make
  libssl-dev openssl
  # fuzzing and sanitizers in CI (clang 14 with libFuzzer: tests/fuzz, TC_BUILD_FUZZERS)
  clang libclang-rt-14-dev
  # ThreadSanitizer in CI: tools/ci/tsan.sh fetches and patches Debian's Abseil source
  curl patch xz-utils
  # the Python client and its tests (the packages themselves go into .venv, below)
  python3-venv python3-pip
  # the edge (deploy/edge): Debian's nginx, which tests/deploy/edge_test.py runs in front of
  # the server (its own service is neither started nor enabled, below)
  nginx
)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed'; then
    missing+=("$p")
  fi
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: everything is installed"
else
  sudo=""
  if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi
  echo "install-deps: installing ${missing[*]}"
  $sudo apt-get update -qq
  # Packages with a daemon (nginx) must not start it: policy-rc.d says no (exit 101) while
  # apt runs, the way Debian's container images do, unless the machine has one already.
  policy=/usr/sbin/policy-rc.d
  made_policy=0
  if [ ! -e $policy ]; then
    printf '#!/bin/sh\nexit 101\n' | $sudo tee $policy >/dev/null
    $sudo chmod 755 $policy
    made_policy=1
  fi
  rc=0
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends \
    "${missing[@]}" >/dev/null || rc=$?
  if [ $made_policy = 1 ]; then $sudo rm -f $policy; fi
  [ $rc -eq 0 ] || exit $rc
  if [[ " ${missing[*]} " == *" nginx "* ]] && [ -d /run/systemd/system ]; then
    $sudo systemctl disable --quiet nginx || true
  fi
  echo "install-deps: done"
fi

# --- Python: a virtual environment for the Python client and its tests -------------------
# Debian's python3 (which python3-venv completes) is preferred over whatever is first on PATH.
venv="$repo_root/.venv"
# prometheus_client parses the server's /metrics in the tests; kubernetes-validate checks the
# manifests in deploy/k8s against the Kubernetes API schemas, offline; matplotlib draws load
# sweeps (tools/plot_load.py); jsonschema validates deploy/monitoring's custom resources against
# the Prometheus Operator CRDs, and promql-parser parses its PromQL (tests/deploy).
python_modules="numpy, grpc, grpc_tools, grpc_health, ml_dtypes, setuptools, wheel, prometheus_client, kubernetes_validate, matplotlib, jsonschema, promql_parser"
pip_packages=(numpy grpcio grpcio-tools protobuf grpcio-health-checking ml_dtypes setuptools wheel
  prometheus_client kubernetes-validate matplotlib jsonschema promql-parser)

if [ ! -x "$venv/bin/python3" ]; then
  system_python="python3"
  if [ -x /usr/bin/python3 ]; then system_python="/usr/bin/python3"; fi
  echo "install-deps: creating $venv with $system_python"
  "$system_python" -m venv "$venv"
fi
if "$venv/bin/python3" -c "import $python_modules" 2>/dev/null; then
  echo "install-deps: .venv has everything"
else
  echo "install-deps: installing ${pip_packages[*]} into .venv"
  "$venv/bin/python3" -m pip install --quiet --disable-pip-version-check "${pip_packages[@]}"
  echo "install-deps: .venv done"
fi

# --- tritonclient, in a venv of its own ----------------------------------------------------
# NVIDIA's tritonclient (the KServe v2 tests use it unmodified) pins protobuf < 7, which our own
# Python client's grpcio-tools does not accept; so it lives apart, at <repo>/.venv-triton.
triton_venv="$repo_root/.venv-triton"
if [ ! -x "$triton_venv/bin/python3" ]; then
  system_python="python3"
  if [ -x /usr/bin/python3 ]; then system_python="/usr/bin/python3"; fi
  echo "install-deps: creating $triton_venv with $system_python"
  "$system_python" -m venv "$triton_venv"
fi
if "$triton_venv/bin/python3" -c "import numpy, ml_dtypes, tritonclient.grpc, tritonclient.http" 2>/dev/null; then
  echo "install-deps: .venv-triton has everything"
else
  echo "install-deps: installing tritonclient into .venv-triton"
  "$triton_venv/bin/python3" -m pip install --quiet --disable-pip-version-check \
    "tritonclient[grpc,http]==2.73.0" numpy
  echo "install-deps: .venv-triton done"
fi
