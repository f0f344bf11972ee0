"""Freshness through a router (issue 41): the time from an UpdateRows acknowledgement to a
lookup seeing the row, when the update goes through a router to a shard's replicas.

Four servers on 127.0.0.1: two shards of a float32 [262144, 64] table, each with two replicas
(s0a, s0b; s1a, s1b), every --shard_peers entry listing both replicas of its shard. Each of N
one-row, one-message UpdateRows streams is sent to s0a for a row of shard 1, so s0a forwards it
to both replicas of shard 1 (and an empty message to shard 0's). Then, on other connections:
  replica   a Gather of that row on s1b itself (hop-marked: answered from its own rows), polled
            until it returns the new row;
  routed    a Gather on s0b (a router for shard 1's rows) with min_sequence = the acknowledged
            sequence, retried on FAILED_PRECONDITION.
ack is the UpdateRows call (open, write, half-close, answer) through the router.

Usage (from the repository root, after building the server):
  PYTHONPATH=tests/testing TC_SERVER_BINARY=build/server/tensorcompute-server \
      .venv/bin/python3 tests/bench/sharded_freshness.py [--updates 200]
"""

import argparse
import os
import tempfile
import time

import grpc
import numpy as np

from reserved_ports import ReservedPorts
from server_process import ServerProcess
from tensorcompute.v1 import tensorcompute_pb2 as pb
from tensorcompute.v1 import tensorcompute_pb2_grpc as pb_grpc

ROWS, DIM, SHARDS = 262144, 64, 2
HOP = (("tc-shard-hop", "1"),)
NAMES = {"s0a": 0, "s0b": 0, "s1a": 1, "s1b": 1}


def tensor(array):
    array = np.ascontiguousarray(array)
    dtype = {np.dtype(np.int64): pb.DT_INT64, np.dtype(np.float32): pb.DT_FLOAT32}[array.dtype]
    return pb.Tensor(dtype=dtype, shape=array.shape, data=array.tobytes())


def percentile(values, q):
    return float(np.percentile(np.asarray(values) * 1e3, q))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--updates", type=int, default=200)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp, ReservedPorts(len(NAMES)) as reserved:
        path = os.path.join(tmp, "t.npy")
        np.save(path, np.zeros((ROWS, DIM), np.float32))
        ports = dict(zip(NAMES, reserved.numbers))
        peers = ",".join(f"ipv4:127.0.0.1:{ports[f's{i}a']}|127.0.0.1:{ports[f's{i}b']}"
                         for i in range(SHARDS))
        servers = {name: ServerProcess("--cpu_threads=1", f"--listen=127.0.0.1:{ports[name]}",
                                       f"--preload=T={path}", f"--shard_index={shard}",
                                       f"--shard_count={SHARDS}", f"--shard_peers={peers}")
                   for name, shard in NAMES.items()}
        for server in servers.values():
            server.__enter__()
        try:
            channels = {name: grpc.insecure_channel(s.target) for name, s in servers.items()}
            stubs = {name: pb_grpc.TensorComputeStub(c) for name, c in channels.items()}
            ack, replica, routed, polls, refusals = [], [], [], 0, 0
            rng = np.random.default_rng(1)
            for i in range(args.updates + 10):  # the first 10 warm the channels up
                row = int(rng.integers(ROWS // 2, ROWS))
                value = np.full((1, DIM), i + 1, np.float32)
                start = time.perf_counter()
                answer = stubs["s0a"].UpdateRows(iter([pb.UpdateRowsRequest(
                    name="T", indices=tensor(np.asarray([row], np.int64)),
                    values=tensor(value))]), timeout=10)
                acked = time.perf_counter()
                request = pb.GatherRequest(params_name="T",
                                           indices=tensor(np.asarray([row], np.int64)))
                while True:
                    out = stubs["s1b"].Gather(request, timeout=10, metadata=HOP)
                    polls += 1
                    if np.frombuffer(out.output.data, np.float32)[0] == i + 1:
                        break
                seen_replica = time.perf_counter()
                request.min_sequence = answer.sequence
                acked_again = time.perf_counter()
                while True:
                    try:
                        out = stubs["s0b"].Gather(request, timeout=10)
                        break
                    except grpc.RpcError as e:
                        if e.code() != grpc.StatusCode.FAILED_PRECONDITION:
                            raise
                        refusals += 1
                assert np.frombuffer(out.output.data, np.float32)[0] == i + 1
                seen_routed = time.perf_counter()
                if i >= 10:
                    ack.append(acked - start)
                    replica.append(seen_replica - acked)
                    routed.append(seen_routed - acked_again)
            n = args.updates
            print(f"{n} one-row updates through router s0a to shard 1's two replicas; "
                  f"{polls - n - 10} extra polls, {refusals} min_sequence refusals")
            print("| way | ack p50 ms | seen p50 ms | seen p99 ms | seen max ms |")
            print("|---|---:|---:|---:|---:|")
            for way, seen in (("replica (s1b, hop-marked)", replica),
                              ("routed (s0b, min_sequence)", routed)):
                print(f"| {way} | {percentile(ack, 50):.2f} | {percentile(seen, 50):.2f} | "
                      f"{percentile(seen, 99):.2f} | {max(seen) * 1e3:.2f} |")
            for channel in channels.values():
                channel.close()
        finally:
            for server in servers.values():
                server.__exit__(None, None, None)


if __name__ == "__main__":
    main()
