// File: server/native/put_tensor_call.h
//
// PutTensor (a client-streaming upload) over core::TensorRegistry. The first message names and
// describes the tensor (core::ValidateResidentDescription checks it, core::PlanTableLayout its
// storage kind) and may carry the first chunk; later messages carry chunks, in order: `data` at
// byte `offset`, or `strings` from element `offset`.
//
// An upload reserves its bytes against max_resident_bytes from the description (for strings:
// the per-element overhead first, then each chunk's payload as it arrives) before allocating
// anything; it writes the chunks straight into the tensor it will publish (a compact table,
// `storage` FLOAT16 or INT8_ROWWISE, converted row by row as the chunks arrive by
// core::TableEncoder, so the bytes held and reserved are the stored ones), and publishes it
// (TensorRegistry::Put, atomically) only when the client half-closes and the count checks out.
// A table with `tier` DISK is written to a file instead, its cache reserved in memory
// (server/native/disk_upload.h). Any failure or cancellation drops the half-built tensor and its
// reservation, so an aborted upload leaves nothing. Uploads take no lock that gathers take: the
// registry's mutex is held only for the final swap. Admission: CallGate::Admit with an admin token
// when configured.
//
// Reading, admission (the admin token; a slot in the uploads' own share, UploadBudget,
// max_upload_bytes), the decoded cost of each message held before it is parsed, and the idle
// timeout ("the upload of tensor 'T' sent no message for 2m (--upload_idle_timeout_s); nothing
// was stored") are upload_stream_call.h's. The uploads' share is not the compute calls'
// max_inflight_bytes: charged to that budget, uploads would compete with gathers for receive
// credits, which fill it under load (a busy server would refuse every upload), and many slow
// uploads would hold memory the gathers count on.
//
// Thread-safety: gRPC calls the reactor from its threads, one at a time.

#ifndef TENSORCOMPUTE_SERVER_PUT_TENSOR_CALL_H_
#define TENSORCOMPUTE_SERVER_PUT_TENSOR_CALL_H_

#include <functional>
#include <string>

#include "absl/status/statusor.h"
#include "grpcpp/server_context.h"
#include "grpcpp/support/byte_buffer.h"
#include "grpcpp/support/server_callback.h"
#include "tensorcompute/v1/tensorcompute.pb.h"

#include "core/live_rows.h"
#include "core/tensor.h"
#include "core/tensor_registry.h"
#include "core/thread_pool.h"
#include "server/compute/shard_updater.h"
#include "server/native/disk_upload.h"
#include "server/native/upload_stream_call.h"

namespace tensorcompute::server {

// Where an uploaded tensor goes for the device a PutTensor names ("" for the server's default):
// its device copy (DeviceCopy{} for the CPU), or INVALID_ARGUMENT for a device this server does
// not have.
using TensorPlacer = std::function<absl::StatusOr<core::DeviceCopy>(const std::string& device,
                                                                    const core::Tensor& tensor)>;

// What the calls that change resident tables (PutTensor, UpdateRows) work with.
struct ResidentEnv : UploadStreamEnv {
  core::TensorRegistry* registry = nullptr;  // not owned; null: the calls are UNIMPLEMENTED
  TensorPlacer place;                        // empty: every tensor stays on the CPU
  int64_t max_rank = 32;                     // highest rank accepted (ServerOptions::max_rank)
  // Writes updated rows into a table's device copy (core::ApplyRowUpdate); empty: no table
  // has one.
  core::DeviceRowWriter write_device;
  // Forwards UpdateRows on a sharded table to every replica of its shards (--shard_peers); null:
  // such an update applies this server's rows only. Not owned.
  ShardUpdater* shards = nullptr;
  // Builds the key indexes of keyed tables with every core; null: on the call's thread. Not
  // owned.
  core::ThreadPool* pool = nullptr;
  // Where tables put with tier DISK go (server/native/disk_upload.h).
  DiskTier disk;
};

// OK when the server keeps resident tables (env.registry), else UNIMPLEMENTED "this server
// keeps no resident tensors": what the calls that change them answer first.
absl::Status KeepsTables(const ResidentEnv& env);

// A new call for a PutTensor RPC, begun; it deletes itself when done, having written its
// serialized PutTensorResponse into `reply` when it is OK. What `env` points to must outlive
// it.
grpc::ServerReadReactor<grpc::ByteBuffer>* StartPutTensor(const ResidentEnv* env,
                                                          grpc::CallbackServerContext* context,
                                                          grpc::ByteBuffer* reply);

}  // namespace tensorcompute::server

#endif  // TENSORCOMPUTE_SERVER_PUT_TENSOR_CALL_H_
