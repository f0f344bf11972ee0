"""Sharded tables when servers go away (issue 25), on 127.0.0.1.

Three shards of T, shard 0 with two replicas (s0, s0b); the bundled load tester drives Gather
calls on T through shard 1's server, which routes every request's rows to all three shards.

1. Under load, s0b gets SIGTERM (it drains: health NOT_SERVING, then refuses, then exits), is
   started again, and then gets SIGKILL: not one call fails (the router stops sending to a
   draining replica and retries a sub-call that a killed one drops on the other replica).
2. s2, shard 2's only replica, gets SIGKILL: lookups reading its rows are UNAVAILABLE naming
   shard 2 and its target; lookups reading only shards 0 and 1 keep succeeding.
3. s2 is started again: with no action on the router, every lookup succeeds again.

Needs $TC_SERVER_BINARY and $TC_CLI_BINARY, and the `tensorcompute` package.
"""

import json
import os
import signal
import subprocess
import tempfile
import time
import unittest

import numpy as np

from child_process import popen
from tensorcompute import Client, TensorComputeError, shard_rows
from reserved_ports import ReservedPorts
from server_process import ServerProcess

ROWS, DIM, SHARDS = 3000, 16, 3


class ShardedFailoverTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        cls.table = np.random.default_rng(7).standard_normal((ROWS, DIM)).astype(np.float32)
        cls.path = os.path.join(cls.tmp.name, "t.npy")
        np.save(cls.path, cls.table)
        names = ("s0", "s0b", "s1", "s2")
        cls.reservation = ReservedPorts(len(names))  # held until the class ends: restarts too
        cls.ports = dict(zip(names, cls.reservation.numbers))
        p = cls.ports
        cls.peers = ",".join([f"ipv4:127.0.0.1:{p['s0']}|127.0.0.1:{p['s0b']}",
                              f"ipv4:127.0.0.1:{p['s1']}", f"ipv4:127.0.0.1:{p['s2']}"])
        cls.servers = {}
        for name in cls.ports:
            cls.start(name)
        cls.client = Client(cls.servers["s1"].target, timeout=10.0)

    @classmethod
    def start(cls, name):
        index = {"s0": 0, "s0b": 0, "s1": 1, "s2": 2}[name]
        if name in cls.servers:  # a restart: the old process is gone, its pipe closed here
            cls.servers[name].__exit__(None, None, None)
        server = ServerProcess("--cpu_threads=1", f"--listen=127.0.0.1:{cls.ports[name]}",
                               f"--preload=T={cls.path}", f"--shard_index={index}",
                               f"--shard_count={SHARDS}", f"--shard_peers={cls.peers}",
                               "--drain_notice_ms=300")
        cls.servers[name] = server.__enter__()

    @classmethod
    def tearDownClass(cls):
        cls.client.close()
        for server in cls.servers.values():
            server.__exit__(None, None, None)
        cls.reservation.close()
        cls.tmp.cleanup()

    def start_load(self, seconds):
        return popen(
            [os.environ["TC_CLI_BINARY"], "load", "--target", self.servers["s1"].target,
             "--op", "gather", "--params-name", "T", "--indices", "64", "--distinct", "64",
             "--concurrency", "8", "--duration", str(seconds), "--warmup", "0",
             "--timeout", "10", "--json", "-"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    def load_report(self, load):
        out, err = load.communicate(timeout=120)
        self.assertIn(load.returncode, (0, 3), err)
        return json.loads(out.strip().splitlines()[-1])

    def kill(self, name):
        process = self.servers[name]._process
        process.send_signal(signal.SIGKILL)
        process.wait(timeout=10)

    def lookups(self, low, high, n=100):
        """n gathers of 8 random rows in [low, high): (ok, [errors])."""
        rng = np.random.default_rng(low + high)
        ok, errors = 0, []
        for _ in range(n):
            rows = rng.integers(low, high, size=8)
            try:
                got = self.client.gather(None, rows, params_name="T")
                self.assertEqual(got.tobytes(), self.table[rows].tobytes())
                ok += 1
            except TensorComputeError as e:
                errors.append(e)
        return ok, errors

    def test_a_lost_replica_costs_no_call_and_a_lost_shard_is_named_until_it_returns(self):
        # 1. A replica of shard 0 drains, comes back, and is killed, under load.
        load = self.start_load(seconds=8)
        time.sleep(1.5)
        self.servers["s0b"]._process.send_signal(signal.SIGTERM)
        self.servers["s0b"]._process.wait(timeout=30)
        self.start("s0b")
        time.sleep(2.0)  # the router's health checks find it serving again
        self.kill("s0b")
        report = self.load_report(load)
        print(f"\nreplica drained, restarted and killed under load: {report['by_code']}")
        self.assertGreater(report["sent"], 100, report)
        self.assertEqual(report["by_code"], {"OK": report["sent"]}, report)

        # 2. Shard 2's only replica is killed.
        self.kill("s2")
        first_two = shard_rows(ROWS, SHARDS, 1)[1]  # rows of shards 0 and 1
        ok, errors = self.lookups(first_two, ROWS, n=20)
        self.assertEqual(ok, 0)
        for e in errors:
            self.assertEqual(e.code.name, "UNAVAILABLE", e.message)
            self.assertIn(f"shard 2 of 3 of table 'T' (ipv4:127.0.0.1:{self.ports['s2']})",
                          e.message)
        ok, errors = self.lookups(0, first_two, n=200)
        self.assertEqual((ok, errors), (200, []))
        print("shard 2 killed: 20 of 20 lookups reading it UNAVAILABLE naming it; "
              "200 of 200 reading shards 0-1 OK")

        # 3. It comes back: the router recovers by itself.
        self.start("s2")
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            ok, errors = self.lookups(0, ROWS, n=5)
            if ok == 5:
                break
            time.sleep(0.2)
        ok, errors = self.lookups(0, ROWS, n=200)
        self.assertEqual((ok, errors), (200, []))
        report = self.load_report(self.start_load(seconds=2))
        print(f"shard 2 back: 200 of 200 lookups OK, then under load {report['by_code']}")
        self.assertEqual(report["by_code"], {"OK": report["sent"]}, report)


if __name__ == "__main__":
    unittest.main()
