"""The tensorcompute client: numpy arrays in, numpy arrays out, over gRPC.

Usage:

    import numpy as np
    from tensorcompute import Client, TensorComputeError

    with Client("localhost:50051", timeout=10.0, retries=2) as client:
        params = np.arange(12, dtype=np.float32).reshape(4, 3)
        client.gather(params, [3, -1, 0])               # rows 3, 3 and 0: shape (3, 3)
        client.gather(params, [[0, 2]], axis=1)         # shape (4, 1, 2)
        client.gather_nd(params, [[0, 1], [2, 2]])      # array([1., 8.], dtype=float32)
        client.embedding_bag(params, [0, 2, 3], offsets=[0, 2])   # rows 0+2 and 3: shape (2, 3)
        try:
            client.gather(params, [4])
        except TensorComputeError as e:
            print(e.code, e.message)  # StatusCode.INVALID_ARGUMENT indices[0] = 4 is not in [-4, 4)

For asyncio, tensorcompute.aio.Client has the same arguments and methods, as coroutines
(`async with tensorcompute.aio.Client(target) as client: await client.gather(...)`);
everything below holds for it too.

Inputs are anything np.asarray accepts. Element types (numpy -> wire):
  bool, int8/16/32/64, uint8/16/32/64, float16/32/64, complex64/128 -> the matching DT_*;
  ml_dtypes.bfloat16 -> DT_BFLOAT16 (pip install 'tensorcompute[bfloat16]');
  bytes ('S'), str ('U') and object arrays of str/bytes -> DT_STRING (str is encoded as UTF-8).
Any other dtype (datetime64, void, float128, ...) raises TypeError before any RPC. Indices
must be int32 or int64 (a list of Python ints becomes int64); other index dtypes are sent as
they are and the server answers INVALID_ARGUMENT. An empty list of indices is sent as int64.

Outputs are writable numpy arrays in native byte order, decoded from a private copy of the
response bytes (np.frombuffer on a bytearray); DT_STRING comes back as an object array of
`bytes` (decode it yourself: the server moves bytes and never interprets them). Note that
numpy's fixed-width 'S'/'U' arrays drop trailing NUL bytes/characters; pass an object array
to send them. A DT_BFLOAT16 output is an ml_dtypes.bfloat16 array; without ml_dtypes it raises
ImportError (only reachable if bfloat16 params were sent some other way).

Errors: every failed RPC raises TensorComputeError with `.code` (a grpc.StatusCode) and
`.message` (the server's message, verbatim); str(e) is "INVALID_ARGUMENT: <message>".

Targets: "host:port" or any gRPC target URI ("dns:///host:port", "ipv4:10.0.0.1:50051,
10.0.0.2:50051", "unix:/path"). The channel balances calls over every address the name
resolves to (round_robin). `max_message_bytes` caps messages both ways (gRPC's default
receive limit is 4 MiB; the server's default limit is 64 MiB, like the client's).

Retries: `retries=N` makes up to N extra attempts of a call that failed with UNAVAILABLE
(server overloaded or unreachable; Gather, GatherNd and EmbeddingBag are pure functions, so
retrying is safe), sleeping an exponential backoff with jitter between attempts: attempt k
(1-based) waits between 0.5 and 1 times min(0.1 s * 2^(k-1), 5 s). All attempts share the
call's one timeout; when the next sleep would pass that deadline, the last error is raised at
once.
With retries the channel also reconnects sooner (from 0.1 s instead of gRPC's 1 s), so that
retries after a refused connection really try the connection again.

Compression: `compression="gzip"` (or "deflate") compresses every message this client sends
with gRPC's message compression; None (the default) or "none" sends them as they are. gRPC
servers accept both by default. Answers come back compressed only when the server is set to
compress (tensorcompute-server's --grpc_compression), and only with an algorithm this client
has announced that it accepts (gRPC negotiates it). Compression costs CPU at both ends: it pays
for compressible tensors (zeros, repeated values, small integers) on a slow network, not for
random floats.

TLS and tokens (the server's --tls_cert, --tls_client_ca and --auth_token_file):

    Client("tc.example:50051", tls=True, root_certificates="ca.pem",         # TLS
           certificate_chain="client.pem", private_key="client.key",       # + mTLS
           auth_token=open("token").read().strip())                        # + bearer token

root_certificates, certificate_chain and private_key are each PEM *bytes* (the contents) or a
str / os.PathLike naming a PEM file, read once here; any of them implies tls=True. Without
root_certificates the system's roots are used. tls_server_name overrides the name verified
against the server's certificate (gRPC's ssl_target_name_override). auth_token (str) is sent
on every call as "authorization: Bearer <token>"; a missing or wrong one gets UNAUTHENTICATED.
A TLS mismatch (plaintext to a TLS server, an untrusted server certificate, no client
certificate for an mTLS server) shows as UNAVAILABLE. admin_token (str), when set, is sent
instead of auth_token by put_tensor, delete_tensor and update_rows (the server's
--admin_token_file; without it they answer PERMISSION_DENIED).

Resident tensors: a table stored on the server once, then gathered from by name, so that
each call carries only its indices:

    client.put_tensor("emb", table)                   # uploaded in 1 MiB chunks
    client.gather(None, ids, params_name="emb")       # == client.gather(table, ids), bit for bit
    client.embedding_bag(None, bags, params_name="emb")   # the same for pooled lookups
    client.list_tensors()                             # [TensorInfo(name='emb', ...)]
    seq = client.update_rows("emb", ids, new_rows)    # rows replaced while served
    client.gather(None, ids, params_name="emb", min_sequence=seq)   # reads its own writes
    client.delete_tensor("emb")

Keyed tables: a resident table whose rows are looked up by sparse 64-bit keys (user, item or
feature IDs) instead of row numbers, with a policy for the keys it lacks:

    client.put_tensor("users", table, keys=ids, missing="zero")   # ids[i]: row i's key
    client.gather(None, keys=[90210, -7], params_name="users")    # those keys' rows
    out, found = client.embedding_bag(None, keys=bags, params_name="users", missing="skip",
                                      return_found=True)          # found: which keys exist

Every server replica holds its own copy; nothing is shared between replicas. With a target
that lists several addresses ("ipv4:10.0.0.1:50051,10.0.0.2:50051"), put_tensor and
delete_tensor with all_targets=True reach each address in turn; otherwise they reach one
address, the one the channel picks. A "dns:///name" target is one target whatever it resolves
to, so for a Kubernetes Deployment preload the table on every pod from a volume (the server's
`--preload NAME=PATH.npy`), or list the pods' addresses. A gather by name that reaches a
replica without the table raises NOT_FOUND.
"""

import time

import grpc

from tensorcompute import _common
from tensorcompute._common import (STORAGE_KINDS, TIERS, DiskInfo, KeyedInfo, Shard,
                                   TensorComputeError, TensorInfo, key_shard, shard_rows)

__all__ = ["Client", "DiskInfo", "KeyedInfo", "STORAGE_KINDS", "Shard", "TIERS",
           "TensorComputeError", "TensorInfo", "key_shard", "shard_rows"]


class Client(_common.ClientBase):
    """A connection to a tensorcompute server. Thread-safe; close() it (or use `with`)."""

    _grpc = grpc
    _repr_name = "Client"

    def gather(self, params, indices=None, axis=None, batch_dims=0, timeout=None,
               params_name=None, min_sequence=None, keys=None, missing=None, return_found=False):
        """tf.gather(params, indices, axis, batch_dims) on the server; returns a numpy array.

        axis=None leaves it unset: the server then uses batch_dims, as TensorFlow does.
        params_name: gather from that resident tensor (see put_tensor) instead; pass
        params=None then. Exactly one of params and params_name (else ValueError).
        min_sequence: with params_name, the least sequence the table must have reached on the
        server that answers (what update_rows returned: read your own writes); one that is
        behind raises TensorComputeError FAILED_PRECONDITION naming both numbers (try again or
        another replica). None (the default) or 0: any. With inline params it must be None.

        keys: on a keyed table (put_tensor with keys=, and params_name), the keys of the rows
        to gather, in place of indices (exactly one of the two, else ValueError): any shape,
        signed integers sent as int64; along axis 0 (axis None or 0, batch_dims 0). The
        answer is byte for byte the gather of the keys' rows by their indices. missing: what a
        key the table lacks gives, for this call: None (the table's policy), "error"
        (TensorComputeError INVALID_ARGUMENT "keys[3] = 90210 is not a key of table 'users'"),
        "zero" (a row of zeros) or "default" (the table's default row); an unknown one is
        ValueError. return_found: return (output, found), found a numpy bool array of the
        keys' shape, True where the key is in the table.
        """
        request = _common.gather_request(params, indices, axis, batch_dims, params_name,
                                         min_sequence, keys, missing, return_found)
        return _common.lookup_output(self._call(self._stub.Gather, request, timeout),
                                     return_found)

    def gather_nd(self, params, indices, batch_dims=0, timeout=None, params_name=None,
                  min_sequence=None):
        """tf.gather_nd(params, indices, batch_dims) on the server; returns a numpy array.

        params_name, min_sequence: gather from that resident tensor instead of params, at
        least at that sequence (as in gather).
        """
        request = _common.gather_nd_request(params, indices, batch_dims, params_name,
                                            min_sequence)
        return _common.output(self._call(self._stub.GatherNd, request, timeout))

    def embedding_bag(self, params, indices=None, offsets=None, per_sample_weights=None,
                      mode="sum", include_last_offset=False, padding_idx=None, timeout=None,
                      params_name=None, min_sequence=None, keys=None, missing=None,
                      return_found=False):
        """torch.nn.functional.embedding_bag(indices, params, offsets, mode=mode,
        per_sample_weights=..., include_last_offset=..., padding_idx=...) on the server, with
        TensorFlow's "sqrtn" as a fourth mode; returns a numpy array [bags, dim] in the
        params' dtype.

        params: a [rows, dim] table of float16, bfloat16, float32 or float64. indices: rank 1
        with offsets (bag b is indices[offsets[b]:offsets[b+1]], the last bag running to the
        end), or rank 2 [bags, n] without (fixed bags of n). offsets: rank 1, starting at 0,
        not decreasing; with include_last_offset it has one entry more than there are bags,
        the last being len(indices). Indices and offsets given as lists of ints are sent as
        int64. per_sample_weights: one weight per index, float32 or the params' dtype; a
        list of numbers (anything but a numpy array) is sent as float32. mode: "sum", "mean",
        "max" or "sqrtn" (any case); weights are not allowed with "max". padding_idx: a row
        in [-rows, rows) whose lookups add nothing and do not count; an empty bag (or one of
        padding rows only) gives zeros. Each element accumulates in float32 (float64 for
        float64 params) in index order, weighted terms with fma, then the division (mean,
        sqrtn), then one rounding to the params' dtype: tensorcompute.proto says every rule.
        params_name: look up in that resident tensor (see put_tensor) instead; pass
        params=None then. Exactly one of params and params_name, and a known mode (else
        ValueError, before any RPC). The server's errors (an index out of range, a bad
        offset, ...) raise TensorComputeError, INVALID_ARGUMENT naming the field and position.
        min_sequence: with params_name, as in gather.

        keys, missing, return_found: as in gather (keys shaped as indices would be; no
        padding_idx with them), and missing may also be "skip": a key the table lacks is left
        out of its bag as padding_idx's rows are (MEAN and SQRTN divide by the keys found; a
        bag of missing keys only is zeros).
        """
        request = _common.embedding_bag_request(params, indices, offsets, per_sample_weights,
                                                mode, include_last_offset, padding_idx,
                                                params_name, min_sequence, keys, missing,
                                                return_found)
        return _common.lookup_output(self._call(self._stub.EmbeddingBag, request, timeout),
                                     return_found)

    def put_tensor(self, name, array, device="", replace=False,
                   chunk_bytes=_common.DEFAULT_CHUNK_BYTES, all_targets=False, timeout=None,
                   storage="as-is", shard=None, keys=None, missing=None, default_row=None,
                   capacity=None, tier="memory"):
        """Stores `array` (anything np.asarray accepts; dtypes as for params) on the server as
        the resident tensor `name`, uploaded in messages of at most chunk_bytes tensor bytes
        (so it may be larger than max_message_bytes). Returns its TensorInfo. A C-contiguous
        numeric array, a np.memmap of a .npy included (np.load(path, mmap_mode="r")), is read
        chunk by chunk as it is sent, never copied whole.

        device: "" (the server's --device), "cpu", "gpu" or "gpu:N". replace: replace a
        tensor of that name (else ALREADY_EXISTS). all_targets: store a copy on every address
        of an "ipv4:a,b" target, one after the other (see the module docstring); the
        TensorInfo is the first one's. Sends admin_token when set. Raises TensorComputeError:
        ALREADY_EXISTS, RESOURCE_EXHAUSTED (over --max_resident_bytes), PERMISSION_DENIED,
        INVALID_ARGUMENT (a bad name, a scalar, an unknown device), ...; with all_targets,
        after trying every address, with the first failure's code and a message naming each
        address that failed and those that succeeded (their copies stay).

        storage: how the server stores a table (STORAGE_KINDS; tensorcompute.proto has every
        rule). "float16" and "int8-rowwise" take a float32 [rows, dim] array and convert it on
        the server (a value they cannot hold: INVALID_ARGUMENT); "int8-rowwise-prequantized"
        takes uint8 [rows, dim + 8] in FBGEMM's fused layout. Gather (axis 0) and embedding_bag
        on such a table return float32. An unknown kind is ValueError, before any RPC.

        shard: a Shard (or an (index, count, total_rows) tuple): `array` is that shard's rows
        of a table sharded by row ranges (shard_rows gives them); a server holding it answers
        lookups on the whole table, routing other rows to its --shard_peers. A keyed table is
        sharded by key instead: Shard(index, count, 0, by_key=True) with the rows and keys
        whose key_shard(keys, count) == index.

        keys: a keyed table (docs/resident-tables.md, "Keyed tables"): keys[i], a signed
        integer, is row i's key, unique (a repeat is INVALID_ARGUMENT naming both positions,
        "keys[7] = -42 repeats keys[3]"); rank 1, one per row (else ValueError). They are
        streamed beside the rows. gather and embedding_bag then take keys= in place of
        indices. missing: the table's policy for a key it lacks: "error" (None, the default),
        "zero" or "default" (its default_row). default_row: that row, in the dtype lookups
        return and the row shape (float32 [dim] for "float16" and "int8-rowwise", stored as
        the rows are; uint8 [dim + 8] for "int8-rowwise-prequantized"); a list of numbers is
        sent in that dtype. capacity: the rows the table holds before update_rows must grow it
        (None: its rows; at least them; its TensorInfo.shape[0], the free rows reading zeros by
        position). The key index is counted against --max_resident_bytes at 16 bytes a key of
        capacity. missing,
        default_row or capacity without keys is ValueError.

        tier: where the server keeps the table's rows (TIERS): "memory" (the default), or
        "disk": in a file the server writes under its --table_dir, behind a row cache of
        --table_cache_bytes, which is what the table counts against --max_resident_bytes
        (docs/resident-tables.md, "Tables on disk"). Lookups answer as on the table in memory
        (Gather on axis 0, embedding_bag), by indices or keys. Every storage kind works, keyed
        tables too (their key index in memory; they do not grow past capacity); a string or
        sharded table is INVALID_ARGUMENT, as is a GPU device; a server without --table_dir answers
        FAILED_PRECONDITION, one past --max_table_dir_bytes RESOURCE_EXHAUSTED. An unknown tier
        is ValueError, before any RPC.
        """
        make_requests = _common.put_uploads(name, array, device, replace, chunk_bytes, storage,
                                            shard, keys, missing, default_row, capacity, tier)

        def put(stub):
            response = self._call(stub.PutTensor, None, timeout, metadata=self._admin_metadata,
                                  make_request=make_requests)
            return _common.put_or_delete_info(response)

        return self._on_targets("put", name, all_targets, put)

    def update_rows(self, name, indices=None, values=None,
                    chunk_bytes=_common.DEFAULT_CHUNK_BYTES, timeout=None, keys=None,
                    delete_keys=None):
        """Replaces rows of the resident table `name` while it is served: row indices[i]
        becomes values[i]. Returns the table's new sequence (int): a lookup with
        min_sequence= it reads these rows.

        A keyed table (put_tensor(keys=...)) is updated by keys instead: keys= (int64, rank 1)
        with values= [len(keys), row shape...] upserts (a key the table holds gets its row
        replaced, a new key is added into a free slot of its capacity; when none is left the
        server grows the table, to twice its capacity or what the message needs, within
        --max_resident_bytes: RESOURCE_EXHAUSTED "table 'T' is full: ..." past it, that message
        changing nothing; list_tensors() shows the new keyed.capacity), and
        delete_keys= removes keys (one the table lacks is no change). The deletes are sent
        first, so their slots are free for the keys written.

        indices: int32 or int64, rank 1 (a list of ints is int64); a negative one counts from
        the end, as in gather. values: [len(indices), row shape...] in the table's dtype:
        float32 [n, dim] for a "float16" or "int8-rowwise" table (the server converts each row
        as at upload), uint8 [n, dim + 8] for an "int8-rowwise-prequantized" one, else the
        table's own dtype. The rows are streamed in messages of at most chunk_bytes (whole
        rows, at least one per message; capped by max_message_bytes), applied in order, each
        message at once (a lookup sees all of its rows or none). Values are absolute, so a
        stream retried on UNAVAILABLE (retries=) resends them harmlessly. Sends admin_token
        when set; reaches the one server the channel picks (one replica of a "dns:///" or
        "ipv4:a,b" target; a sharded table's server forwards rows to their shards).

        Raises ValueError or TypeError before any RPC (indices not int32/int64 of rank 1,
        values not one row per index, a string or unsupported dtype, chunk_bytes <= 0), or
        TensorComputeError: INVALID_ARGUMENT (an index out of range, a repeated index within
        one message, a wrong dtype or row shape: that message changes nothing), NOT_FOUND,
        FAILED_PRECONDITION (the table was replaced meanwhile), PERMISSION_DENIED, ...
        Messages applied before an error stay applied.
        """
        make_requests = _common.update_uploads(name, indices, values, chunk_bytes,
                                               self._max_message_bytes, keys=keys,
                                               delete_keys=delete_keys)
        response = self._call(self._stub.UpdateRows, None, timeout,
                              metadata=self._admin_metadata, make_request=make_requests)
        return _common.update_sequence(response)

    def delete_tensor(self, name, all_targets=False, timeout=None):
        """Deletes the resident tensor `name` (from every address with all_targets, as
        put_tensor); returns the deleted tensor's TensorInfo. Sends admin_token when set.
        Raises TensorComputeError: NOT_FOUND, PERMISSION_DENIED, ..."""
        request = _common.delete_request(name)

        def delete(stub):
            response = self._call(stub.DeleteTensor, request, timeout,
                                  metadata=self._admin_metadata)
            return _common.put_or_delete_info(response)

        return self._on_targets("delete", name, all_targets, delete)

    def list_tensors(self, timeout=None):
        """The resident tensors of the server that answers, by name: a list of TensorInfo."""
        response = self._call(self._stub.ListTensors, _common.list_request(), timeout)
        return _common.tensor_infos(response)

    def health(self, service="", timeout=None):
        """The grpc.health.v1 status of `service` ("" = the whole server): "SERVING",
        "NOT_SERVING", ... An unknown service raises TensorComputeError (NOT_FOUND)."""
        response = self._call(self._health_check(), _common.health_request(service), timeout)
        return _common.health_status(response)

    def close(self):
        """Closes the channel; later calls raise ValueError."""
        for channel in self._channels_to_close():
            channel.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def _on_targets(self, what, name, all_targets, one):
        """one(stub) on this client's channel, or with all_targets on each address's."""
        replicas = self._replica_stubs() if all_targets else None
        if replicas is None:
            return one(self._stub)
        outcomes = []
        for target, stub in replicas:
            try:
                outcomes.append((target, one(stub)))
            except TensorComputeError as e:
                outcomes.append((target, e))
        return _common.all_targets_outcome(what, name, outcomes)

    def _call(self, method, request, timeout, metadata=None, make_request=None):
        """method(request) with the retry policy; make_request() makes a fresh request (an
        iterator for a streaming call) per attempt instead."""
        self._check_open()
        attempts = _common.Attempts(self.retries, self.timeout if timeout is None else timeout)
        metadata = self._metadata if metadata is None else metadata
        while True:
            try:
                if make_request is not None:
                    request = make_request()
                return method(request, timeout=attempts.remaining(), metadata=metadata)
            except grpc.RpcError as e:
                sleep = attempts.backoff(e)
            time.sleep(sleep)
