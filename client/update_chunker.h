// File: client/update_chunker.h
//
// Splits rows to update (indices and their values) into the messages of an UpdateRows stream
// (tensorcompute.proto, UpdateRowsRequest), one message at a time, whole rows per message:
//
//   UpdateChunker chunker("emb", indices.view(), SourceOf(values.view()), 1 << 20);
//   v1::UpdateRowsRequest message;
//   while (chunker.Next(&message)) writer->Write(message);
//   if (!chunker.status().ok()) ...  // the values' read failed: the stream is incomplete
//
// Every message carries `indices` (rank 1, the indices' dtype) and the matching `values`
// ([n, row shape...], the values' dtype); the first one also carries the table's name. A
// message holds as many rows as fit in chunk_bytes (each row counting its values' bytes and
// its index's), at least one, so that a message stays within the server's and gRPC's limits
// whatever the number of rows: UpdateRowsPerMessage says how many. Zero rows is one message
// with the name and empty tensors.
//
// Thread-safety: one thread at a time. It views `indices` without copying it: its storage
// must outlive the chunker (caller's duty); the values are read through their source.

#ifndef TENSORCOMPUTE_CLIENT_UPDATE_CHUNKER_H_
#define TENSORCOMPUTE_CLIENT_UPDATE_CHUNKER_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "tensorcompute/v1/tensorcompute.pb.h"

#include "client/tensor_source.h"
#include "core/tensor.h"

namespace tensorcompute::client {

// OK when `indices` and `values` can be sent as the rows of an UpdateRows stream: indices of
// rank 1 and dtype int32 or int64, values of a fixed-size dtype and rank >= 1 with one row per
// index (shape[0] == len(indices)), and a size that fits int64. Else INVALID_ARGUMENT saying
// which ("values has 3 rows but indices has 4 entries"). Ranges and the table's dtype are
// the server's to check.
// With `by_keys` (a keyed table's UpdateRows by keys), `indices` are int64 keys.
absl::Status CheckUpdateRows(const core::TensorView& indices, const TensorSource& values,
                             bool by_keys = false);

// Rows per message: chunk_bytes / (row_bytes + index_bytes), at least 1.
// REQUIRES: chunk_bytes > 0, row_bytes >= 0, index_bytes > 0.
int64_t UpdateRowsPerMessage(int64_t chunk_bytes, int64_t row_bytes, int64_t index_bytes);

class UpdateChunker {
 public:
  // REQUIRES: CheckUpdateRows(indices, values, by_keys) is OK; chunk_bytes > 0. With
  // `by_keys` the indices go in each message's `keys` (UpdateRowsRequest.keys).
  UpdateChunker(std::string name, const core::TensorView& indices, TensorSource values,
                int64_t chunk_bytes, bool by_keys = false);

  // Fills `*message` (cleared first) with the next message and returns true, or returns false
  // when every message has been produced or the values' read failed (status() says which).
  bool Next(v1::UpdateRowsRequest* message);

  // OK, or the error of the read that ended the messages early.
  const absl::Status& status() const { return status_; }
  int64_t messages() const { return messages_; }
  // Rows in the messages so far, and all of them.
  int64_t rows_sent() const { return next_row_; }
  int64_t total_rows() const { return total_rows_; }
  // Bytes of values in the messages so far, and all of them (what a progress bar shows).
  int64_t bytes_sent() const { return next_row_ * row_bytes_; }
  int64_t total_bytes() const { return total_rows_ * row_bytes_; }
  // Rows per message (UpdateRowsPerMessage for these rows).
  int64_t rows_per_message() const { return rows_per_message_; }

  // --- implementation details below ---
 private:
  const std::string name_;
  const core::TensorView indices_;
  const TensorSource values_;
  const int64_t total_rows_;
  const int64_t row_bytes_;
  const int64_t rows_per_message_;
  const bool by_keys_;
  int64_t next_row_ = 0;
  int64_t messages_ = 0;
  absl::Status status_;
};

}  // namespace tensorcompute::client

#endif  // TENSORCOMPUTE_CLIENT_UPDATE_CHUNKER_H_
