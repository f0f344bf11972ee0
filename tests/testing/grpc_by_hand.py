"""gRPC calls written by hand: protobuf fields and the native GatherRequest, framed for HTTP/2
(h2_frames.py), for the tests that must send what a stock client would not (never reading its
answers, naming the compressions it accepts) or see what a stock client hides (whether an
answer came compressed).

Protobuf wire format: https://protobuf.dev/programming-guides/encoding/. gRPC over HTTP/2:
https://github.com/grpc/grpc/blob/master/doc/PROTOCOL-HTTP2.md.
"""

import os
import random
import socket
import struct

from h2_frames import ACK, DATA, END_HEADERS, END_STREAM, HEADERS, PREFACE, SETTINGS, frame, \
    hpack_literal, read_frames

GATHER = "/tensorcompute.v1.TensorCompute/Gather"
DT_INT32, DT_UINT8 = 4, 6  # tensorcompute.v1.DataType


def varint(n):
    out = bytearray()
    while True:
        byte, n = n & 0x7F, n >> 7
        out.append(byte | (0x80 if n else 0))
        if not n:
            return bytes(out)


def field(number, payload):  # length-delimited field
    return varint(number << 3 | 2) + varint(len(payload)) + payload


def int_field(number, value):
    return varint(number << 3) + varint(value)


def tensor(dtype, shape, data):
    return int_field(1, dtype) + b"".join(int_field(2, d) for d in shape) + field(3, data)


def gather_request(rows, row_bytes, n_indices, params=None):
    """A valid GatherRequest: uint8 params [rows, row_bytes] (random unless `params` is given),
    int32 indices [n_indices] (axis 0): the response carries n_indices * row_bytes bytes."""
    params = os.urandom(rows * row_bytes) if params is None else params
    indices = struct.pack(f"<{n_indices}i", *(random.randrange(rows) for _ in range(n_indices)))
    return (field(1, tensor(DT_UINT8, [rows, row_bytes], params)) +
            field(2, tensor(DT_INT32, [n_indices], indices)))


def grpc_message(message):
    """A message as gRPC frames it: not compressed (flag 0), its length, its bytes."""
    return b"\x00" + struct.pack(">I", len(message)) + message


def call_headers(port, path, extra=()):
    """The HEADERS block of a call to `path`, with `extra` (name, value) pairs after the usual."""
    return b"".join(hpack_literal(k, v) for k, v in [
        (":method", "POST"), (":scheme", "http"), (":path", path),
        (":authority", f"127.0.0.1:{port}"), ("content-type", "application/grpc"),
        ("te", "trailers"), *extra])


def call_frames(stream, headers, message):
    """HEADERS then DATA frames of at most 16 KiB (SETTINGS_MAX_FRAME_SIZE's default), the last
    one ending the stream."""
    out = [frame(HEADERS, END_HEADERS, stream, headers)]
    framed = grpc_message(message)
    for at in range(0, len(framed), 16384):
        last = at + 16384 >= len(framed)
        out.append(frame(DATA, END_STREAM if last else 0, stream, framed[at:at + 16384]))
    return b"".join(out)


def ack_server_settings(sock):
    """Reads until the server's SETTINGS and acknowledges them, as any client does; returns the
    bytes read after them."""
    buffer = b""
    while True:
        chunk = sock.recv(65536)
        if not chunk:
            raise ConnectionError("the server closed before its SETTINGS")
        frames, buffer = read_frames(buffer + chunk)
        for i, (kind, flags, _, _) in enumerate(frames):
            if kind == SETTINGS and not flags & ACK:
                sock.sendall(frame(SETTINGS, ACK, 0))
                return b"".join(frame(*f) for f in frames[i + 1:]) + buffer


def first_answer_bytes(port, path, message, extra_headers=(), count=8, timeout=10):
    """One call on a fresh connection; the first `count` bytes of its answer's first DATA frame:
    the gRPC message's compressed flag, its length, then its (maybe compressed) first bytes. None
    if the call ends without a message (an error status)."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        sock.sendall(PREFACE + frame(SETTINGS, 0, 0))
        buffer = ack_server_settings(sock)
        sock.sendall(call_frames(1, call_headers(port, path, extra_headers), message))
        data = b""
        while True:
            frames, buffer = read_frames(buffer)
            for kind, flags, stream, payload in frames:
                if stream != 1:
                    continue
                if kind == DATA:
                    data += payload
                    if len(data) >= count:
                        return data[:count]
                if flags & END_STREAM:
                    return data[:count] if data else None
            chunk = sock.recv(65536)
            if not chunk:
                return data[:count] if data else None
            buffer += chunk
