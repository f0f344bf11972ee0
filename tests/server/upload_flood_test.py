"""Many slow uploads do not starve lookups, nor hold memory no limit sees (docs/reliability.md,
"Slow uploads").

Against the real tensorcompute-server with a small uploads' share (--max_message_bytes=1 MiB,
so each upload holds a 2 MiB slot, and --max_upload_bytes=16 MiB: 8 at once) and a short idle
bound (--upload_idle_timeout_s=2), for FLOOD_SECONDS:

  - slow uploads: SLOW threads, each uploading a 16 MiB tensor in chunks of just under 1 MiB,
    one a second (it would take 16 s: none finishes), and starting again at once when refused
    or ended;
  - stalled uploads: STALLED threads, started first, each sending its first chunk and then
    nothing (and starting again when refused or ended);
  - a well-behaved client: small Gathers in a closed loop;
  - a well-behaved upload: a 4 KiB tensor every half second.

Asserted: the share never holds more than its limit (the gauge, scraped every 100 ms), uploads
beyond it are refused UNAVAILABLE naming max_upload_bytes, stalled ones are answered
DEADLINE_EXCEEDED naming --upload_idle_timeout_s, the server's peak RSS stays under its RSS
before the flood + the share + the tensors being built (8 x 16 MiB, max_resident_bytes') +
RSS_SLACK_MIB (not under ASan, TC_SANITIZED=1: its quarantine holds freed memory), at least
MIN_OK_SHARE of the Gathers are OK; the well-behaved upload is either
stored or refused at the share (the documented answer: the share is one pool for all uploads),
and once the flood has gone it is stored, and the share is back to 0.

Run by ctest from tests/server (tests/testing on PYTHONPATH) with TC_SERVER_BINARY set, after
the Python client is installed into .venv; the figures are printed.
"""

import collections
import json
import os
import threading
import time
import unittest

import grpc
import numpy as np

from prometheus_scrape import labels, scrape
from server_process import ServerProcess
from tensorcompute import _common
from tensorcompute.v1 import tensorcompute_pb2, tensorcompute_pb2_grpc

MIB = 1 << 20
MESSAGE = 1 * MIB
SHARE = 16 * MIB
TENSOR = 16 * MIB  # each slow upload's tensor
CHUNK = MESSAGE - 4096  # its chunks: a message of just under max_message_bytes
SLOW = 50
STALLED = 5
IDLE_S = 2
FLOOD_SECONDS = 12
MIN_OK_SHARE = 0.99
RSS_SLACK_MIB = 128
GAUGE = ("tensorcompute_upload_bytes", labels())
REFUSED = ("tensorcompute_uploads_refused_total", labels())


def first_message(name, size, data):
    return tensorcompute_pb2.PutTensorRequest(
        name=name, dtype=tensorcompute_pb2.DT_UINT8, shape=[size], replace=True, data=data)


class Flood:
    """The hostile uploads; `codes` counts how their calls ended."""

    def __init__(self, stub):
        self.stub = stub
        self.stop = threading.Event()
        self.codes = collections.Counter()
        self.messages = {}  # code -> one message with it
        self.lock = threading.Lock()
        self.threads = [threading.Thread(target=self.slow, args=(i,)) for i in range(SLOW)]
        self.threads += [threading.Thread(target=self.stalled, args=(i,)) for i in range(STALLED)]

    def chunks(self, name, stall, ended):
        yield first_message(name, TENSOR, b"\1" * CHUNK)
        sent = CHUNK
        # Until the call has ended (refused, timed out, or cancelled at the end): a generator
        # that returned would half-close the upload, which the server would answer
        # INVALID_ARGUMENT (too few bytes).
        while not ended.wait(1.0):
            if stall or self.stop.is_set():
                continue
            yield tensorcompute_pb2.PutTensorRequest(offset=sent, data=b"\2" * CHUNK)
            sent += CHUNK

    def upload(self, name, stall):
        while not self.stop.is_set():
            ended = threading.Event()
            call = self.stub.PutTensor.future(self.chunks(name, stall, ended), timeout=60)
            while not call.done() and not self.stop.wait(0.1):
                pass
            call.cancel()  # at the end, the client gives up: CANCELLED
            try:
                call.result()
                code, message = grpc.StatusCode.OK, ""
            except grpc.RpcError as e:
                code, message = e.code(), e.details()
            except grpc.FutureCancelledError:
                code, message = grpc.StatusCode.CANCELLED, ""
            ended.set()
            with self.lock:
                self.codes[code.name] += 1
                self.messages.setdefault(code.name, message)
            if code == grpc.StatusCode.UNAVAILABLE:
                self.stop.wait(0.05)  # and again: keep the share contested

    def slow(self, i):
        self.upload(f"slow_{i}", stall=False)

    def stalled(self, i):
        self.upload(f"stalled_{i}", stall=True)

    def start(self):
        # The stalled ones first, so that they hold slots (which the idle bound must free)
        # before the slow ones take every slot for the rest of the run.
        for t in self.threads[SLOW:]:
            t.start()
        time.sleep(0.5)
        for t in self.threads[:SLOW]:
            t.start()

    def join(self):
        self.stop.set()
        for t in self.threads:
            t.join(timeout=30)


def gather_loop(stub, stop, latencies, codes):
    request = _common.gather_request(np.arange(256, dtype=np.float32).reshape(64, 4),
                                     np.array([3, 1, 63], dtype=np.int64), 0, 0, None)
    while not stop.is_set():
        start = time.perf_counter()
        try:
            stub.Gather(request, timeout=5)
            codes["OK"] += 1
        except grpc.RpcError as e:
            codes[e.code().name] += 1
        latencies.append(time.perf_counter() - start)


def small_upload(stub, name):
    """A well-behaved 4 KiB upload: its status code's name and message."""
    try:
        stub.PutTensor(iter([first_message(name, 4096, b"\3" * 4096)]), timeout=10)
        return "OK", ""
    except grpc.RpcError as e:
        return e.code().name, e.details()


class UploadFloodTest(unittest.TestCase):
    def test_slow_uploads_are_held_to_their_share(self):
        with ServerProcess(f"--max_message_bytes={MESSAGE}", f"--max_upload_bytes={SHARE}",
                           f"--upload_idle_timeout_s={IDLE_S}", "--cpu_threads=2") as server:
            channel = grpc.insecure_channel(server.target)
            stub = tensorcompute_pb2_grpc.TensorComputeStub(channel)
            grpc.channel_ready_future(channel).result(timeout=30)
            # Good clients on a connection of their own, as another client would be.
            good_channel = grpc.insecure_channel(
                server.target, options=[("grpc.use_local_subchannel_pool", 1)])
            good = tensorcompute_pb2_grpc.TensorComputeStub(good_channel)
            self.assertEqual(small_upload(good, "warm"), ("OK", ""))
            base_kib = server.status_kib("VmRSS")

            flood = Flood(stub)
            stop_good = threading.Event()
            latencies, gather_codes = [], collections.Counter()
            gatherer = threading.Thread(target=gather_loop,
                                        args=(good, stop_good, latencies, gather_codes))
            flood.start()
            gatherer.start()
            peak_gauge, peak_rss_kib, small = 0, 0, collections.Counter()
            small_messages = {}
            end = time.time() + FLOOD_SECONDS
            next_small = time.time() + 1
            while time.time() < end:
                samples = scrape(server.metrics_port)
                peak_gauge = max(peak_gauge, samples[GAUGE])
                peak_rss_kib = max(peak_rss_kib, server.status_kib("VmRSS"))
                if time.time() >= next_small:
                    code, message = small_upload(good, "small")
                    small[code] += 1
                    small_messages.setdefault(code, message)
                    next_small = time.time() + 0.5
                time.sleep(0.1)
            stop_good.set()
            gatherer.join()
            flood.join()

            # The flood is gone: its calls ended, the share is back to 0, uploads are stored.
            deadline = time.time() + 20
            while scrape(server.metrics_port)[GAUGE] != 0 and time.time() < deadline:
                time.sleep(0.1)
            samples = scrape(server.metrics_port)
            after = small_upload(good, "after")
            hwm_kib = server.status_kib("VmHWM")
            channel.close()
            good_channel.close()

        total = sum(gather_codes.values())
        ok_share = gather_codes["OK"] / total if total else 0.0
        p99_ms = sorted(latencies)[int(0.99 * (len(latencies) - 1))] * 1e3 if latencies else 0
        rss_bound_kib = base_kib + (SHARE + 8 * TENSOR) // 1024 + RSS_SLACK_MIB * 1024
        print(json.dumps({
            "flood_codes": dict(flood.codes), "flood_messages": flood.messages,
            "refused_total": samples[REFUSED], "upload_bytes_peak": peak_gauge,
            "upload_bytes_limit": SHARE, "rss_base_mib": base_kib // 1024,
            "rss_peak_sampled_mib": peak_rss_kib // 1024, "vmhwm_mib": hwm_kib // 1024,
            "rss_bound_mib": rss_bound_kib // 1024, "gathers": dict(gather_codes),
            "gather_ok_share": round(ok_share, 4), "gather_p99_ms": round(p99_ms, 2),
            "small_uploads_during": dict(small), "small_upload_after": after[0],
        }, indent=1))

        self.assertLessEqual(peak_gauge, SHARE)
        self.assertGreater(peak_gauge, 0)
        self.assertGreater(flood.codes["UNAVAILABLE"], 0)
        self.assertIn("max_upload_bytes", flood.messages["UNAVAILABLE"])
        self.assertTrue(flood.messages["UNAVAILABLE"].startswith("server overloaded: "))
        self.assertGreaterEqual(samples[REFUSED], flood.codes["UNAVAILABLE"])
        self.assertGreater(flood.codes["DEADLINE_EXCEEDED"], 0)
        self.assertIn("--upload_idle_timeout_s", flood.messages["DEADLINE_EXCEEDED"])
        # Nothing else: every slow upload was refused, stalled, or cancelled by its client at
        # the end (CANCELLED) -- none was stored, none failed otherwise.
        self.assertLessEqual(set(flood.codes), {"UNAVAILABLE", "DEADLINE_EXCEEDED", "CANCELLED"})
        if not os.environ.get("TC_SANITIZED"):  # ASan's quarantine holds freed memory
            self.assertLess(hwm_kib, rss_bound_kib)
        self.assertGreater(total, 0)
        self.assertGreaterEqual(ok_share, MIN_OK_SHARE, dict(gather_codes))
        self.assertLessEqual(set(small), {"OK", "UNAVAILABLE"})
        if "UNAVAILABLE" in small_messages:
            self.assertIn("max_upload_bytes", small_messages["UNAVAILABLE"])
        self.assertEqual(samples[GAUGE], 0)
        self.assertEqual(after, ("OK", ""))


if __name__ == "__main__":
    unittest.main()
