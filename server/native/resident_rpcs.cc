#include "server/native/resident_rpcs.h"

#include <memory>

#include "absl/status/statusor.h"
#include "absl/time/clock.h"
#include "google/protobuf/util/time_util.h"

#include "proto/grpc_status.h"
#include "proto/tensor_codec.h"

namespace tensorcompute::server {
namespace {

// These calls are answered before their handler returns: gRPC's default reactor, finished at once.
grpc::ServerUnaryReactor* Finish(grpc::CallbackServerContext* context, const absl::Status& status) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  reactor->Finish(proto::ToGrpcStatus(status));
  return reactor;
}

}  // namespace

void ToInfo(const core::ResidentTensor& entry, v1::TensorInfo* info) {
  info->set_name(entry.name);
  info->set_dtype(proto::ToProtoDataType(entry.logical_dtype()));
  for (int64_t d : entry.logical_shape()) info->add_shape(d);
  // Same numbers on the wire and in core (core/table_storage.h).
  info->set_storage(static_cast<v1::TableStorage>(entry.storage));
  if (entry.shard.has_value()) {
    info->mutable_shard()->set_index(entry.shard->index);
    info->mutable_shard()->set_count(entry.shard->count);
    info->mutable_shard()->set_total_rows(entry.shard->total_rows);
    info->mutable_shard()->set_by_key(entry.shard->by_key);
  }
  info->set_bytes(entry.bytes);
  info->set_device(entry.device);
  info->set_version(entry.version);
  if (entry.live != nullptr) info->set_sequence(entry.live->sequence());
  if (entry.keyed != nullptr) {
    v1::KeyedInfo* keyed = info->mutable_keyed();
    keyed->set_missing(static_cast<v1::MissingKeys>(entry.keyed->missing()));
    keyed->set_has_default_row(entry.keyed->has_default_row());
    keyed->set_capacity(entry.keyed->capacity());
    keyed->set_keys(entry.keyed->size());
  }
  if (entry.disk != nullptr) {
    info->set_tier(v1::DISK);
    v1::DiskInfo* disk = info->mutable_disk();
    disk->set_file(entry.disk->file().path());
    disk->set_file_bytes(entry.disk->rows() * entry.disk->row_bytes());
    disk->set_cache_rows(entry.disk->cache_rows());
    disk->set_cached_rows(entry.disk->cached_rows());
  }
  *info->mutable_created() =
      google::protobuf::util::TimeUtil::NanosecondsToTimestamp(absl::ToUnixNanos(entry.created));
}

grpc::ServerUnaryReactor* DeleteTensor(CallGate* gate, core::TensorRegistry* registry,
                                       grpc::CallbackServerContext* context,
                                       const v1::DeleteTensorRequest& request,
                                       v1::DeleteTensorResponse* response) {
  const absl::Time start = gate->Arrive();
  absl::Status status = gate->Admit(*context, /*needs_admin=*/true);
  if (status.ok() && registry == nullptr) {
    status = absl::UnimplementedError("this server keeps no resident tensors");
  }
  if (status.ok()) {
    absl::StatusOr<std::shared_ptr<const core::ResidentTensor>> removed =
        registry->Delete(request.name());
    if (removed.ok()) {
      ToInfo(**removed, response->mutable_tensor());
    } else {
      status = removed.status();
    }
  }
  gate->Answer(Rpc::kDeleteTensor, start, status);
  return Finish(context, status);
}

grpc::ServerUnaryReactor* ListTensors(CallGate* gate, const core::TensorRegistry* registry,
                                      grpc::CallbackServerContext* context,
                                      v1::ListTensorsResponse* response) {
  const absl::Time start = gate->Arrive();
  absl::Status status = gate->Admit(*context, /*needs_admin=*/false);
  if (status.ok() && registry != nullptr) {
    for (const auto& entry : registry->List()) ToInfo(*entry, response->add_tensors());
  }
  gate->Answer(Rpc::kListTensors, start, status);
  return Finish(context, status);
}

}  // namespace tensorcompute::server
