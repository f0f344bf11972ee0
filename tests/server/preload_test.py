"""--preload of a large table in one copy (issue 28): a generated 2 GiB float32 .npy is read
straight into the table's buffer, so the server's peak RSS stays within the table plus a small
constant (before: twice the table), and the rows served are the file's (a sample of rows, read
back through the Python client, against the file). Files the in-place path does not take
(big-endian data, Fortran order, strings) still load, with the same content as NumPy reads.

Run by ctest from tests/server (tests/testing on PYTHONPATH) with TC_SERVER_BINARY set.
"""

import os
import subprocess
import sys
import tempfile
import unittest

import numpy as np

from server_process import ServerProcess
from tensorcompute import Client

MIB = 1 << 20
ROWS, DIM = 1 << 21, 256  # 2 GiB of float32
SLACK_MIB = 160           # the server's own memory: binary, threads, allocator


class PreloadTest(unittest.TestCase):
    def test_a_two_gibibyte_table_costs_its_size_and_reads_back_exactly(self):
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "table.npy")
            table = np.lib.format.open_memmap(path, mode="w+", dtype=np.float32,
                                              shape=(ROWS, DIM))
            step = 1 << 16
            columns = np.arange(DIM, dtype=np.float32) / DIM
            for begin in range(0, ROWS, step):  # row r, column c: r + c / DIM
                table[begin:begin + step] = \
                    np.arange(begin, begin + step, dtype=np.float32)[:, None] + columns
            table.flush()
            del table
            with ServerProcess(f"--preload=big={path}") as server:
                peak_mib = server.status_kib("VmHWM") // 1024
                log = "".join(server.output)
                print(f"peak RSS {peak_mib} MiB for a {ROWS * DIM * 4 // MIB} MiB table;"
                      f" {[l.strip() for l in server.output if 'preload' in l]}", flush=True)
                if not os.environ.get("TC_SANITIZED"):  # ASan's shadow is not the server's
                    self.assertLessEqual(peak_mib, ROWS * DIM * 4 // MIB + SLACK_MIB)
                self.assertIn("preloaded big from", log)
                mapped = np.load(path, mmap_mode="r")
                rng = np.random.default_rng(28)
                sample = np.concatenate([[0, 1, ROWS - 1], rng.integers(0, ROWS, 64)])
                with Client(server.target, timeout=60.0) as client:
                    got = client.gather(None, sample, params_name="big")
                self.assertEqual(got.tobytes(), np.ascontiguousarray(mapped[sample]).tobytes())

    def test_a_table_over_max_resident_bytes_is_refused_before_it_is_read(self):
        """The size comes from the header: a 4 GiB table over --max_resident_bytes (1 GiB) is
        refused at start-up (exit 1, saying so) without its 4 GiB being allocated."""
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "huge.npy")  # sparse: the header and a hole
            np.lib.format.open_memmap(path, mode="w+", dtype=np.float32,
                                      shape=(1 << 22, 256)).flush()
            probe = ("import resource, subprocess, sys; "
                     "r = subprocess.run(sys.argv[1:], capture_output=True, text=True); "
                     "print(r.returncode, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss);"
                     " print(r.stdout + r.stderr)")
            out = subprocess.run(
                [sys.executable, "-c", probe, os.environ["TC_SERVER_BINARY"],
                 "--listen=127.0.0.1:0", "--metrics_listen=127.0.0.1:0",
                 "--max_resident_bytes=1073741824", f"--preload=huge={path}"],
                capture_output=True, text=True, timeout=120).stdout
            code, peak_kib = (int(v) for v in out.split("\n", 1)[0].split())
            print(f"exit {code}, peak RSS {peak_kib // 1024} MiB", flush=True)
            self.assertEqual(code, 1, out)
            self.assertIn("needs 4294967296 bytes but 0 of max_resident_bytes", out)
            if not os.environ.get("TC_SANITIZED"):
                self.assertLess(peak_kib // 1024, SLACK_MIB)

    def test_files_off_the_in_place_path_load_as_numpy_reads_them(self):
        rng = np.random.default_rng(5)
        arrays = {
            "big_endian": rng.standard_normal((50, 7)).astype(">f8"),
            "fortran": np.asfortranarray(rng.integers(-99, 99, (9, 4, 3)).astype("<i4")),
            "strings": np.array([["a", "bc"], ["déf", ""]]),
            "bools": np.frombuffer(bytes([0, 1, 0, 1, 1, 0]), dtype=np.bool_).reshape(3, 2),
        }
        with tempfile.TemporaryDirectory() as tmp:
            flags = []
            for name, array in arrays.items():
                path = os.path.join(tmp, f"{name}.npy")
                np.save(path, array)
                flags.append(f"{name}={path}")
            with ServerProcess("--preload=" + ",".join(flags)) as server, \
                    Client(server.target, timeout=30.0) as client:
                for name, array in arrays.items():
                    rows = np.arange(array.shape[0])
                    got = client.gather(None, rows, params_name=name)
                    if array.dtype.kind == "U":
                        self.assertEqual([[s.decode() for s in row] for row in got.tolist()],
                                         array.tolist(), name)
                    else:
                        self.assertEqual(got.dtype, array.dtype.newbyteorder("="), name)
                        self.assertEqual(got.tobytes(),
                                         np.ascontiguousarray(array, array.dtype.newbyteorder(
                                             "<")).tobytes(), name)
                log = "".join(server.output)
                self.assertIn("is read whole and then converted", log)


if __name__ == "__main__":
    unittest.main(verbosity=2)
