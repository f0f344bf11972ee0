"""Python client for tensorcompute: tf.gather / tf.gather_nd / embedding_bag computed by a
gRPC server.

    import numpy as np
    import tensorcompute

    with tensorcompute.Client("localhost:50051") as client:
        client.gather(np.arange(12).reshape(4, 3), [3, -1, 0], axis=0)   # rows 3, 3, 0
        client.gather_nd([[1, 2], [3, 4]], [[0, 1], [1, 0]])             # array([2, 3])
        client.embedding_bag(np.eye(3, dtype=np.float32), [[0, 1], [2, 2]], mode="mean")
                                                     # array([[.5, .5, 0], [0, 0, 1]], float32)
        client.health()                                                  # "SERVING"
        client.put_tensor("emb", np.ones((1000, 64), np.float32))        # a resident table
        client.gather(None, [3, 1], params_name="emb")                   # only indices travel
        client.embedding_bag(None, [3, 1, 7], offsets=[0, 2], params_name="emb")  # 2 bags

tensorcompute.aio.Client is the same client for asyncio (`await client.gather(...)`). See
tensorcompute.client for the details (dtypes, errors, retries, compression).
"""

from tensorcompute import aio
from tensorcompute.client import (STORAGE_KINDS, TIERS, Client, DiskInfo, KeyedInfo, Shard,
                                  TensorComputeError, TensorInfo, key_shard, shard_rows)

__version__ = "0.1.0"

__all__ = [
    "Client", "DiskInfo", "KeyedInfo", "STORAGE_KINDS", "Shard", "TIERS", "TensorComputeError",
    "TensorInfo",
    "__version__", "aio", "key_shard", "shard_rows"
]
