// File: client/put_chunker.h
//
// Splits one tensor into the messages of a PutTensor upload (tensorcompute.proto,
// PutTensorRequest), one message at a time, so that an upload never holds more than the chunks
// in flight beyond the tensor itself, nor more than those at all when it reads a TensorSource
// (a large file read as it is sent):
//
//   PutChunker chunker(name, tensor.view(), {.device = "", .replace = false,
//                                             .chunk_bytes = 1 << 20});
//   v1::PutTensorRequest message;
//   while (chunker.Next(&message)) writer->Write(message);
//   if (!chunker.status().ok()) ...  // a source's read failed: the upload is incomplete
//
// The first message carries the description (name, dtype, shape, device, replace) and the
// first chunk; later messages carry only a chunk. Chunks come in order:
//   - fixed-size dtypes: `data` holds at most chunk_bytes bytes, rounded down to whole
//     elements (at least one element), and `offset` is the byte offset of data[0]; a source's
//     bytes are read straight into the message;
//   - DT_STRING: `strings` holds consecutive elements whose wire size (each string's bytes
//     plus its field tag and length prefix) stays within chunk_bytes; a single string larger
//     than that travels alone in its own message. `offset` is the element index of strings[0].
// An empty tensor (zero elements) is one message with the description and no chunk.
//
// A keyed table (PutChunkerOptions::keyed) sends its description (tensorcompute.proto,
// KeyedTable) in the first message and its keys, int64 little-endian, beside the rows: each
// message carries the keys of the rows its data completes, and chunk_bytes then bounds a
// message's data and keys together (give or take one key: when a row and its key exceed a
// chunk, a message holds at most a row of data and the key of the row it ends). Keys that no data
// carries (rows of zero bytes, DT_STRING, which the server refuses) follow in messages of their
// own, chunk_bytes of keys each (at least one).
//
// Thread-safety: a PutChunker is used by one thread at a time. It views `tensor` without
// copying it: the tensor's storage must outlive the chunker (caller's duty).

#ifndef TENSORCOMPUTE_CLIENT_PUT_CHUNKER_H_
#define TENSORCOMPUTE_CLIENT_PUT_CHUNKER_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "grpcpp/support/byte_buffer.h"
#include "tensorcompute/v1/tensorcompute.pb.h"

#include "client/tensor_source.h"
#include "core/keyed_rows.h"
#include "core/shard_spec.h"
#include "core/table_storage.h"
#include "core/tensor.h"

namespace tensorcompute::client {

class ChunkPool;  // put_chunker.cc

// A keyed table's description and keys (tensorcompute.proto, KeyedTable). Views, not copies:
// what they view must outlive the chunker (caller's duty).
struct PutKeys {
  core::TensorView keys;                                  // int64 [rows]: row i's key is keys[i]
  core::MissingKeys missing = core::MissingKeys::kTable;  // kTable: the server's kError
  std::optional<core::TensorView> default_row;            // unset: none
  int64_t capacity = 0;                                   // 0: the rows put
};

// Where the server keeps a table's rows (tensorcompute.proto, TableTier; the same numbers).
enum class TableTier : int32_t {
  kMemory = 0,
  kDisk = 1,  // in a file under the server's --table_dir, behind a row cache
};

struct PutChunkerOptions {
  // Where the server keeps the tensor: "" (its --device), "cpu", "gpu" or "gpu:N".
  std::string device;
  // Replace a resident tensor of the same name (else the server answers ALREADY_EXISTS).
  bool replace = false;
  // Largest chunk per message, in bytes (see the file comment). REQUIRES: > 0.
  int64_t chunk_bytes = int64_t{1} << 20;
  // How the server stores it (tensorcompute.proto, TableStorage).
  core::TableStorage storage = core::TableStorage::kAsIs;
  // Which shard of a table the tensor is (tensorcompute.proto, ShardSpec); unset: whole.
  std::optional<core::ShardSpec> shard = std::nullopt;
  // A keyed table (see the file comment); unset: not keyed.
  std::optional<PutKeys> keyed = std::nullopt;
  // Where the server keeps its rows.
  TableTier tier = TableTier::kMemory;
};

class PutChunker {
 public:
  // REQUIRES: `tensor` is well-formed (core::ValidateTensor accepts it);
  // options.chunk_bytes > 0; options.keyed, when set, holds rank-1 int64 keys of the tensor's
  // first dimension (CheckPutKeys, client/keyed_requests.h).
  PutChunker(std::string name, const core::TensorView& tensor, PutChunkerOptions options);
  // REQUIRES: source.dtype is a fixed-size dtype, its shape's bytes fit int64 (SourceBytes),
  // options.chunk_bytes > 0, and options.keyed as above.
  PutChunker(std::string name, TensorSource source, PutChunkerOptions options);

  // Fills `*message` (cleared first) with the next message and returns true, or returns false
  // when every message has been produced or a source's read failed (status() says which). The
  // first call returns true unless that read failed.
  bool Next(v1::PutTensorRequest* message);

  // The same message as Next's, as the bytes gRPC sends (`*out` replaced): a fixed-size
  // chunk is read straight into a slice of its own, after the other fields' encoding, so that
  // sending it copies nothing more (Next's message is copied once more when serialized).
  bool NextBuffer(grpc::ByteBuffer* out);

  // OK, or the error of the source's read that ended the messages early.
  const absl::Status& status() const { return status_; }
  // The number of messages produced so far.
  int64_t messages() const { return messages_; }
  // How much of the tensor the messages so far carried, and all of it: bytes (fixed-size
  // dtypes) or elements (strings).
  int64_t sent() const { return offset_; }
  int64_t total() const { return total_; }
  // The keys the messages so far carried (0 for a table without keys).
  int64_t keys_sent() const { return keys_sent_; }

  // --- implementation details below ---
 private:
  // Fills `*message` (cleared first) with the next message but its `data`, whose size it sets
  // in `*data_bytes` (0: none); false when there is no next message.
  bool Head(v1::PutTensorRequest* message, int64_t* data_bytes);
  // Reads the next `n` bytes of the source into `out` (none for 0) and counts the message;
  // false (status_ set) on failure.
  bool ReadChunk(int64_t n, uint8_t* out);
  // The description's keyed part, into the first message.
  void Describe(v1::PutTensorRequest* message) const;
  // The most data bytes a message carries: chunk_bytes, less room for the keys of the rows
  // they complete.
  int64_t DataBudget() const;
  // Adds the keys up to (not including) row `end` to `*message`.
  void AddKeys(int64_t end, v1::PutTensorRequest* message);

  const std::string name_;
  const core::DataType dtype_;
  const core::Shape shape_;
  const core::TensorView strings_;  // the tensor, for DT_STRING
  const TensorSource source_;       // the bytes, for fixed-size dtypes
  const PutChunkerOptions options_;
  const int64_t total_;  // bytes (fixed-size dtypes) or elements (strings)
  int64_t offset_ = 0;   // of the next chunk, in the same unit
  int64_t messages_ = 0;
  const int64_t rows_;     // the keys a keyed table sends (its first dimension); else 0
  int64_t keys_sent_ = 0;  // keys the messages so far carried
  absl::Status status_;
  std::shared_ptr<ChunkPool> pool_;  // NextBuffer's chunk buffers, made on first use
};

}  // namespace tensorcompute::client

#endif  // TENSORCOMPUTE_CLIENT_PUT_CHUNKER_H_
