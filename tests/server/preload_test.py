"""Large tables load in one copy (issue 28).

--preload: a generated 2 GiB float32 .npy is read straight into the table's buffer, so the
server's peak RSS stays within the table plus a small constant (before: twice the table), and
the rows served are the file's (a sample of rows, read back through the Python client, against
the file). Files the in-place path does not take (big-endian data, Fortran order, strings) still
load, with the same content as NumPy reads.

`tensorcompute put`: a 1 GiB .npy is sent as it is read, so the CLI's peak RSS stays small
(before: twice the file), the table arrives whole, and on a terminal a progress bar is drawn.

Run by ctest from tests/server (tests/testing on PYTHONPATH) with TC_SERVER_BINARY and
TC_CLI_BINARY set.
"""

import os
import pty
import subprocess
import sys
import tempfile
import threading
import unittest

import numpy as np

from child_process import popen
from server_process import ServerProcess
from tensorcompute import Client

MIB = 1 << 20
ROWS, DIM = 1 << 21, 256  # 2 GiB of float32
SLACK_MIB = 160           # the server's own memory: binary, threads, allocator
CLI_PEAK_MIB = 64         # the CLI's whole peak RSS for a put of any size
SANITIZED = bool(os.environ.get("TC_SANITIZED"))  # ASan's shadow is not the process's


def write_table(path, rows, dim):
    """A float32 [rows, dim] .npy whose row r, column c holds r + c / dim, written in pieces."""
    table = np.lib.format.open_memmap(path, mode="w+", dtype=np.float32, shape=(rows, dim))
    step = 1 << 16
    columns = np.arange(dim, dtype=np.float32) / dim
    for begin in range(0, rows, step):
        end = min(rows, begin + step)
        table[begin:end] = np.arange(begin, end, dtype=np.float32)[:, None] + columns
    table.flush()
    del table


def run_with_peak_rss(args, timeout):
    """(exit code, peak RSS in KiB, output) of `args`, run by a small Python child so that the
    peak is the command's, not this test's (a child's ru_maxrss starts at its parent's)."""
    probe = ("import resource, subprocess, sys; "
             "r = subprocess.run(sys.argv[1:], capture_output=True, text=True); "
             "print(r.returncode, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss);"
             " print(r.stdout + r.stderr)")
    out = subprocess.run([sys.executable, "-c", probe, *args], capture_output=True, text=True,
                         timeout=timeout).stdout
    code, peak_kib = (int(v) for v in out.split("\n", 1)[0].split())
    return code, peak_kib, out


def expect_rows(test, client, name, path, rows):
    """A sample of rows of the resident `name` equal the file's."""
    mapped = np.load(path, mmap_mode="r")
    rng = np.random.default_rng(28)
    sample = np.concatenate([[0, 1, rows - 1], rng.integers(0, rows, 64)])
    got = client.gather(None, sample, params_name=name)
    test.assertEqual(got.tobytes(), np.ascontiguousarray(mapped[sample]).tobytes())


class PreloadTest(unittest.TestCase):
    def test_a_two_gibibyte_table_costs_its_size_and_reads_back_exactly(self):
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "table.npy")
            write_table(path, ROWS, DIM)
            with ServerProcess(f"--preload=big={path}") as server:
                peak_mib = server.status_kib("VmHWM") // 1024
                log = "".join(server.output)
                print(f"peak RSS {peak_mib} MiB for a {ROWS * DIM * 4 // MIB} MiB table;"
                      f" {[l.strip() for l in server.output if 'preload' in l]}", flush=True)
                if not SANITIZED:
                    self.assertLessEqual(peak_mib, ROWS * DIM * 4 // MIB + SLACK_MIB)
                self.assertIn("preloaded big from", log)
                with Client(server.target, timeout=60.0) as client:
                    expect_rows(self, client, "big", path, ROWS)

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
            if not SANITIZED:
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


class PutTest(unittest.TestCase):
    def test_the_cli_sends_a_one_gibibyte_file_in_little_memory(self):
        cli = os.environ["TC_CLI_BINARY"]
        rows = 1 << 20  # 1 GiB of float32 [rows, DIM]
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "table.npy")
            write_table(path, rows, DIM)
            with ServerProcess() as server:
                put = [cli, "put", "big", "--input", path, "--target", server.target]
                code, peak_kib, out = run_with_peak_rss(put, timeout=600)
                print(f"CLI peak RSS {peak_kib // 1024} MiB for a {rows * DIM * 4 // MIB} MiB"
                      f" put", flush=True)
                self.assertEqual(code, 0, out)
                self.assertIn("stored big float32[1048576,256]", out)
                if not SANITIZED:
                    self.assertLess(peak_kib // 1024, CLI_PEAK_MIB)
                with Client(server.target, timeout=60.0) as client:
                    expect_rows(self, client, "big", path, rows)

            # A truncated file is refused before any call (and, not on a terminal, no bar).
            with open(path, "r+b") as f:
                f.truncate(os.path.getsize(path) - 4096)
            proc = subprocess.run([cli, "put", "cut", "--input", path, "--target",
                                   "127.0.0.1:1"], capture_output=True, text=True, timeout=60)
            self.assertEqual(proc.returncode, 4, proc.stderr)
            self.assertIn("truncated file?", proc.stderr)
            self.assertNotIn("\r", proc.stderr)

    def test_on_a_terminal_the_cli_draws_a_progress_bar(self):
        cli = os.environ["TC_CLI_BINARY"]
        try:
            controller, terminal = pty.openpty()
        except OSError as e:
            self.skipTest(f"no pseudo-terminal here: {e}")
        rows = 1 << 16  # 64 MiB
        with tempfile.TemporaryDirectory() as tmp, ServerProcess() as server:
            path = os.path.join(tmp, "table.npy")
            write_table(path, rows, DIM)
            proc = popen([cli, "put", "t", "--input", path, "--target", server.target,
                                     "--chunk-bytes", "65536"],
                                    stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                    stderr=terminal)
            os.close(terminal)
            drawn = bytearray()

            def read_terminal():
                while True:
                    try:
                        piece = os.read(controller, 4096)
                    except OSError:  # EIO: the terminal's last writer is gone
                        return
                    if not piece:
                        return
                    drawn.extend(piece)

            reader = threading.Thread(target=read_terminal)
            reader.start()
            stdout, _ = proc.communicate(timeout=300)
            reader.join(timeout=60)
            os.close(controller)
        self.assertEqual(proc.returncode, 0, drawn.decode(errors="replace"))
        self.assertIn(b"stored t", stdout)
        # Redrawn in place, ending at the whole table and a newline.
        self.assertIn(b"\rput t [", drawn)
        self.assertIn(b"64.00 of 64.00 MiB", drawn)
        self.assertTrue(drawn.endswith(b"\n"), drawn[-200:])


if __name__ == "__main__":
    unittest.main(verbosity=2)
