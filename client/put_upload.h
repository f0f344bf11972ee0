// File: client/put_upload.h
//
// One PutTensor upload (tensorcompute.proto) on gRPC's callback API, its messages written as
// byte buffers (PutChunker::NextBuffer): each chunk's bytes go from the source to the socket
// with no copy beyond its read, and the next chunk is read while the previous one is being
// sent. Client::PutTensor's transport; the typed stub's messages would be copied once more
// when serialized, and read and sent in turn.
//
// Thread-safety: UploadPut blocks its caller until the call is over; it may run on several
// threads at once (one chunker and one context each).

#ifndef TENSORCOMPUTE_CLIENT_PUT_UPLOAD_H_
#define TENSORCOMPUTE_CLIENT_PUT_UPLOAD_H_

#include <cstdint>
#include <functional>
#include <memory>

#include "grpcpp/channel.h"
#include "grpcpp/client_context.h"
#include "grpcpp/support/status.h"
#include "tensorcompute/v1/tensorcompute.pb.h"

#include "client/put_chunker.h"

namespace tensorcompute::client {

// Sends every message of `chunker` on `channel` under `context` (its deadline, metadata and
// compression), then half-closes and waits for the answer, which fills `*response`. After each
// message is sent, calls on_progress(chunker->sent(), chunker->total()) when set. Returns the
// call's status; when the chunker's source fails (chunker->status()), the call is cancelled
// (CANCELLED) so that the server stores nothing. An answer that does not parse is INTERNAL.
grpc::Status UploadPut(const std::shared_ptr<grpc::Channel>& channel, grpc::ClientContext* context,
                       PutChunker* chunker,
                       const std::function<void(int64_t sent, int64_t total)>& on_progress,
                       v1::PutTensorResponse* response);

}  // namespace tensorcompute::client

#endif  // TENSORCOMPUTE_CLIENT_PUT_UPLOAD_H_
