// File: client/keyed_requests.h
//
// The keyed-table parts of the client's calls (issue 42; tensorcompute.proto, KeyedTable,
// GatherRequest.keys, KeyedInfo): PutOptions' keys checked and handed to the put chunker, a
// lookup's keys set on its request, the answer of a lookup by keys read, and a table's keyed
// description read. Client's helpers, in a file of their own so that client.cc stays the
// transport.
//
// Thread-safety: pure functions.

#ifndef TENSORCOMPUTE_CLIENT_KEYED_REQUESTS_H_
#define TENSORCOMPUTE_CLIENT_KEYED_REQUESTS_H_

#include <optional>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "tensorcompute/v1/tensorcompute.pb.h"

#include "client/client.h"
#include "client/put_chunker.h"
#include "core/shape.h"
#include "core/tensor.h"
#include "proto/tensor_codec.h"

namespace tensorcompute::client {

// Checks PutOptions' keyed fields against the shape of the tensor put, before any call.
// Returns OK, or INVALID_ARGUMENT for: missing, default_row or capacity set without keys;
// keys that are not well-formed int64 of rank 1 ("keys: expected int64 [rows], got int32
// [5]"); a scalar tensor; as many keys as the tensor's first dimension, or not ("keys: 4 keys
// for 5 rows"); a malformed default_row. What only the server knows (duplicates, the default
// row's dtype and shape, the capacity's bounds) it answers itself.
absl::Status CheckPutKeys(const PutOptions& options, const core::Shape& shape);

// The chunker's view of PutOptions' keyed fields; nullopt for a table without keys.
// REQUIRES: CheckPutKeys(options, ...) is OK.
std::optional<PutKeys> PutKeysOf(const PutOptions& options);

// Sets `keys` (in place of indices), the policy and return_found on a Gather or EmbeddingBag
// request. REQUIRES: keys is well-formed (the server checks its dtype).
template <typename Request>
void SetKeys(const core::TensorView& keys, const KeyedLookupOptions& keyed, Request* request) {
  proto::ToProto(keys, request->mutable_keys());
  request->set_missing(static_cast<v1::MissingKeys>(keyed.missing));
  request->set_return_found(keyed.return_found);
}

// The answer of a lookup by keys: `output` decoded, and `found` when the response has one
// (`has_found`). INVALID_ARGUMENT for an answer that does not decode, naming the field.
absl::StatusOr<KeyedLookupResult> ReadKeyedAnswer(const v1::Tensor& output, bool has_found,
                                                  const v1::Tensor& found);

// TensorInfo::keyed from the wire's.
KeyedInfo FromProtoKeyedInfo(const v1::KeyedInfo& info);

}  // namespace tensorcompute::client

#endif  // TENSORCOMPUTE_CLIENT_KEYED_REQUESTS_H_
