#include "server/native/put_tensor_call.h"

#include <atomic>
#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "grpcpp/alarm.h"
#include "grpcpp/impl/codegen/proto_utils.h"

#include "core/dtype.h"
#include "core/key_split.h"
#include "core/keyed_rows.h"
#include "core/shape.h"
#include "core/shard_spec.h"
#include "core/status_macros.h"
#include "core/table_storage.h"
#include "proto/decoded_cost.h"
#include "proto/grpc_status.h"
#include "proto/tensor_codec.h"
#include "server/native/resident_rpcs.h"

namespace tensorcompute::server {
namespace {

// A table's shape with no rows: what a table on disk holds in memory.
core::Shape RowShape(core::Shape shape) {
  if (!shape.empty()) shape[0] = 0;
  return shape;
}

bool HasDescription(const v1::PutTensorRequest& m) {
  return !m.name().empty() || m.dtype() != v1::DT_UNSPECIFIED || m.shape_size() > 0 ||
         !m.device().empty() || m.replace() || m.storage() != v1::AS_IS || m.has_shard() ||
         m.has_keyed() || m.tier() != v1::MEMORY;
}

// One per PutTensor call; upload_stream_call.h reads, admits and answers.
class PutCall final : public UploadStreamCall {
 public:
  PutCall(const ResidentEnv& env, grpc::CallbackServerContext* context, grpc::ByteBuffer* reply)
      : UploadStreamCall(env, Rpc::kPutTensor, context, v1::PutTensorRequest::default_instance()),
        env_(env),
        reply_(*reply) {}

 private:
  absl::Status Ready() override { return KeepsTables(env_); }

  absl::Status Take(bool first) override { return first ? Describe() : Append(); }

  absl::Status Complete(int64_t /*messages*/) override { return Publish(); }

  std::string Subject() const override {
    return name_.empty() ? "the upload" : absl::StrCat("the upload of tensor '", name_, "'");
  }
  std::string Ending() const override { return "nothing was stored"; }

  // The first message: the name, dtype, shape, device and replace flag, then its chunk.
  absl::Status Describe() {
    first_ = false;
    const v1::PutTensorRequest& message_ = message<v1::PutTensorRequest>();
    name_ = message_.name();
    dtype_ = proto::FromProtoDataType(message_.dtype());
    shape_.assign(message_.shape().begin(), message_.shape().end());
    TC_ASSIGN_OR_RETURN(const core::ResidentSize size,
                        core::ValidateResidentDescription(name_, dtype_, shape_, env_.max_rank));
    elements_ = size.elements;
    TC_ASSIGN_OR_RETURN(
        layout_, core::PlanTableLayout(name_, static_cast<core::TableStorage>(message_.storage()),
                                       dtype_, shape_));
    if (message_.has_shard()) {
      shard_ = core::ShardSpec{message_.shard().index(), message_.shard().count(),
                               message_.shard().total_rows(), message_.shard().by_key()};
      if (dtype_ == core::DataType::kString) {
        return absl::InvalidArgumentError(
            absl::StrCat("tensor '", name_, "': DT_STRING tables are not sharded"));
      }
      TC_RETURN_IF_ERROR(core::ValidateShardSpec(name_, *shard_, shape_[0]));
      if (shard_->by_key)
        TC_RETURN_IF_ERROR(core::CheckShardKind(name_, *shard_, message_.has_keyed()));
    }
    // Fails a doomed upload before its bytes are sent; Put checks again when it publishes,
    // since another upload may take the name meanwhile.
    if (message_.has_keyed()) {
      keyed_ = message_.keyed();
      TC_ASSIGN_OR_RETURN(capacity_, core::CheckKeyedDescription(
                                         name_, dtype_, shape_, keyed_->capacity(),
                                         shard_.has_value() && !shard_->by_key,
                                         static_cast<core::MissingKeys>(keyed_->missing())));
      layout_ = core::KeyedLayout(layout_, capacity_);
    }
    if (!message_.replace()) TC_RETURN_IF_ERROR(env_.registry->CheckAbsent(name_));
    replace_ = message_.replace();
    device_ = message_.device();
    TC_RETURN_IF_ERROR(CheckTier(name_, message_.tier()));
    if (message_.tier() == v1::DISK) {
      TC_ASSIGN_OR_RETURN(disk_,
                          DiskUpload::Begin(env_.disk, env_.registry, name_, layout_, message_));
      TC_ASSIGN_OR_RETURN(
          tensor_, core::Tensor::Allocate(layout_.stored_dtype, RowShape(layout_.stored_shape)));
      total_bytes_ = layout_.sent_bytes;
      return Append();
    }
    // The bytes it will hold, reserved before anything is allocated: for strings the
    // per-element overhead now and each payload as it arrives; for a compact table its stored
    // bytes (the float32 rows sent are converted as they arrive, never held whole).
    // A keyed table adds its key index's bound.
    const int64_t reserve =
        dtype_ == core::DataType::kString
            ? core::ResidentBytes(dtype_, elements_, /*string_payload_bytes=*/0)
            : layout_.stored_bytes + (keyed_ ? core::KeyIndexBytes(capacity_) : 0);
    TC_ASSIGN_OR_RETURN(reservation_, env_.registry->Reserve(name_, reserve));
    if (dtype_ == core::DataType::kString) {
      strings_.reserve(static_cast<size_t>(elements_));
    } else {
      TC_ASSIGN_OR_RETURN(tensor_,
                          core::Tensor::Allocate(layout_.stored_dtype, layout_.stored_shape));
      total_bytes_ = layout_.sent_bytes;
      if (layout_.encodes()) {
        encoder_.emplace(name_, layout_, tensor_->mutable_bytes().data());
      }
      if (keyed_) TC_RETURN_IF_ERROR(LayOutKeyed());
    }
    return Append();
  }

  // A keyed table's rows past the ones sent: free slots and the zero row (zeros, which every
  // storage reads as 0.0), and the default row (core/keyed_rows.h).
  absl::Status LayOutKeyed() {
    const int64_t rows = shape_[0];
    const size_t row_bytes = static_cast<size_t>(layout_.stored_bytes / layout_.stored_shape[0]);
    uint8_t* data = tensor_->mutable_bytes().data();
    std::memset(data + rows * row_bytes, 0,
                static_cast<size_t>(layout_.stored_shape[0] - rows) * row_bytes);
    keys_.reserve(static_cast<size_t>(rows));
    if (!keyed_->has_default_row()) return absl::OkStatus();
    TC_ASSIGN_OR_RETURN(const core::TensorView row,
                        proto::ViewTensor(keyed_->default_row(), "default_row"));
    core::MutableTensorView stored;
    stored.dtype = layout_.stored_dtype;
    stored.shape = layout_.stored_shape;
    stored.data = tensor_->mutable_bytes();
    return core::WriteDefaultRow(name_, layout_.storage, capacity_, row, stored);
  }

  // A chunk: `data` at `offset` bytes, or `strings` from element `offset`, in order.
  absl::Status Append() {
    v1::PutTensorRequest& message_ = message<v1::PutTensorRequest>();
    // Its own flag, not first_: Describe clears first_ before it passes the first message's
    // chunk here, and that message alone may carry the description.
    if (!first_message_ && HasDescription(message_)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "tensor '", name_,
          "': only the first PutTensor message may set name, dtype, shape, device, replace, "
          "storage, shard, keyed or tier"));
    }
    first_message_ = false;
    TC_RETURN_IF_ERROR(AppendKeys(message_.keys()));
    if (dtype_ == core::DataType::kString) {
      if (!message_.data().empty()) {
        return absl::InvalidArgumentError(absl::StrCat(
            "tensor '", name_, "' is DT_STRING: send its elements in strings, not data"));
      }
      if (message_.offset() != static_cast<int64_t>(strings_.size())) {
        return absl::InvalidArgumentError(
            absl::StrCat("tensor '", name_, "': chunk at element offset ", message_.offset(),
                         ", expected ", strings_.size(), " (chunks come in order)"));
      }
      if (message_.strings_size() > elements_ - static_cast<int64_t>(strings_.size())) {
        return absl::InvalidArgumentError(
            absl::StrCat("tensor '", name_, "': ", strings_.size() + message_.strings_size(),
                         " strings sent; its shape has ", elements_));
      }
      // The payload is reserved before the strings are kept.
      int64_t payload = 0;
      for (const std::string& s : message_.strings()) payload += static_cast<int64_t>(s.size());
      if (payload > 0) {
        TC_ASSIGN_OR_RETURN(core::TensorRegistry::Reservation more,
                            env_.registry->Reserve(name_, payload));
        reservation_.Absorb(std::move(more));
      }
      for (std::string& s : *message_.mutable_strings()) strings_.push_back(std::move(s));
      return absl::OkStatus();
    }
    if (message_.strings_size() > 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("tensor '", name_, "' is not DT_STRING: send its bytes in data"));
    }
    if (message_.offset() != received_) {
      return absl::InvalidArgumentError(absl::StrCat("tensor '", name_, "': chunk at offset ",
                                                     message_.offset(), ", expected ", received_,
                                                     " (chunks come in order)"));
    }
    const int64_t n = static_cast<int64_t>(message_.data().size());
    // Compared as a difference, which cannot overflow (received_ <= total_bytes_).
    if (n > total_bytes_ - received_) {
      return absl::InvalidArgumentError(absl::StrCat("tensor '", name_, "': ", received_ + n,
                                                     " data bytes sent; its dtype and shape make ",
                                                     total_bytes_));
    }
    if (disk_) {
      TC_RETURN_IF_ERROR(disk_->Append(absl::MakeConstSpan(
          reinterpret_cast<const uint8_t*>(message_.data().data()), static_cast<size_t>(n))));
    } else if (encoder_) {
      TC_RETURN_IF_ERROR(encoder_->Append(absl::MakeConstSpan(
          reinterpret_cast<const uint8_t*>(message_.data().data()), static_cast<size_t>(n))));
    } else if (n > 0) {
      std::memcpy(tensor_->mutable_bytes().data() + received_, message_.data().data(), n);
    }
    received_ += n;
    return absl::OkStatus();
  }

  // A keyed table's next keys, whole int64s, no more than its rows.
  absl::Status AppendKeys(const std::string& bytes) {
    if (bytes.empty()) return absl::OkStatus();
    if (!keyed_) {
      return absl::InvalidArgumentError(
          absl::StrCat("tensor '", name_,
                       "' is not keyed (set keyed in the first message): keys are for keyed "
                       "tables"));
    }
    if (bytes.size() % sizeof(int64_t) != 0) {
      return absl::InvalidArgumentError(absl::StrCat("tensor '", name_, "': a message carries ",
                                                     bytes.size(),
                                                     " bytes of keys; keys are whole int64s"));
    }
    const int64_t n = static_cast<int64_t>(bytes.size() / sizeof(int64_t));
    const int64_t have = static_cast<int64_t>(keys_.size());
    if (n > shape_[0] - have) {
      return absl::InvalidArgumentError(absl::StrCat("tensor '", name_, "': ", have + n,
                                                     " keys sent; it has ", shape_[0], " rows"));
    }
    keys_.resize(static_cast<size_t>(have + n));
    std::memcpy(keys_.data() + have, bytes.data(), bytes.size());
    return absl::OkStatus();
  }

  // The client half-closed: check the count, place the tensor, publish it.
  absl::Status Publish() {
    if (first_) {
      return absl::InvalidArgumentError(
          "PutTensor carried no message; the first one names and describes the tensor");
    }
    if (dtype_ == core::DataType::kString) {
      if (static_cast<int64_t>(strings_.size()) != elements_) {
        return absl::InvalidArgumentError(
            absl::StrCat("tensor '", name_, "': the upload ended after ", strings_.size(), " of ",
                         elements_, " strings; nothing was stored"));
      }
      TC_ASSIGN_OR_RETURN(tensor_, core::Tensor::FromStrings(shape_, std::move(strings_)));
    } else if (received_ != total_bytes_) {
      return absl::InvalidArgumentError(
          absl::StrCat("tensor '", name_, "': the upload ended after ", received_, " of ",
                       total_bytes_, " bytes; nothing was stored"));
    }
    std::shared_ptr<core::KeyedRows> keyed;
    if (keyed_) {
      if (static_cast<int64_t>(keys_.size()) != shape_[0]) {
        return absl::InvalidArgumentError(
            absl::StrCat("tensor '", name_, "': the upload ended after ", keys_.size(), " of ",
                         shape_[0], " keys; nothing was stored"));
      }
      if (shard_.has_value()) TC_RETURN_IF_ERROR(core::CheckKeysOfShard(name_, keys_, *shard_));
      TC_ASSIGN_OR_RETURN(keyed,
                          core::KeyedRows::Build(name_, keys_, capacity_,
                                                 static_cast<core::MissingKeys>(keyed_->missing()),
                                                 keyed_->has_default_row(), env_.pool));
      keys_ = std::vector<int64_t>();
    }
    std::shared_ptr<core::DiskRows> disk;
    if (disk_) {
      TC_ASSIGN_OR_RETURN(disk, disk_->Finish(&reservation_));
    }
    // Placed before Put: a device that refuses the tensor leaves nothing published.
    core::DeviceCopy copy;
    if (env_.place && disk == nullptr) {
      TC_ASSIGN_OR_RETURN(copy, env_.place(device_, *tensor_));
    }
    TC_ASSIGN_OR_RETURN(const std::shared_ptr<const core::ResidentTensor> entry,
                        env_.registry->Put(name_, *std::move(tensor_), std::move(copy), replace_,
                                           std::move(reservation_), layout_.storage, shard_,
                                           std::move(keyed), std::move(disk)));
    v1::PutTensorResponse response;
    ToInfo(*entry, response.mutable_tensor());
    bool own_buffer = false;
    grpc::Status serialized =
        grpc::SerializationTraits<v1::PutTensorResponse>::Serialize(response, &reply_, &own_buffer);
    if (!serialized.ok()) return absl::InternalError(serialized.error_message());
    return absl::OkStatus();
  }

  // Whatever was not published goes now, not when gRPC gets to OnDone: the half-built tensor
  // and its reservation of max_resident_bytes.
  void Release() override {
    disk_.reset();
    encoder_.reset();
    tensor_.reset();
    strings_.clear();
    keys_ = std::vector<int64_t>();
    reservation_ = core::TensorRegistry::Reservation();
  }

  const ResidentEnv& env_;
  grpc::ByteBuffer& reply_;
  bool first_ = true;          // no message has arrived yet
  bool first_message_ = true;  // Append has not yet seen a message
  std::string name_;
  core::DataType dtype_ = core::DataType::kUnspecified;
  core::Shape shape_;
  std::string device_;
  bool replace_ = false;
  int64_t elements_ = 0;
  core::TableLayout layout_;              // how it is stored
  std::optional<core::ShardSpec> shard_;  // which rows of a table it holds
  int64_t total_bytes_ = 0;               // fixed-size dtypes: the bytes sent
  int64_t received_ = 0;
  std::optional<core::Tensor> tensor_;
  std::optional<core::TableEncoder> encoder_;  // compact kinds the server converts
  std::unique_ptr<DiskUpload> disk_;           // tier DISK: the rows go to a file
  std::vector<std::string> strings_;
  std::optional<v1::KeyedTable> keyed_;  // a keyed table's description
  int64_t capacity_ = 0;                 // its slots
  std::vector<int64_t> keys_;            // its keys so far
  core::TensorRegistry::Reservation reservation_;
};

}  // namespace

absl::Status KeepsTables(const ResidentEnv& env) {
  if (env.registry == nullptr) {
    return absl::UnimplementedError("this server keeps no resident tensors");
  }
  return absl::OkStatus();
}

grpc::ServerReadReactor<grpc::ByteBuffer>* StartPutTensor(const ResidentEnv* env,
                                                          grpc::CallbackServerContext* context,
                                                          grpc::ByteBuffer* reply) {
  auto* call = new PutCall(*env, context, reply);
  call->Begin();
  return call;
}

}  // namespace tensorcompute::server
