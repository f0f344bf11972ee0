"""The memory bound under a flood of maximum-size messages (issue 8, section 3).

64 clients, each on its own connection, send Gathers whose messages are as large as the server
accepts (--max_message_bytes), as fast as they are answered, against a --max_inflight_bytes
budget of 8 such messages. The server reads a message only with room for it in the budget
(server/admission/byte_budget.h), so its peak RSS (the kernel's VmHWM) must stay under its RSS before the
flood plus the budget plus a stated overhead:

  OVERHEAD_MIB = 192, about 3 MiB per connection: what gRPC keeps per connection (its
  transport and read buffers, the 64 KiB window of a call waiting to be read) and what the
  allocator keeps of freed buffers across gRPC's threads. Measured: 8 connections peak at
  base + 155 MiB, 64 at base + 235 to 255 MiB; the same flood took the server to ~2 GiB
  before it read messages only after admission.

Every call must be answered OK or UNAVAILABLE ("server overloaded"): nothing else, nothing lost.

Run alone: ctest --test-dir build -R memory_bound --output-on-failure
"""

import os
import re
import subprocess
import threading
import time
import unittest

from server_process import ServerProcess

MIB = 1 << 20
MAX_MESSAGE = 16 * MIB
BUDGET = 8 * MAX_MESSAGE
OVERHEAD_MIB = 192
CLIENTS = 64
ROWS, SLICE = 4000, 1024  # float32: 16,384,000 bytes of params, just under MAX_MESSAGE


class MemoryBoundTest(unittest.TestCase):
    def test_peak_rss_stays_under_the_budget_plus_the_overhead(self):
        cli = os.environ["TC_CLI_BINARY"]
        with ServerProcess(f"--max_message_bytes={MAX_MESSAGE}",
                           f"--max_inflight_bytes={BUDGET}", "--drain_notice_ms=0") as server:
            # Warm the server up with one ordinary call, so the baseline holds gRPC's threads.
            subprocess.run([cli, "load", "--target", server.target, "--requests", "20",
                            "--concurrency", "2"], check=True, capture_output=True, timeout=60)
            base_mib = server.status_kib("VmRSS") / 1024
            peak_samples = []
            stop = threading.Event()

            def sample():
                while not stop.is_set():
                    peak_samples.append(server.status_kib("VmRSS") / 1024)
                    time.sleep(0.02)

            sampler = threading.Thread(target=sample, daemon=True)
            sampler.start()
            load = subprocess.run(
                [cli, "load", "--target", server.target, "--rows", str(ROWS), "--slice",
                 str(SLICE), "--indices", "16", "--concurrency", str(CLIENTS), "--connections",
                 str(CLIENTS), "--duration", "8", "--warmup", "0", "--timeout", "60",
                 "--max-message-bytes", str(MAX_MESSAGE)],
                capture_output=True, text=True, timeout=180)
            stop.set()
            sampler.join()
            hwm_mib = server.status_kib("VmHWM") / 1024
            report = load.stdout + load.stderr
            print(report)
            print(f"RSS before {base_mib:.0f} MiB, peak sampled {max(peak_samples):.0f} MiB, "
                  f"VmHWM {hwm_mib:.0f} MiB; bound {base_mib:.0f} + {BUDGET / MIB:.0f} + "
                  f"{OVERHEAD_MIB} MiB")

            codes = dict(re.findall(r"^\s+([A-Z_]+)\s+(\d+)$", report, re.M))
            sent = int(re.search(r"requests\s+(\d+) sent", report).group(1))
            answered = int(re.search(r"(\d+) answered", report).group(1))
            self.assertEqual(sent, answered, report)
            self.assertGreater(int(codes.get("OK", 0)), 0, report)
            self.assertEqual(set(codes) - {"OK", "UNAVAILABLE"}, set(), report)
            self.assertLessEqual(hwm_mib, base_mib + BUDGET / MIB + OVERHEAD_MIB)
            # Still serving afterwards.
            subprocess.run([cli, "load", "--target", server.target, "--requests", "5"],
                           check=True, capture_output=True, timeout=60)


if __name__ == "__main__":
    unittest.main()
