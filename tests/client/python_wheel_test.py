"""The Python client as a wheel: `pip wheel ./client/python` makes one that installs in a clean
virtual environment, with nothing of the source tree, and works there against a real server.

Offline and quick (about 15 s): the wheel is built without build isolation by this Python
(tools/install-deps.sh gave it setuptools, wheel and grpcio-tools), and its dependencies are
installed with `pip install --no-index` from wheels repacked here from this Python's own
installed copies (the same files pip installed from PyPI). The new venv has no system
site-packages, no ml_dtypes, and gets only the wheel and what its metadata requires; this
Python's pip installs into it (`pip --python`), so that the venv needs no pip of its own.

Needs $TC_SERVER_BINARY. Run by hand:

    cd tests/client && PYTHONPATH=../testing \\
        TC_SERVER_BINARY=../../build/server/tensorcompute-server \\
        ../../.venv/bin/python3 -m unittest -v python_wheel_test
"""

import base64
import csv
import glob
import hashlib
import importlib.metadata
import io
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import unittest
import zipfile

try:
    from packaging.requirements import Requirement
except ImportError:  # pip vendors it
    from pip._vendor.packaging.requirements import Requirement

from server_process import ServerProcess

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.realpath(os.path.join(HERE, "..", ".."))

# Run in the new venv, from an empty folder, with `python -I` (no PYTHONPATH, no script
# folder, no user site-packages): where tensorcompute comes from, and calls through both
# clients.
SNIPPET = r"""
import asyncio, json, sys
import tensorcompute, tensorcompute.aio
from tensorcompute.v1 import tensorcompute_pb2, tensorcompute_pb2_grpc

target = sys.argv[1]
with tensorcompute.Client(target, timeout=30) as client:
    rows = client.gather([[0.5, 1.5], [2.5, 3.5], [4.5, 5.5]], [2, -3]).tolist()
    health = client.health()

async def main():
    async with tensorcompute.aio.Client(target, timeout=30, compression="gzip") as client:
        return (await client.gather_nd([[1, 2], [3, 4]], [[0, 1], [1, 0]])).tolist()

print(json.dumps({
    "files": [tensorcompute.__file__, tensorcompute.aio.__file__, tensorcompute_pb2.__file__,
              tensorcompute_pb2_grpc.__file__],
    "sys_path": sys.path, "prefix": sys.prefix, "version": tensorcompute.__version__,
    "rows": rows, "health": health, "elements": asyncio.run(main()),
}))
"""


def repack(dist, folder):
    """Writes `dist`, a distribution installed in this Python, as a wheel into `folder`: its
    files under site-packages as its RECORD lists them (scripts, which pip makes again from
    entry_points.txt, and caches left out) and its .dist-info, with a RECORD of their own."""
    info_dir = os.path.basename(str(dist._path))  # e.g. numpy-2.4.6.dist-info
    tag = re.search(r"^Tag: (\S+)$", dist.read_text("WHEEL"), re.MULTILINE).group(1)
    path = os.path.join(folder, f"{info_dir[:-len('.dist-info')]}-{tag}.whl")
    skip = {f"{info_dir}/{name}" for name in
            ("RECORD", "INSTALLER", "REQUESTED", "direct_url.json")}
    record = io.StringIO()
    writer = csv.writer(record, lineterminator="\n")
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as wheel:
        for file in dist.files:
            name = file.as_posix()
            if name.startswith("../") or "__pycache__" in name or name in skip:
                continue
            with open(dist.locate_file(file), "rb") as f:
                data = f.read()
            digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=")
            writer.writerow([name, f"sha256={digest.decode()}", len(data)])
            wheel.writestr(name, data)
        writer.writerow([f"{info_dir}/RECORD", "", ""])
        wheel.writestr(f"{info_dir}/RECORD", record.getvalue())
    return path


def required_distributions(requirements, extras=("",)):
    """The distributions of this Python that `requirements` (Requires-Dist strings) need,
    transitively."""
    found, todo = {}, [(r, extra) for r in requirements for extra in extras]
    while todo:
        requirement, extra = todo.pop()
        requirement = Requirement(requirement)
        if requirement.marker is not None and not requirement.marker.evaluate({"extra": extra}):
            continue
        dist = importlib.metadata.distribution(requirement.name)
        key = dist.metadata["Name"].lower()
        if key not in found:
            found[key] = dist
            todo += [(r, e) for r in dist.requires or [] for e in ("", *requirement.extras)]
    return list(found.values())


class WheelTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="tc_wheel_test_")
        # pip and Python in the subprocesses see nothing of this test's environment's paths.
        self.env = {k: v for k, v in os.environ.items()
                    if not k.startswith(("PYTHON", "PIP_", "VIRTUAL_ENV"))}
        self.env.update(PIP_DISABLE_PIP_VERSION_CHECK="1", PIP_NO_INPUT="1")

    def tearDown(self):
        shutil.rmtree(self.tmp, ignore_errors=True)

    def run_checked(self, *command, cwd=None, timeout=120):
        run = subprocess.run(command, cwd=cwd or self.tmp, env=self.env, capture_output=True,
                             text=True, timeout=timeout)
        self.assertEqual(run.returncode, 0,
                         f"{' '.join(command)}:\n{run.stdout}\n{run.stderr}")
        return run.stdout

    def build_wheel(self):
        """`pip wheel --no-deps ./client/python` from the repository root, into a temp dir."""
        out = os.path.join(self.tmp, "dist")
        self.run_checked(sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps",
                         "--no-build-isolation", "--wheel-dir", out, "./client/python", cwd=REPO)
        wheels = glob.glob(os.path.join(out, "*.whl"))
        self.assertEqual(len(wheels), 1, wheels)
        return wheels[0]

    def test_wheel_installs_in_a_clean_venv_and_works(self):
        wheel = self.build_wheel()
        self.assertRegex(os.path.basename(wheel), r"^tensorcompute-0\.1\.0-py3-none-any\.whl$")
        with zipfile.ZipFile(wheel) as z:
            names = set(z.namelist())
            metadata = z.read("tensorcompute-0.1.0.dist-info/METADATA").decode()
            pb2 = z.read("tensorcompute/v1/tensorcompute_pb2.py").decode()
            pb2_grpc = z.read("tensorcompute/v1/tensorcompute_pb2_grpc.py").decode()
        modules = {n for n in names if not n.startswith("tensorcompute-0.1.0.dist-info/")}
        self.assertEqual(modules, {
            "tensorcompute/__init__.py", "tensorcompute/_common.py", "tensorcompute/aio.py",
            "tensorcompute/client.py", "tensorcompute/v1/__init__.py",
            "tensorcompute/v1/tensorcompute_pb2.py", "tensorcompute/v1/tensorcompute_pb2_grpc.py"})

        # The lower bounds are the ones the generated stubs check at import.
        requires = re.findall(r"^Requires-Dist: (.+)$", metadata, re.MULTILINE)
        protoc = re.search(r"^# Protobuf Python Version: (\d+)\.(\d+\.\d+)$", pb2, re.MULTILINE)
        grpc_version = re.search(r"^GRPC_GENERATED_VERSION = '([0-9.]+)'$", pb2_grpc,
                                 re.MULTILINE).group(1)
        self.assertEqual(
            sorted(str(Requirement(r)) for r in requires if "extra ==" not in r),
            sorted(str(Requirement(r)) for r in [
                f"grpcio>={grpc_version}", f"grpcio-health-checking>={grpc_version}",
                "numpy>=1.23",
                f"protobuf>={protoc.group(1)}.{protoc.group(2)},<{int(protoc.group(1)) + 1}"]))
        self.assertIn("Requires-Python: >=3.10", metadata)

        # A venv of its own (no system site-packages), the dependencies from local wheels.
        venv = os.path.join(self.tmp, "venv")
        self.run_checked(sys.executable, "-m", "venv", "--without-pip", venv)
        python = os.path.join(venv, "bin", "python")
        pip = [sys.executable, "-m", "pip", "--python", python]
        with open(os.path.join(venv, "pyvenv.cfg")) as f:
            self.assertIn("include-system-site-packages = false", f.read())
        deps = os.path.join(self.tmp, "deps")
        os.mkdir(deps)
        needed = required_distributions([r for r in requires if "extra ==" not in r])
        self.assertTrue({"numpy", "grpcio", "protobuf", "grpcio-health-checking"} <=
                        {d.metadata["Name"].lower() for d in needed})
        for dist in needed:
            repack(dist, deps)
        self.run_checked(*pip, "install", "--quiet", "--no-compile", "--no-index",
                         "--find-links", deps, wheel)
        self.run_checked(*pip, "check")
        installed = {p["name"].lower() for p in
                     json.loads(self.run_checked(*pip, "list", "--format=json"))}
        self.assertEqual(installed, {d.metadata["Name"].lower() for d in needed} |
                         {"tensorcompute"})

        empty = os.path.join(self.tmp, "cwd")
        os.mkdir(empty)
        with ServerProcess("--cpu_threads=1") as server:
            out = json.loads(self.run_checked(python, "-I", "-c", SNIPPET, server.target,
                                              cwd=empty))
        site = os.path.realpath(os.path.join(venv, "lib"))
        for file in out["files"]:
            self.assertTrue(os.path.realpath(file).startswith(site + os.sep), file)
        self.assertEqual(os.path.realpath(out["prefix"]), os.path.realpath(venv))
        for entry in out["sys_path"]:
            self.assertFalse(os.path.realpath(entry or ".").startswith(REPO + os.sep), entry)
        self.assertEqual(out["version"], "0.1.0")
        self.assertEqual(out["rows"], [[4.5, 5.5], [0.5, 1.5]])
        self.assertEqual(out["health"], "SERVING")
        self.assertEqual(out["elements"], [2, 3])


if __name__ == "__main__":
    unittest.main()
