"""Hand-made HTTP/2 frames, for the tests that play a hostile client (a stock client cannot).

    sock.sendall(PREFACE + frame(SETTINGS, 0, 0))
    sock.sendall(frame(HEADERS, END_HEADERS, 1, b"".join(hpack_literal(k, v) for k, v in ...)))
    sock.sendall(frame(RST_STREAM, 0, 1, struct.pack(">I", CANCEL)))

RFC 9113 (frames) and RFC 7541 (HPACK; only literals without indexing, no Huffman, are made).
"""

import struct

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
DATA, HEADERS, RST_STREAM, SETTINGS, PING, GOAWAY = 0, 1, 3, 4, 6, 7
END_STREAM, END_HEADERS, ACK = 0x1, 0x4, 0x1
CANCEL = 0x8


def frame(kind, flags, stream, payload=b""):
    return struct.pack(">I", len(payload))[1:] + bytes([kind, flags]) + struct.pack(
        ">I", stream) + payload


def hpack_literal(name, value):  # literal header field without indexing, new name, no Huffman
    def string(s):
        data = s.encode()
        if len(data) < 127:
            return bytes([len(data)]) + data
        rest, out = len(data) - 127, bytearray([127])
        while rest >= 128:
            out.append(rest % 128 | 0x80)
            rest //= 128
        return bytes(out) + bytes([rest]) + data
    return b"\x00" + string(name) + string(value)


def read_frames(buffer):
    """Splits complete frames off `buffer`: ([(kind, flags, stream, payload), ...], rest)."""
    frames = []
    while len(buffer) >= 9:
        length = int.from_bytes(buffer[:3], "big")
        if len(buffer) < 9 + length:
            break
        stream = int.from_bytes(buffer[5:9], "big") & 0x7FFFFFFF
        frames.append((buffer[3], buffer[4], stream, buffer[9:9 + length]))
        buffer = buffer[9 + length:]
    return frames, buffer
