"""The tensorcompute client for asyncio: tensorcompute.Client's methods as coroutines, on grpc.aio.

    import asyncio
    import numpy as np
    import tensorcompute.aio

    async def main():
        async with tensorcompute.aio.Client("localhost:50051", timeout=10) as client:
            params = np.arange(12, dtype=np.float32).reshape(4, 3)
            rows, elements = await asyncio.gather(        # both calls in flight at once
                client.gather(params, [3, -1, 0]),
                client.gather_nd(params, [[0, 1], [2, 2]]))

    asyncio.run(main())

The constructor's arguments, the methods' arguments and return values, the errors
(TensorComputeError with the server's code and message; ValueError and TypeError before any
RPC), retries, deadlines and compression are tensorcompute.Client's: tensorcompute.client's
docstring describes them all. What differs:
  - every method is a coroutine, close() too (`async with` closes the client);
  - make the client, and use it, in one event loop (grpc.aio ties its channels to the loop);
  - cancelling the task that awaits a call cancels the RPC, also while a retry sleeps its
    backoff (asyncio.sleep): the task gets asyncio.CancelledError, not TensorComputeError;
  - numpy arrays are converted to and from the wire on the event loop's thread (the sync client
    converts on the caller's), so a very large array holds the loop while it is copied;
    put_tensor's upload and update_rows' rows are streamed in chunks as the sync client
    streams them, each one written before the next is made.
"""

import asyncio

import grpc
import grpc.aio

from tensorcompute import _common, client
from tensorcompute._common import TensorComputeError

__all__ = ["Client"]


def _doc_of(sync_method):
    """Gives the decorated coroutine the docstring of the sync client's method of its name."""

    def give(method):
        method.__doc__ = sync_method.__doc__
        return method

    return give


class Client(_common.ClientBase):
    """A connection to a tensorcompute server for asyncio; make and use it in one event loop,
    and `await close()` it (or use `async with`)."""

    _grpc = grpc.aio
    _repr_name = "tensorcompute.aio.Client"

    @_doc_of(client.Client.gather)
    async def gather(self, params, indices=None, axis=None, batch_dims=0, timeout=None,
                     params_name=None, min_sequence=None, keys=None, missing=None,
                     return_found=False):
        request = _common.gather_request(params, indices, axis, batch_dims, params_name,
                                         min_sequence, keys, missing, return_found)
        return _common.lookup_output(await self._call(self._stub.Gather, request, timeout),
                                     return_found)

    @_doc_of(client.Client.gather_nd)
    async def gather_nd(self, params, indices, batch_dims=0, timeout=None, params_name=None,
                        min_sequence=None):
        request = _common.gather_nd_request(params, indices, batch_dims, params_name,
                                            min_sequence)
        return _common.output(await self._call(self._stub.GatherNd, request, timeout))

    @_doc_of(client.Client.embedding_bag)
    async def embedding_bag(self, params, indices=None, offsets=None, per_sample_weights=None,
                            mode="sum", include_last_offset=False, padding_idx=None,
                            timeout=None, params_name=None, min_sequence=None, keys=None,
                            missing=None, return_found=False):
        request = _common.embedding_bag_request(params, indices, offsets, per_sample_weights,
                                                mode, include_last_offset, padding_idx,
                                                params_name, min_sequence, keys, missing,
                                                return_found)
        return _common.lookup_output(
            await self._call(self._stub.EmbeddingBag, request, timeout), return_found)

    @_doc_of(client.Client.put_tensor)
    async def put_tensor(self, name, array, device="", replace=False,
                         chunk_bytes=_common.DEFAULT_CHUNK_BYTES, all_targets=False,
                         timeout=None, storage="as-is", shard=None, keys=None, missing=None,
                         default_row=None, capacity=None, tier="memory"):
        make_requests = _common.put_uploads(name, array, device, replace, chunk_bytes, storage,
                                            shard, keys, missing, default_row, capacity, tier)

        async def put(stub):
            response = await self._call(stub.PutTensor, None, timeout,
                                        metadata=self._admin_metadata,
                                        make_request=make_requests)
            return _common.put_or_delete_info(response)

        return await self._on_targets("put", name, all_targets, put)

    @_doc_of(client.Client.update_rows)
    async def update_rows(self, name, indices=None, values=None,
                          chunk_bytes=_common.DEFAULT_CHUNK_BYTES, timeout=None, keys=None,
                          delete_keys=None):
        make_requests = _common.update_uploads(name, indices, values, chunk_bytes,
                                               self._max_message_bytes, keys=keys,
                                               delete_keys=delete_keys)
        response = await self._call(self._stub.UpdateRows, None, timeout,
                                    metadata=self._admin_metadata, make_request=make_requests)
        return _common.update_sequence(response)

    @_doc_of(client.Client.delete_tensor)
    async def delete_tensor(self, name, all_targets=False, timeout=None):
        request = _common.delete_request(name)

        async def delete(stub):
            response = await self._call(stub.DeleteTensor, request, timeout,
                                        metadata=self._admin_metadata)
            return _common.put_or_delete_info(response)

        return await self._on_targets("delete", name, all_targets, delete)

    @_doc_of(client.Client.list_tensors)
    async def list_tensors(self, timeout=None):
        response = await self._call(self._stub.ListTensors, _common.list_request(), timeout)
        return _common.tensor_infos(response)

    @_doc_of(client.Client.health)
    async def health(self, service="", timeout=None):
        response = await self._call(self._health_check(), _common.health_request(service),
                                    timeout)
        return _common.health_status(response)

    @_doc_of(client.Client.close)
    async def close(self):
        for channel in self._channels_to_close():
            await channel.close()

    async def __aenter__(self):
        return self

    async def __aexit__(self, *exc):
        await self.close()
        return False

    async def _on_targets(self, what, name, all_targets, one):
        """await one(stub) on this client's channel, or with all_targets on each address's,
        one after the other."""
        replicas = self._replica_stubs() if all_targets else None
        if replicas is None:
            return await one(self._stub)
        outcomes = []
        for target, stub in replicas:
            try:
                outcomes.append((target, await one(stub)))
            except TensorComputeError as e:
                outcomes.append((target, e))
        return _common.all_targets_outcome(what, name, outcomes)

    async def _call(self, method, request, timeout, metadata=None, make_request=None):
        """await method(request) with the retry policy; make_request() makes a fresh request
        (an iterator for a streaming call, which grpc.aio writes one message at a time) per
        attempt instead."""
        self._check_open()
        attempts = _common.Attempts(self.retries, self.timeout if timeout is None else timeout)
        metadata = self._metadata if metadata is None else metadata
        while True:
            try:
                if make_request is not None:
                    request = make_request()
                return await method(request, timeout=attempts.remaining(), metadata=metadata)
            except grpc.RpcError as e:
                sleep = attempts.backoff(e)
            await asyncio.sleep(sleep)
