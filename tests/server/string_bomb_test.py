"""Messages of empty strings against the real binary: RSS stays within the budget (issue 22).

A DT_STRING element costs 2 bytes on the wire (an empty `strings` entry) and ~140 bytes once
parsed into a std::string and converted; KServe's `bytes_contents` the same. The server charges
what a message costs decoded to --max_inflight_bytes before parsing it (server/native/unary_reactor.h,
proto/decoded_cost.h), so eight clients at once, native Gather and KServe ModelInfer, must keep
its peak RSS (VmHWM) under its RSS before plus the budget plus OVERHEAD_MIB:

  - bombs: messages of 15.5 MiB (7.75 M strings, a quarter of the issue's 62 MiB, with a quarter
    of its 1 GiB budget), ~1 GB each decoded: RESOURCE_EXHAUSTED unparsed, every one;
  - fits: messages of 1.5 MiB (750 k strings, ~100 MB decoded), two of which fit the budget:
    each OK or UNAVAILABLE ("server overloaded"), and some OK.

The same over KServe HTTP/REST, with BYTES inputs as binary data (a 4-byte length per string,
so half as many strings in the same body), against a server of its own: its HTTP threads'
allocator arenas are not the gRPC threads'. The HTTP front end reserves the body before reading
it and charges what the JSON decode held and what the BYTES inputs become before planning
(server/kserve/http_infer_call.h): the bombs are 429 (RESOURCE_EXHAUSTED), unconverted, and the
ones that fit 200 or 503 (UNAVAILABLE); the same RSS bound holds.

OVERHEAD_MIB = 128: gRPC's per-connection buffers and what the allocator keeps of freed memory
across its threads. Measured (2-core machine): the whole run peaks at base + 165 to 200 MiB,
under 3 s; before the decoded cost was charged, the same bombs were all OK and took the server
to 1.7 GB (native) and 3.4 GB (KServe), and the full-size ones (62 MiB, the default 1 GiB
budget) to 3.7 and 9.0 GB (docs/reliability.md).
"""

import http.client
import json
import os
import threading
import unittest

import grpc

from server_process import ServerProcess

MIB = 1 << 20
BUDGET = 256 * MIB
MAX_MESSAGE = 16 * MIB
OVERHEAD_MIB = 128
CLIENTS = 8
BOMB = 7_750_000
FITS = 750_000

GATHER = "/tensorcompute.v1.TensorCompute/Gather"
INFER = "/inference.GRPCInferenceService/ModelInfer"


def varint(n):
    out = bytearray()
    while n >= 0x80:
        out.append(n & 0x7F | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def field(number, payload):
    """A length-delimited field: its tag, its length, its bytes."""
    return varint(number << 3 | 2) + varint(len(payload)) + payload


def native_strings(n):
    """GatherRequest: params DT_STRING [n], all empty; indices int32 [1] = {0}."""
    params = b"\x08\x10" + field(2, varint(n)) + b"\x22\x00" * n
    indices = b"\x08\x04" + field(2, b"\x01") + field(3, b"\0\0\0\0")
    return field(1, params) + field(2, indices)


def http_strings(n):
    """KServe HTTP infer body for `gather` (binary data extension): params BYTES [n], all empty
    (a 4-byte zero length each); indices INT32 [1] = {0}. Returns (JSON length, body)."""
    header = json.dumps({"inputs": [
        {"name": "params", "shape": [n], "datatype": "BYTES",
         "parameters": {"binary_data_size": 4 * n}},
        {"name": "indices", "shape": [1], "datatype": "INT32",
         "parameters": {"binary_data_size": 4}}]}).encode()
    return len(header), header + b"\0" * (4 * n) + b"\0" * 4


def kserve_strings(n):
    """ModelInferRequest for `gather`: params BYTES [n] in bytes_contents, all empty."""
    params = (field(1, b"params") + field(2, b"BYTES") + field(3, varint(n)) +
              field(5, b"\x42\x00" * n))
    indices = (field(1, b"indices") + field(2, b"INT32") + field(3, b"\x01") +
               field(5, field(2, b"\x00")))
    return field(1, b"gather") + field(5, params) + field(5, indices)


class StringBombTest(unittest.TestCase):
    def test_concurrent_messages_of_empty_strings_stay_within_the_budget(self):
        with ServerProcess(f"--max_inflight_bytes={BUDGET}", f"--max_message_bytes={MAX_MESSAGE}",
                           "--drain_notice_ms=0") as server:
            channel = grpc.insecure_channel(server.target, options=[
                ("grpc.max_send_message_length", MAX_MESSAGE)])
            # Warm up: gRPC's threads and buffers belong to the base.
            self.assertEqual(self.send_all(channel, GATHER, native_strings(10), 2), {"OK": 2})
            base_mib = server.status_kib("VmRSS") / 1024
            for method, make in [(GATHER, native_strings), (INFER, kserve_strings)]:
                codes = self.send_all(channel, method, make(BOMB), CLIENTS)
                self.assertEqual(codes, {"RESOURCE_EXHAUSTED": CLIENTS}, method)
                codes = self.send_all(channel, method, make(FITS), CLIENTS)
                self.assertEqual(set(codes) - {"OK", "UNAVAILABLE"}, set(), (method, codes))
                self.assertGreater(codes.get("OK", 0), 0, (method, codes))
            hwm_mib = server.status_kib("VmHWM") / 1024
            print(f"RSS before {base_mib:.0f} MiB, VmHWM {hwm_mib:.0f} MiB; bound "
                  f"{base_mib:.0f} + {BUDGET / MIB:.0f} + {OVERHEAD_MIB} MiB")
            self.assertLessEqual(hwm_mib, base_mib + BUDGET / MIB + OVERHEAD_MIB)
            # Still serving afterwards.
            self.assertEqual(self.send_all(channel, GATHER, native_strings(10), 1), {"OK": 1})

    def test_concurrent_http_bodies_of_empty_strings_stay_within_the_budget(self):
        with ServerProcess(f"--max_inflight_bytes={BUDGET}", f"--max_message_bytes={MAX_MESSAGE}",
                           "--drain_notice_ms=0", "--http_listen=127.0.0.1:0") as server:
            # Warm up: the HTTP threads and a call's buffers belong to the base.
            self.assertEqual(self.post_all(server.http_port, http_strings(10), 2), {200: 2})
            base_mib = server.status_kib("VmRSS") / 1024
            for n, want in [(BOMB // 2, {429}), (FITS // 2, {200, 503})]:
                codes = self.post_all(server.http_port, http_strings(n), CLIENTS)
                self.assertEqual(set(codes) - want, set(), (n, codes))
                if 200 in want:
                    self.assertGreater(codes.get(200, 0), 0, (n, codes))
            hwm_mib = server.status_kib("VmHWM") / 1024
            print(f"HTTP: RSS before {base_mib:.0f} MiB, VmHWM {hwm_mib:.0f} MiB; bound "
                  f"{base_mib:.0f} + {BUDGET / MIB:.0f} + {OVERHEAD_MIB} MiB")
            self.assertLessEqual(hwm_mib, base_mib + BUDGET / MIB + OVERHEAD_MIB)
            # Still serving afterwards.
            self.assertEqual(self.post_all(server.http_port, http_strings(10), 1), {200: 1})

    def post_all(self, port, request, clients):
        """POSTs the (JSON length, body) `request` from `clients` threads at once; returns
        {HTTP status: count}."""
        header_length, body = request
        codes = {}
        lock = threading.Lock()

        def one():
            connection = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
            connection.request("POST", "/v2/models/gather/infer", body, {
                "Content-Type": "application/octet-stream",
                "Inference-Header-Content-Length": str(header_length)})
            response = connection.getresponse()
            reply = response.read()
            connection.close()
            if response.status not in (200, 429, 503):
                print("HTTP", response.status, reply[:300])
            with lock:
                codes[response.status] = codes.get(response.status, 0) + 1

        threads = [threading.Thread(target=one) for _ in range(clients)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        return codes

    def send_all(self, channel, method, message, clients):
        """Sends `message` from `clients` threads at once; returns {code name: count}."""
        call = channel.unary_unary(method)
        codes = {}
        lock = threading.Lock()

        def one():
            try:
                call(message, timeout=60)
                code = "OK"
            except grpc.RpcError as e:
                code = e.code().name
                if code not in ("RESOURCE_EXHAUSTED", "UNAVAILABLE"):
                    print(method, code, e.details())
            with lock:
                codes[code] = codes.get(code, 0) + 1

        threads = [threading.Thread(target=one) for _ in range(clients)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        return codes


if __name__ == "__main__":
    unittest.main()
