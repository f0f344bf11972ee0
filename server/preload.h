// File: server/preload.h
//
// --preload: resident tensors loaded from .npy files at start-up, before health turns SERVING.
//
// Thread-safety: call from one thread (it starts its own readers); the registry and `place`
// must be thread-safe.

#ifndef TENSORCOMPUTE_SERVER_PRELOAD_H_
#define TENSORCOMPUTE_SERVER_PRELOAD_H_

#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"

#include "core/shard_spec.h"
#include "core/tensor_registry.h"
#include "server/native/put_tensor_call.h"

namespace tensorcompute::server {

// Loads each "NAME=PATH.npy[:KIND]" of `specs` into `registry`, on the device `place` chooses
// for "" (the server's default), reserving the bytes it will hold against the registry's limit
// before placing it. KIND is a storage kind (core::ParseTableStorage: as-is, float16,
// int8-rowwise, int8-rowwise-prequantized; default as-is); a last ":WORD" holding no '/' or
// '.' is read as one. A C-order file of fixed-size elements is read in one copy, straight into
// the table (core/npy_file.h), after its bytes are reserved; strings and Fortran order are read
// whole, then converted (twice the memory for a while; the log says so). Tables load in
// parallel, up to one per core, the cores shared among their readers; after a failure no
// further one is started. Returns the first failure in `specs`' order, naming the spec:
// INVALID_ARGUMENT for a spec that is not NAME=PATH.npy[:KIND],
// an unknown kind, a file that cannot be read or parsed, a scalar, a table the kind does not take
// or a value it cannot hold (core::PlanTableLayout, core::TableEncoder); the registry's and the
// placement's errors (e.g. RESOURCE_EXHAUSTED).
// With `shard` (its index and count; total_rows is each file's first dimension), each tensor
// is loaded as that shard of its table: only the shard's rows are read (core::ShardRows), from
// a C-order .npy of fixed-size elements (others are INVALID_ARGUMENT).
// `key_specs` ("NAME=KEYS.npy[:POLICY]", --preload_keys) make the table NAME of `specs` a keyed
// table (core/keyed_rows.h): KEYS.npy holds int64 [rows], row i's key the i-th, unique; POLICY
// is error (the default) or zero; its capacity is its rows. INVALID_ARGUMENT for a spec that
// names no --preload table, keys of another dtype, shape or count, a duplicate key ("tensor
// 'T': keys[7] = -42 repeats keys[3]"), or a table that is not read in place (strings, Fortran
// order). With `shard`, a keyed table is sharded by key (core/key_split.h): every server reads
// the whole keys file and the whole rows file (in pieces of about 64 MiB), and keeps the keys k
// with KeyShard(k, count) == index and their rows; total_rows is the file's keys.
// A spec ending ":disk" ("NAME=PATH.npy[:KIND]:disk") is a table on disk (core/disk_rows.h),
// behind a row cache of `disk.cache_bytes` (its rows' bytes, at most the table's; what it
// counts against the registry's limit, with the cache's bookkeeping). With KIND as-is or
// int8-rowwise-prequantized (the forms a file holds as served) its rows stay in PATH, read in
// place (a C-order .npy of fixed-size little-endian numbers). With float16 or int8-rowwise
// they are converted, at each start, into an unnamed file under `disk.table_dir` (counted
// against the registry's disk bytes; a C-order float32 .npy; INVALID_ARGUMENT without a
// table_dir). It is read with direct I/O where the file system allows it, and neither sharded
// nor keyed (INVALID_ARGUMENT).
absl::Status Preload(const std::vector<std::string>& specs, core::TensorRegistry* registry,
                     const TensorPlacer& place, std::optional<core::ShardSpec> shard = std::nullopt,
                     const std::vector<std::string>& key_specs = {}, const DiskTier& disk = {});

}  // namespace tensorcompute::server

#endif  // TENSORCOMPUTE_SERVER_PRELOAD_H_
