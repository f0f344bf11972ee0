"""Builds the tensorcompute package, generating its gRPC stubs from the repository's proto/.

The stubs (tensorcompute/v1/tensorcompute_pb2.py, tensorcompute_pb2_grpc.py) are written only
into the build directory, never into the source tree. The proto folder is found at ../../proto
relative to this file, so build from a repository checkout: `pip install ./client/python`, or
`pip wheel ./client/python` for a wheel that installs anywhere without the checkout (pip >= 21.3
builds in place).
"""

import os
import re
import shutil
import subprocess
import sys
import tempfile

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = os.path.dirname(os.path.abspath(__file__))
PROTO_ROOT = os.path.normpath(os.path.join(HERE, "..", "..", "proto"))
PROTO_FILE = "tensorcompute/v1/tensorcompute.proto"


def _protoc(out_dir):
    """Runs grpc_tools.protoc on PROTO_FILE, writing the modules under out_dir."""
    if not os.path.isfile(os.path.join(PROTO_ROOT, PROTO_FILE)):
        sys.exit(
            f"tensorcompute: cannot find {PROTO_FILE} under {PROTO_ROOT}. The Python client "
            "is built from a checkout of the tensorcompute repository (client/python next to "
            "proto/); install it with `pip install ./client/python` from the repository root.")
    try:
        import grpc_tools  # (checked here for a clear message)
    except ImportError:
        sys.exit("tensorcompute: building needs grpcio-tools (pip install grpcio-tools), "
                 "or build with isolation so that pip installs it")
    # The proto imports google/protobuf/timestamp.proto: grpcio-tools ships the well-known
    # types in grpc_tools/_proto (the generated module imports them from the protobuf runtime).
    well_known = os.path.join(os.path.dirname(grpc_tools.__file__), "_proto")
    # A subprocess, not grpc_tools.protoc.main(): protoc's messages then reach the log.
    command = [sys.executable, "-m", "grpc_tools.protoc", f"--proto_path={PROTO_ROOT}",
               f"--proto_path={well_known}", f"--python_out={out_dir}",
               f"--grpc_python_out={out_dir}", PROTO_FILE]
    result = subprocess.run(command, capture_output=True, text=True)
    if result.returncode != 0:
        sys.exit(f"tensorcompute: {' '.join(command)} failed:\n{result.stdout}{result.stderr}")
    return os.path.join(out_dir, "tensorcompute", "v1")


def _requirements():
    """The runtime requirements, with the lower bounds the generated code imposes.

    tensorcompute_pb2 refuses a protobuf runtime older than the protoc that made it (or of
    another major version), and tensorcompute_pb2_grpc a grpcio older than grpcio-tools. The
    stubs are generated once into a scratch folder to read both versions off.
    grpcio-health-checking (health()) is asked for at the stubs' gRPC release too: its own
    stubs then need the protobuf and grpcio that ours do. numpy >= 1.23: the oldest numpy the
    client's tests (tests/client/python_*_test.py) were run with, by hand, beside grpcio,
    protobuf and grpcio-health-checking at these lower bounds.
    """
    with tempfile.TemporaryDirectory() as scratch:
        generated = _protoc(scratch)
        with open(os.path.join(generated, "tensorcompute_pb2.py")) as f:
            pb2 = f.read()
        with open(os.path.join(generated, "tensorcompute_pb2_grpc.py")) as f:
            pb2_grpc = f.read()
    protobuf = "protobuf"
    match = re.search(r"^# Protobuf Python Version: (\d+)\.(\d+)\.(\d+)", pb2, re.MULTILINE)
    if match:
        major = int(match.group(1))
        protobuf = f"protobuf>={'.'.join(match.groups())},<{major + 1}"
    grpcio, health = "grpcio", "grpcio-health-checking"
    match = re.search(r"^GRPC_GENERATED_VERSION = '([0-9.]+)'", pb2_grpc, re.MULTILINE)
    if match:
        grpcio = f"grpcio>={match.group(1)}"
        health = f"grpcio-health-checking>={match.group(1)}"
    return ["numpy>=1.23", grpcio, protobuf, health]


class BuildPyWithStubs(build_py):
    """build_py that also generates the gRPC stubs into build_lib.

    The package is copied into build_lib afresh: a module left there by an earlier build
    (build/lib in the source tree, where pip builds) would otherwise ship in the wheel.
    """

    def run(self):
        shutil.rmtree(os.path.join(self.build_lib, "tensorcompute"), ignore_errors=True)
        super().run()
        generated = _protoc(self.build_lib)
        self.announce(f"generated gRPC stubs in {generated}", level=2)


setup(install_requires=_requirements(), cmdclass={"build_py": BuildPyWithStubs})
