#!/usr/bin/env python3
"""One Gather and one GatherNd against a tensorcompute server.

    python3 examples/gather_example.py --target localhost:50051
"""

import argparse
import sys

import numpy as np

import tensorcompute


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", default="localhost:50051",
                        help="server address: host:port or a gRPC target URI")
    parser.add_argument("--timeout", type=float, default=10.0, help="seconds per call")
    args = parser.parse_args()

    params = np.arange(12, dtype=np.float32).reshape(4, 3)
    with tensorcompute.Client(args.target, timeout=args.timeout) as client:
        try:
            rows = client.gather(params, [3, -1, 0], axis=0)
            elements = client.gather_nd(params, [[0, 1], [2, 2], [-1, 0]])
        except tensorcompute.TensorComputeError as e:
            print(f"error: {e}", file=sys.stderr)
            return 1
    print(f"params =\n{params}")
    print(f"gather(params, [3, -1, 0], axis=0) =\n{rows}")
    print(f"gather_nd(params, [[0, 1], [2, 2], [-1, 0]]) = {elements}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
