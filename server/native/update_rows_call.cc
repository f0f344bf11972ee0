#include "server/native/update_rows_call.h"

#include <cstdint>
#include <memory>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "grpcpp/impl/codegen/proto_utils.h"
#include "tensorcompute/v1/tensorcompute.pb.h"

#include "core/live_rows.h"
#include "core/status_macros.h"
#include "core/tensor_registry.h"
#include "proto/tensor_codec.h"
#include "server/native/upload_stream_call.h"

namespace tensorcompute::server {
namespace {

class UpdateCall final : public UploadStreamCall {
 public:
  UpdateCall(const ResidentEnv& env, grpc::CallbackServerContext* context, grpc::ByteBuffer* reply)
      : UploadStreamCall(env, Rpc::kUpdateRows, context, v1::UpdateRowsRequest::default_instance()),
        env_(env),
        reply_(*reply) {}

 private:
  absl::Status Ready() override { return KeepsTables(env_); }

  absl::Status Take(bool first) override {
    const absl::Time arrived = absl::Now();
    const v1::UpdateRowsRequest& m = message<v1::UpdateRowsRequest>();
    if (first) {
      if (m.name().empty()) {
        return absl::InvalidArgumentError(
            "the first UpdateRows message names the table (name is empty)");
      }
      name_ = m.name();
      table_ = env_.registry->Find(name_);
      if (table_ == nullptr) {
        return absl::NotFoundError(absl::StrCat("no tensor named '", name_, "'"));
      }
    } else if (!m.name().empty() && m.name() != name_) {
      return absl::InvalidArgumentError(
          absl::StrCat("UpdateRows message ", applied_messages_ + 1, " names tensor '", m.name(),
                       "'; the stream updates '", name_, "' (later messages leave name empty)"));
    }
    TC_ASSIGN_OR_RETURN(const core::TensorView indices, proto::ViewTensor(m.indices(), "indices"));
    TC_ASSIGN_OR_RETURN(const core::TensorView values, proto::ViewTensor(m.values(), "values"));
    TC_ASSIGN_OR_RETURN(const core::RowUpdate update,
                        core::PrepareRowUpdate(*table_, indices, values));
    TC_ASSIGN_OR_RETURN(sequence_, core::ApplyRowUpdate(*table_, update, env_.write_device));
    ++applied_messages_;
    applied_rows_ += static_cast<int64_t>(update.rows.size());
    if (table_->stats != nullptr) {
      table_->stats->RecordUpdate(static_cast<int64_t>(update.rows.size()), absl::Now() - arrived);
    }
    return absl::OkStatus();
  }

  absl::Status Complete(int64_t messages) override {
    if (messages == 0) {
      return absl::InvalidArgumentError(
          "UpdateRows carried no message; the first one names the table");
    }
    v1::UpdateRowsResponse response;
    response.set_sequence(sequence_);
    response.set_rows(applied_rows_);
    response.set_messages(applied_messages_);
    bool own_buffer = false;
    grpc::Status serialized = grpc::SerializationTraits<v1::UpdateRowsResponse>::Serialize(
        response, &reply_, &own_buffer);
    if (!serialized.ok()) return absl::InternalError(serialized.error_message());
    return absl::OkStatus();
  }

  void Release() override { table_.reset(); }

  std::string Subject() const override {
    return name_.empty() ? "the update" : absl::StrCat("the update of tensor '", name_, "'");
  }
  std::string Ending() const override {
    return absl::StrCat(applied_messages_, " messages (", applied_rows_,
                        " rows) were applied before");
  }

  const ResidentEnv& env_;
  grpc::ByteBuffer& reply_;
  std::string name_;
  std::shared_ptr<const core::ResidentTensor> table_;
  int64_t sequence_ = 0;
  int64_t applied_messages_ = 0;
  int64_t applied_rows_ = 0;
};

}  // namespace

grpc::ServerReadReactor<grpc::ByteBuffer>* StartUpdateRows(const ResidentEnv* env,
                                                           grpc::CallbackServerContext* context,
                                                           grpc::ByteBuffer* reply) {
  auto* call = new UpdateCall(*env, context, reply);
  call->Begin();
  return call;
}

}  // namespace tensorcompute::server
