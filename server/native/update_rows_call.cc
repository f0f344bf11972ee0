#include "server/native/update_rows_call.h"

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "grpcpp/impl/codegen/proto_utils.h"
#include "tensorcompute/v1/tensorcompute.pb.h"

#include "core/key_split.h"
#include "core/live_rows.h"
#include "core/status_macros.h"
#include "core/table_growth.h"
#include "core/tensor_registry.h"
#include "proto/tensor_codec.h"
#include "server/compute/shard_router.h"
#include "server/compute/shard_updater.h"
#include "server/native/upload_stream_call.h"

namespace tensorcompute::server {
namespace {

class UpdateCall final : public UploadStreamCall {
 public:
  UpdateCall(const ResidentEnv& env, grpc::CallbackServerContext* context, grpc::ByteBuffer* reply)
      : UploadStreamCall(env, Rpc::kUpdateRows, context, v1::UpdateRowsRequest::default_instance()),
        env_(env),
        reply_(*reply) {
    growth_.registry = env.registry;
    growth_.place = env.place;
    growth_.pool = env.pool;
  }

 private:
  absl::Status Ready() override { return KeepsTables(env_); }

  // A sharded table's messages, on a server with --shard_peers, go to every replica of every
  // shard (server/compute/shard_updater.h) unless they come from one (a sub-call).
  void StartTake(bool first, Then done) override {
    if (absl::Status named = Name(first); !named.ok()) return Refuse(named, std::move(done));
    if (first && table_->shard.has_value() && env_.shards != nullptr &&
        context().client_metadata().count(kHopMetadata) == 0) {
      const auto deadline = context().deadline();
      absl::StatusOr<std::shared_ptr<ShardUpdate>> update =
          env_.shards->Begin(*table_, deadline == std::chrono::system_clock::time_point::max()
                                          ? absl::InfiniteFuture()
                                          : absl::FromChrono(deadline));
      if (!update.ok()) return std::move(done)(update.status());
      absl::MutexLock lock(&mu_);
      update_ = *std::move(update);
    }
    if (update_ == nullptr) return std::move(done)(Apply());
    const v1::UpdateRowsRequest& m = message<v1::UpdateRowsRequest>();
    if (table_->shard->by_key) return ForwardByKeys(m, std::move(done));
    if (m.has_keys() || m.has_delete_keys()) {  // a sharded table has no keys
      return Refuse(absl::InvalidArgumentError(
                        absl::StrCat("table '", name_, "' has no keys; update it by indices")),
                    std::move(done));
    }
    absl::StatusOr<core::TensorView> indices = proto::ViewTensor(m.indices(), "indices");
    if (!indices.ok()) return Refuse(indices.status(), std::move(done));
    absl::StatusOr<core::TensorView> values = proto::ViewTensor(m.values(), "values");
    if (!values.ok()) return Refuse(values.status(), std::move(done));
    // Checked against the whole table before anything is sent: a bad message goes nowhere.
    absl::StatusOr<core::ShardedRowUpdate> split = core::SplitRowUpdate(*table_, *indices, *values);
    if (!split.ok()) return Refuse(split.status(), std::move(done));
    const int64_t rows = indices->shape[0];
    update_->Send(*split, *values, [this, rows, done = std::move(done)](absl::Status sent) mutable {
      if (sent.ok()) {
        ++applied_messages_;
        applied_rows_ += rows;
      }
      std::move(done)(sent);
    });
  }

  // A message on a keyed table sharded by key: its keys (with their rows) and delete_keys to
  // their shards, every replica getting a message.
  void ForwardByKeys(const v1::UpdateRowsRequest& m, Then done) {
    // Checked whole against this shard's table (every shard has the table's row shape) before
    // anything is sent: a bad message goes nowhere.
    absl::StatusOr<core::RowUpdate> update = PrepareUnrouted(m);
    if (!update.ok()) return Refuse(update.status(), std::move(done));
    core::TensorView values;  // unset: a message of deletes only
    if (m.has_values()) {
      absl::StatusOr<core::TensorView> view = proto::ViewTensor(m.values(), "values");
      if (!view.ok()) return Refuse(view.status(), std::move(done));
      values = *view;
    }
    const core::KeyUpdateSplit split =
        core::SplitKeyUpdate(update->keys, update->delete_keys, table_->shard->count);
    const int64_t rows = static_cast<int64_t>(update->keys.size());
    update_->SendKeys(split, update->keys, values,
                      [this, rows, done = std::move(done)](absl::Status sent) mutable {
                        if (sent.ok()) {
                          ++applied_messages_;
                          applied_rows_ += rows;
                        }
                        std::move(done)(sent);
                      });
  }

  // A message refused here ends the call with `error`, but the messages before it stay applied
  // on every replica, as on an unsharded table: the replicas' streams are half-closed and
  // waited for (not cancelled, which could drop a message a replica has not read yet).
  void Refuse(absl::Status error, Then done) {
    if (update_ == nullptr) return std::move(done)(std::move(error));
    update_->Finish([error = std::move(error),
                     done = std::move(done)](absl::StatusOr<int64_t> /*sequence*/) mutable {
      std::move(done)(std::move(error));
    });
  }

  void StartComplete(int64_t messages, Then done) override {
    if (messages == 0 || update_ == nullptr) return std::move(done)(Complete(messages));
    update_->Finish(
        [this, messages, done = std::move(done)](absl::StatusOr<int64_t> sequence) mutable {
          if (!sequence.ok()) return std::move(done)(sequence.status());
          sequence_ = *sequence;
          std::move(done)(Complete(messages));
        });
  }

  void OnCancel() override {
    std::shared_ptr<ShardUpdate> update;
    {
      absl::MutexLock lock(&mu_);
      update = update_;
    }
    if (update != nullptr) update->Cancel();
  }

  // The first message names the table, which later ones may repeat.
  absl::Status Name(bool first) {
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
    // A keyed table that grew is held as its latest: the old one's memory goes with its
    // lookups, even while a long stream forwards or applies messages.
    table_ = core::LatestGrowth(std::move(table_));
    return absl::OkStatus();
  }

  absl::Status Take(bool first) override {
    TC_RETURN_IF_ERROR(Name(first));
    return Apply();
  }

  // Applies the message to this server's rows.
  absl::Status Apply() {
    const absl::Time arrived = absl::Now();
    const v1::UpdateRowsRequest& m = message<v1::UpdateRowsRequest>();
    TC_ASSIGN_OR_RETURN(const core::RowUpdate update, Prepare(m));
    TC_ASSIGN_OR_RETURN(sequence_,
                        core::ApplyRowUpdate(*table_, update, env_.write_device, &growth_));
    table_ = core::LatestGrowth(std::move(table_));
    const int64_t rows =
        static_cast<int64_t>(update.by_keys ? update.keys.size() : update.rows.size());
    ++applied_messages_;
    applied_rows_ += rows;
    if (table_->stats != nullptr) table_->stats->RecordUpdate(rows, absl::Now() - arrived);
    return absl::OkStatus();
  }

  // The message checked and converted, for this server's rows: on a keyed table sharded by key,
  // only keys this shard holds (this server does not forward the message: a forwarded one, or
  // a server without --shard_peers).
  absl::StatusOr<core::RowUpdate> Prepare(const v1::UpdateRowsRequest& m) {
    TC_ASSIGN_OR_RETURN(core::RowUpdate update, PrepareUnrouted(m));
    if (!table_->shard.has_value() || !table_->shard->by_key) return update;
    const core::ShardSpec& spec = *table_->shard;
    const bool forwarded = context().client_metadata().count(kHopMetadata) > 0;
    const std::string why =
        forwarded ? "this message was forwarded by a server whose --shard_peers do not reach "
                    "that shard"
                  : "this server has no --shard_peers to forward it to";
    auto check = [&](const char* what, const std::vector<int64_t>& keys) {
      const int64_t i = core::ForeignKey(keys, spec);
      if (i < 0) return absl::OkStatus();
      return core::ForeignKeyError(name_, spec, what, {static_cast<int64_t>(keys.size())}, i,
                                   keys[static_cast<size_t>(i)], why);
    };
    TC_RETURN_IF_ERROR(check("keys", update.keys));
    TC_RETURN_IF_ERROR(check("delete_keys", update.delete_keys));
    return update;
  }

  // The message checked and converted: by indices, or by keys (keyed tables).
  absl::StatusOr<core::RowUpdate> PrepareUnrouted(const v1::UpdateRowsRequest& m) {
    if (!m.has_keys() && !m.has_delete_keys()) {
      if (table_->shard.has_value() && table_->shard->by_key) {
        return absl::InvalidArgumentError(
            absl::StrCat("table '", name_, "' is sharded by key (", table_->shard->count,
                         " shards): update it by keys, not by indices"));
      }
      TC_ASSIGN_OR_RETURN(const core::TensorView indices,
                          proto::ViewTensor(m.indices(), "indices"));
      TC_ASSIGN_OR_RETURN(const core::TensorView values, proto::ViewTensor(m.values(), "values"));
      return core::PrepareRowUpdate(*table_, indices, values);
    }
    if (m.has_indices()) {
      return absl::InvalidArgumentError("set either indices or keys (and delete_keys), not both");
    }
    // Unset fields are empty views.
    core::TensorView keys, values, delete_keys;
    if (m.has_keys()) {
      TC_ASSIGN_OR_RETURN(keys, proto::ViewTensor(m.keys(), "keys"));
    }
    if (m.has_values()) {
      TC_ASSIGN_OR_RETURN(values, proto::ViewTensor(m.values(), "values"));
    }
    if (m.has_delete_keys()) {
      TC_ASSIGN_OR_RETURN(delete_keys, proto::ViewTensor(m.delete_keys(), "delete_keys"));
    }
    return core::PrepareKeyedRowUpdate(*table_, keys, values, delete_keys);
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

  // Streams to the replicas still open (the call failed before their end) are cancelled.
  void Release() override {
    table_.reset();
    std::shared_ptr<ShardUpdate> update;
    {
      absl::MutexLock lock(&mu_);
      update = std::move(update_);
    }
    if (update != nullptr) update->Cancel();
  }

  std::string Subject() const override {
    return name_.empty() ? "the update" : absl::StrCat("the update of tensor '", name_, "'");
  }
  std::string Ending() const override {
    return absl::StrCat(applied_messages_, " messages (", applied_rows_,
                        " rows) were applied before");
  }

  const ResidentEnv& env_;
  grpc::ByteBuffer& reply_;
  core::TableGrowth growth_;  // keyed tables grow within max_resident_bytes
  std::string name_;
  std::shared_ptr<const core::ResidentTensor> table_;
  int64_t sequence_ = 0;
  int64_t applied_messages_ = 0;
  int64_t applied_rows_ = 0;
  // Set by the first message when it is forwarded; read by OnCancel from another thread.
  absl::Mutex mu_;
  std::shared_ptr<ShardUpdate> update_;
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
