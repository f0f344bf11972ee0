#include "client/put_chunker.h"

#include <algorithm>
#include <utility>

#include "google/protobuf/io/coded_stream.h"

#include "core/dtype.h"
#include "proto/tensor_codec.h"

namespace tensorcompute::client {
namespace {

// The bytes one entry of `repeated bytes strings = 8` takes on the wire: a one-byte tag, the
// varint length and the string itself.
int64_t StringWireBytes(const std::string& s) {
  return 1 + static_cast<int64_t>(google::protobuf::io::CodedOutputStream::VarintSize64(s.size())) +
         static_cast<int64_t>(s.size());
}

}  // namespace

PutChunker::PutChunker(std::string name, const core::TensorView& tensor, PutChunkerOptions options)
    : name_(std::move(name)),
      dtype_(tensor.dtype),
      shape_(tensor.shape),
      strings_(tensor.dtype == core::DataType::kString ? tensor : core::TensorView()),
      source_(tensor.dtype == core::DataType::kString ? TensorSource() : SourceOf(tensor)),
      options_(std::move(options)),
      total_(tensor.dtype == core::DataType::kString ? static_cast<int64_t>(tensor.strings.size())
                                                     : static_cast<int64_t>(tensor.data.size())) {}

PutChunker::PutChunker(std::string name, TensorSource source, PutChunkerOptions options)
    : name_(std::move(name)),
      dtype_(source.dtype),
      shape_(source.shape),
      source_(std::move(source)),
      options_(std::move(options)),
      total_(SourceBytes(source_).value_or(0)) {}

bool PutChunker::Next(v1::PutTensorRequest* message) {
  if (!status_.ok() || (messages_ > 0 && offset_ >= total_)) return false;
  message->Clear();
  if (messages_ == 0) {
    message->set_name(name_);
    message->set_dtype(proto::ToProtoDataType(dtype_));
    for (int64_t d : shape_) message->add_shape(d);
    message->set_device(options_.device);
    message->set_replace(options_.replace);
    message->set_storage(static_cast<v1::TableStorage>(options_.storage));
    if (options_.shard.has_value()) {
      message->mutable_shard()->set_index(options_.shard->index);
      message->mutable_shard()->set_count(options_.shard->count);
      message->mutable_shard()->set_total_rows(options_.shard->total_rows);
    }
  }
  if (offset_ >= total_) {  // an empty tensor: the description alone
    ++messages_;
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
    ++messages_;
    return true;
  }
  // Whole elements per chunk, so that no element straddles two messages; read straight into
  // the message.
  const int64_t element = static_cast<int64_t>(core::ElementSize(dtype_));
  const int64_t chunk = std::max(element, options_.chunk_bytes / element * element);
  const int64_t n = std::min(chunk, total_ - offset_);
  std::string* data = message->mutable_data();
  data->resize(static_cast<size_t>(n));
  status_ = source_.read(
      offset_, absl::MakeSpan(reinterpret_cast<uint8_t*>(data->data()), static_cast<size_t>(n)));
  if (!status_.ok()) return false;
  offset_ += n;
  ++messages_;
  return true;
}

}  // namespace tensorcompute::client
