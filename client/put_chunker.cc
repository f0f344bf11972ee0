#include "client/put_chunker.h"

#include <algorithm>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "google/protobuf/io/coded_stream.h"
#include "google/protobuf/io/zero_copy_stream_impl_lite.h"
#include "google/protobuf/wire_format_lite.h"
#include "grpcpp/support/slice.h"

#include "core/dtype.h"
#include "proto/tensor_codec.h"

namespace tensorcompute::client {
namespace {

// The bytes one entry of `repeated bytes strings = 8` takes on the wire: a one-byte tag (field 8,
// wire type 2: 8 << 3 | 2 = 0x42, below 0x80), the varint length and the string itself.
int64_t StringWireBytes(const std::string& s) {
  return 1 + static_cast<int64_t>(google::protobuf::io::CodedOutputStream::VarintSize64(s.size())) +
         static_cast<int64_t>(s.size());
}

int64_t KeyCount(const PutChunkerOptions& options) {
  if (!options.keyed.has_value()) return 0;
  return static_cast<int64_t>(options.keyed->keys.data.size() / sizeof(int64_t));
}

}  // namespace

// Chunk buffers that come back when gRPC is done with their slices: an upload reads into the
// same few pages over and over, instead of fresh ones (a page fault each 4 KiB) every chunk.
class ChunkPool : public std::enable_shared_from_this<ChunkPool> {
 public:
  // A slice of `n` bytes (uninitialized contents) over a pooled buffer.
  grpc::Slice Take(size_t n) {
    std::string buffer;
    {
      absl::MutexLock lock(&mu_);
      if (!free_.empty()) {
        buffer = std::move(free_.back());
        free_.pop_back();
      }
    }
    // A kept buffer may be larger than `n` (an earlier, larger chunk): the slice covers n bytes.
    if (buffer.size() < n) buffer.resize(n);
    // The loan holds the pool: gRPC may free the slice after the chunker, and its pool, are gone.
    auto* loan = new Loan{shared_from_this(), std::move(buffer)};
    return grpc::Slice(loan->buffer.data(), n, &Return, loan);
  }

 private:
  // A buffer out in a slice, and the pool it goes back to.
  struct Loan {
    std::shared_ptr<ChunkPool> pool;
    std::string buffer;
  };
  // A few buffers are kept: as many as an upload has in flight.
  static constexpr size_t kKept = 8;

  // Runs on whichever thread gRPC drops the slice's last reference on: hence the mutex.
  static void Return(void* p) {
    std::unique_ptr<Loan> loan(static_cast<Loan*>(p));
    absl::MutexLock lock(&loan->pool->mu_);
    if (loan->pool->free_.size() < kKept) loan->pool->free_.push_back(std::move(loan->buffer));
  }

  absl::Mutex mu_;
  std::vector<std::string> free_ ABSL_GUARDED_BY(mu_);
};

PutChunker::PutChunker(std::string name, const core::TensorView& tensor, PutChunkerOptions options)
    : name_(std::move(name)),
      dtype_(tensor.dtype),
      shape_(tensor.shape),
      strings_(tensor.dtype == core::DataType::kString ? tensor : core::TensorView()),
      source_(tensor.dtype == core::DataType::kString ? TensorSource() : SourceOf(tensor)),
      options_(std::move(options)),
      total_(tensor.dtype == core::DataType::kString ? static_cast<int64_t>(tensor.strings.size())
                                                     : static_cast<int64_t>(tensor.data.size())),
      rows_(KeyCount(options_)) {}

PutChunker::PutChunker(std::string name, TensorSource source, PutChunkerOptions options)
    : name_(std::move(name)),
      dtype_(source.dtype),
      shape_(source.shape),
      source_(std::move(source)),
      options_(std::move(options)),
      total_(SourceBytes(source_).value_or(0)),
      rows_(KeyCount(options_)) {}

bool PutChunker::Head(v1::PutTensorRequest* message, int64_t* data_bytes) {
  *data_bytes = 0;
  // The first message is always produced, even for an empty tensor: it carries the description.
  if (!status_.ok() || (messages_ > 0 && offset_ >= total_ && keys_sent_ >= rows_)) return false;
  message->Clear();
  if (messages_ == 0) {
    message->set_name(name_);
    message->set_dtype(proto::ToProtoDataType(dtype_));
    for (int64_t d : shape_) message->add_shape(d);
    message->set_device(options_.device);
    message->set_replace(options_.replace);
    message->set_storage(static_cast<v1::TableStorage>(options_.storage));
    message->set_tier(static_cast<v1::TableTier>(options_.tier));
    if (options_.shard.has_value()) {
      message->mutable_shard()->set_index(options_.shard->index);
      message->mutable_shard()->set_count(options_.shard->count);
      message->mutable_shard()->set_total_rows(options_.shard->total_rows);
      message->mutable_shard()->set_by_key(options_.shard->by_key);
    }
    Describe(message);
  }
  if (offset_ >= total_) {
    // An empty tensor: the description alone; or keys that no data carries, in messages of
    // their own.
    const int64_t per_message = std::max<int64_t>(1, options_.chunk_bytes / sizeof(int64_t));
    AddKeys(keys_sent_ + std::min(per_message, rows_ - keys_sent_), message);
    return true;
  }
  message->set_offset(offset_);
  if (dtype_ == core::DataType::kString) {
    int64_t bytes = 0;
    int64_t end = offset_;
    // At least one string per message, then as many as fit.
    do {
      bytes += StringWireBytes(*strings_.strings[end]);
      ++end;
    } while (end < total_ &&
             bytes + StringWireBytes(*strings_.strings[end]) <= options_.chunk_bytes);
    for (int64_t i = offset_; i < end; ++i) message->add_strings(*strings_.strings[i]);
    offset_ = end;
    return true;
  }
  // Whole elements per chunk, so that no element straddles two messages.
  const int64_t element = static_cast<int64_t>(core::ElementSize(dtype_));
  const int64_t chunk = std::max(element, DataBudget() / element * element);
  *data_bytes = std::min(chunk, total_ - offset_);
  // The keys of the rows this chunk completes (total_ = rows_ x row bytes, both > 0 here).
  if (rows_ > 0) AddKeys((offset_ + *data_bytes) / (total_ / rows_), message);
  return true;
}

void PutChunker::Describe(v1::PutTensorRequest* message) const {
  if (!options_.keyed.has_value()) return;
  v1::KeyedTable* keyed = message->mutable_keyed();
  keyed->set_missing(static_cast<v1::MissingKeys>(options_.keyed->missing));
  keyed->set_capacity(options_.keyed->capacity);
  if (options_.keyed->default_row.has_value()) {
    proto::ToProto(*options_.keyed->default_row, keyed->mutable_default_row());
  }
}

int64_t PutChunker::DataBudget() const {
  if (rows_ == 0 || total_ == 0) return options_.chunk_bytes;
  // Whole rows and their keys per chunk when a row and its key fit in one; else at most a row
  // of data, so that each message ends one row at most and carries one key at most.
  const int64_t row_bytes = total_ / rows_;
  const int64_t rows = options_.chunk_bytes / (row_bytes + static_cast<int64_t>(sizeof(int64_t)));
  return rows == 0 ? std::min(options_.chunk_bytes, row_bytes) : rows * row_bytes;
}

void PutChunker::AddKeys(int64_t end, v1::PutTensorRequest* message) {
  if (end <= keys_sent_) return;
  const absl::Span<const uint8_t> keys = options_.keyed->keys.data;
  message->set_keys(keys.data() + keys_sent_ * sizeof(int64_t),
                    static_cast<size_t>(end - keys_sent_) * sizeof(int64_t));
  keys_sent_ = end;
}

bool PutChunker::ReadChunk(int64_t n, uint8_t* out) {
  if (n > 0) {
    status_ = source_.read(offset_, absl::MakeSpan(out, static_cast<size_t>(n)));
    if (!status_.ok()) return false;
    offset_ += n;
  }
  ++messages_;
  return true;
}

bool PutChunker::Next(v1::PutTensorRequest* message) {
  int64_t n = 0;
  if (!Head(message, &n)) return false;
  if (n == 0) return ReadChunk(0, nullptr);
  std::string* data = message->mutable_data();
  data->resize(static_cast<size_t>(n));
  return ReadChunk(n, reinterpret_cast<uint8_t*>(data->data()));
}

bool PutChunker::NextBuffer(grpc::ByteBuffer* out) {
  v1::PutTensorRequest head;
  int64_t n = 0;
  if (!Head(&head, &n)) return false;
  // The other fields, then `data`'s key and length, then the chunk in a slice of its own:
  // concatenated encodings of a message's fields are that message (protobuf's wire format).
  // `data` (field 7) then follows storage (9) and shard (10) out of field-number order, which
  // every parser accepts: the wire format does not require fields in order.
  std::string bytes = head.SerializeAsString();
  if (n == 0) {
    grpc::Slice slice(bytes);
    *out = grpc::ByteBuffer(&slice, 1);
    return ReadChunk(0, nullptr);
  }
  // Scoped: `bytes` holds exactly the tag and length only once `coded` is destroyed (it flushes
  // and gives back the unused part of the string's buffer).
  {
    google::protobuf::io::StringOutputStream stream(&bytes);
    google::protobuf::io::CodedOutputStream coded(&stream);
    coded.WriteTag(google::protobuf::internal::WireFormatLite::MakeTag(
        v1::PutTensorRequest::kDataFieldNumber,
        google::protobuf::internal::WireFormatLite::WIRETYPE_LENGTH_DELIMITED));
    coded.WriteVarint64(static_cast<uint64_t>(n));
  }
  if (pool_ == nullptr) pool_ = std::make_shared<ChunkPool>();
  grpc::Slice chunk = pool_->Take(static_cast<size_t>(n));  // only ours until sent
  if (!ReadChunk(n, const_cast<uint8_t*>(chunk.begin()))) return false;
  const grpc::Slice slices[2] = {grpc::Slice(bytes), std::move(chunk)};
  *out = grpc::ByteBuffer(slices, 2);
  return true;
}

}  // namespace tensorcompute::client
