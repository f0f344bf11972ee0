"""Python client for tensorcompute: tf.gather / tf.gather_nd computed by a gRPC server.

    import numpy as np
    import tensorcompute

    with tensorcompute.Client("localhost:50051") as client:
        client.gather(np.arange(12).reshape(4, 3), [3, -1, 0], axis=0)   # rows 3, 3, 0
        client.gather_nd([[1, 2], [3, 4]], [[0, 1], [1, 0]])             # array([2, 3])
        client.health()                                                  # "SERVING"
        client.put_tensor("emb", np.ones((1000, 64), np.float32))        # a resident table
        client.gather(None, [3, 1], params_name="emb")                   # only indices travel

See tensorcompute.client for the details (dtypes, errors, retries).
"""

from tensorcompute.client import Client, TensorComputeError, TensorInfo

__version__ = "0.1.0"

__all__ = ["Client", "TensorComputeError", "TensorInfo", "__version__"]
