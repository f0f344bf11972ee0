# tensorcompute-server in a container: a build stage that compiles the server and the CLI
# from Debian 12's packages, and a runtime stage that holds the two binaries, the shared
# libraries they load (found with ldd, mapped to their Debian packages), and nothing else:
# no compiler, no headers, no build tree.
#
#   docker build -t tensorcompute:latest .
#   docker run --rm -p 50051:50051 -p 9090:9090 tensorcompute:latest     # server flags may follow
#   docker run --rm --entrypoint tensorcompute tensorcompute:latest health --target HOST:50051
#
# The server runs as uid 10001 (numeric, so Kubernetes' runAsNonRoot can check it). It is PID 1
# and handles SIGTERM itself: it stops accepting, answers what it accepted (up to
# --drain_timeout_s, 30 s by default), and exits 0. Give the orchestrator a grace period above
# that (docker stop -t 40, terminationGracePeriodSeconds: 40). deploy/test-image.sh builds this
# file unchanged and checks all of it.
#
# Build arguments:
#   BUILD_IMAGE, RUNTIME_IMAGE  the two base images; they must be the same distribution and
#                               release (the runtime stage installs, by name, the packages that
#                               the build stage's libraries came from)
#   JOBS                        parallel compile jobs (2)
#   CUDA                        OFF (the default: CPU only), ON (nvcc required) or AUTO
#   CUDA_ARCHITECTURES          GPU architectures in CMake's syntax ("90": sm_90 + compute_90 PTX)
#   WERROR                      ON (the default): warnings are errors, as in every other build
#                               of Debian 12's compiler; OFF for a BUILD_IMAGE whose newer
#                               compiler warns where ours does not
#
# ---- GPU variant -------------------------------------------------------------------------------
# The CUDA runtime is linked statically (cudart_static), so the runtime image needs no CUDA
# package: only the driver's libcuda.so, which the NVIDIA Container Toolkit mounts into the
# container (docker run --gpus all; on Kubernetes, the NVIDIA device plugin). The GPU build
# needs nvcc in the build stage, at /usr/local/cuda/bin/nvcc where CMake looks, and the same
# distribution in both stages. Two ways:
#
# 1. Debian 12 in both stages, with a BUILD_IMAGE that is debian:12 plus the CUDA toolkit in
#    /usr/local/cuda (from NVIDIA's debian12 apt repository: cuda-nvcc-13-0 and
#    cuda-cudart-dev-13-0; or copied in). Tried with CUDA 13.0: it builds, the runtime packages
#    are the same as the CPU image's, and without a GPU the server falls back to the CPU.
#      docker build --build-arg CUDA=ON --build-arg BUILD_IMAGE=debian12-cuda:13.0 \
#        -t tensorcompute:latest-gpu .
#    Caveat: Debian 12's CMake 3.25.1 fails to configure with CUDA 13 ("set_property could not
#    find TARGET CUDA::nvToolsExt": CUDA 13 has no nvToolsExt) unless its FindCUDAToolkit.cmake
#    has the upstream one-line fix (if(TARGET CUDA::nvToolsExt AND ...)), as on our machines.
# 2. NVIDIA's Ubuntu 24.04 image, with Ubuntu 24.04 as the runtime (the same gRPC 1.51,
#    protobuf 3.21 and Abseil 20220623 as Debian 12, under Ubuntu's package names, which the
#    runtime stage picks up by itself; CMake 3.28). Not tried here (no registry access):
#      docker build --build-arg CUDA=ON \
#        --build-arg BUILD_IMAGE=nvidia/cuda:13.0.0-devel-ubuntu24.04 \
#        --build-arg RUNTIME_IMAGE=ubuntu:24.04 --build-arg WERROR=OFF -t tensorcompute:latest-gpu .
#
# Run it with the GPUs passed through; --device=gpu makes a missing GPU an error at startup
# (exit 1, with the reason) instead of a fall-back to the CPU:
#      docker run --rm --gpus all -p 50051:50051 -p 9090:9090 tensorcompute:latest-gpu --device=gpu
# Other GPUs than Hopper: --build-arg CUDA_ARCHITECTURES="80;90" (newer GPUs JIT-compile the
# PTX of the highest). The CPU build (CUDA=OFF, the default) uses none of this.
# -----------------------------------------------------------------------------------------------

ARG BUILD_IMAGE=debian:12
ARG RUNTIME_IMAGE=debian:12-slim

# The toolchain alone, a stage of its own so that a builder can keep it (deploy/test-image.sh
# builds it with --target toolchain and tags it) and reinstall nothing next time.
FROM ${BUILD_IMAGE} AS toolchain
SHELL ["/bin/bash", "-euo", "pipefail", "-c"]
ARG DEBIAN_FRONTEND=noninteractive
# The library packages of tools/install-deps.sh, without those for tests, style and Python.
RUN apt-get update \
 && apt-get install -y --no-install-recommends \
      g++ cmake ninja-build pkg-config ccache \
      libabsl-dev libprotobuf-dev protobuf-compiler libgrpc++-dev protobuf-compiler-grpc \
      libspdlog-dev nlohmann-json3-dev libcli11-dev prometheus-cpp-dev libssl-dev \
      libboost1.81-dev liburing-dev \
 && rm -rf /var/lib/apt/lists/*

FROM toolchain AS build
SHELL ["/bin/bash", "-euo", "pipefail", "-c"]
WORKDIR /src
COPY . .
# The compiler cache (tools/ccache.sh): deploy/test-image.sh mounts the machine's here
# (buildah bud --volume), so that the image's compile reuses earlier builds'; without a mount
# it is a folder of the build stage only.
ENV CCACHE_DIR=/ccache
ARG JOBS=2
ARG CUDA=OFF
ARG CUDA_ARCHITECTURES=90
# With the host's flags (WERROR=ON, Release) the compile is the host build's, so the compiler
# cache that deploy/test-image.sh mounts answers it from the Release build before it.
ARG WERROR=ON
RUN cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release \
      -DTC_BUILD_TESTS=OFF -DTC_BUILD_BENCHMARKS=OFF -DTC_WERROR="${WERROR}" \
      -DTC_CUDA="${CUDA}" -DTC_CUDA_ARCHITECTURES="${CUDA_ARCHITECTURES}" \
 && cmake --build build -j"${JOBS}" --target tensorcompute-server tensorcompute \
 && mkdir -p /out \
 && cp build/server/tensorcompute-server build/client/tensorcompute /out/

# The runtime packages: every shared library the two binaries load (ldd lists them
# transitively), mapped to the package that ships it. ldd may name a library under /lib while
# dpkg registered it under /usr/lib, or the other way round (merged /usr), so both spellings
# of the path and of its target are tried. A library no package ships stops the build.
RUN bins="/out/tensorcompute-server /out/tensorcompute" \
 && if ldd $bins | grep 'not found'; then exit 1; fi \
 && ldd $bins | awk '$2 == "=>" && $3 ~ /^\// { print $3 } $1 ~ /^\// && $2 ~ /^\(/ { print $1 }' \
      | sort -u > /tmp/libraries.txt \
 && while read -r lib; do \
      pkg=""; \
      for path in "$lib" "$(realpath "$lib")"; do \
        for candidate in "$path" "${path#/usr}" "/usr$path"; do \
          pkg=$(dpkg-query -S "$candidate" 2>/dev/null | grep -v '^diversion' \
                | head -n1 | cut -d: -f1 || true); \
          if [ -n "$pkg" ]; then break 2; fi; \
        done; \
      done; \
      if [ -z "$pkg" ]; then echo "no package ships $lib" >&2; exit 1; fi; \
      echo "$pkg"; \
    done < /tmp/libraries.txt | sort -u > /out/runtime-packages.txt \
 && echo "runtime packages:" $(cat /out/runtime-packages.txt)

FROM ${RUNTIME_IMAGE}
ARG DEBIAN_FRONTEND=noninteractive
COPY --from=build /out/runtime-packages.txt /usr/local/share/tensorcompute/runtime-packages.txt
RUN apt-get update \
 && apt-get install -y --no-install-recommends \
      $(cat /usr/local/share/tensorcompute/runtime-packages.txt) \
 && rm -rf /var/lib/apt/lists/* \
 && groupadd --gid 10001 tensorcompute \
 && useradd --uid 10001 --gid 10001 --no-create-home --no-log-init --home-dir /nonexistent \
      --shell /usr/sbin/nologin tensorcompute
COPY --from=build /out/tensorcompute-server /out/tensorcompute /usr/local/bin/
RUN if ldd /usr/local/bin/tensorcompute-server /usr/local/bin/tensorcompute | grep 'not found'; \
    then exit 1; fi
# Read by the NVIDIA Container Toolkit only (GPU variant above); inert everywhere else.
ENV NVIDIA_DRIVER_CAPABILITIES=compute,utility

USER 10001:10001
# gRPC, and Prometheus metrics (/metrics)
EXPOSE 50051 9090
STOPSIGNAL SIGTERM
# Exits 0 only when the server answers SERVING (NOT_SERVING while it drains).
HEALTHCHECK --interval=10s --timeout=5s --start-period=5s --retries=3 \
  CMD ["/usr/local/bin/tensorcompute", "health", "--target", "localhost:50051", "--timeout", "2"]
ENTRYPOINT ["/usr/local/bin/tensorcompute-server"]
CMD ["--listen=0.0.0.0:50051"]
