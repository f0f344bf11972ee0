#include "client/put_upload.h"

#include <memory>
#include <utility>

#include "absl/synchronization/mutex.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/support/byte_buffer.h"
#include "grpcpp/support/client_callback.h"
#include "grpcpp/support/proto_buffer_reader.h"

namespace tensorcompute::client {
namespace {

constexpr char kPutTensorMethod[] = "/tensorcompute.v1.TensorCompute/PutTensor";

// The call's side of gRPC's callbacks: what finished, for the uploading thread to wait on.
// (A client-streaming method is called as a bidirectional stream here: on the wire they are
// the same, and the generic stub has no client-streaming reactor.)
class PutReactor final : public grpc::ClientBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer> {
 public:
  void OnWriteDone(bool ok) override {
    absl::MutexLock lock(&mu_);
    writing_ = false;
    write_ok_ = ok;
  }
  void OnReadDone(bool ok) override {
    absl::MutexLock lock(&mu_);
    answered_ = ok;
  }
  void OnDone(const grpc::Status& status) override {
    // The uploading thread may drop its reference as soon as done_ is set: the last reference
    // goes with this call's end, never while mu_ is still being released.
    std::shared_ptr<PutReactor> keep = std::move(self_);
    absl::MutexLock lock(&mu_);
    status_ = status;
    done_ = true;
  }

  // Keeps the reactor alive until OnDone has returned. Call before StartCall.
  void Hold(std::shared_ptr<PutReactor> self) { self_ = std::move(self); }

  // Starts writing `*message`, which must live until WaitForWrite returns.
  void Write(const grpc::ByteBuffer* message) {
    {
      absl::MutexLock lock(&mu_);
      writing_ = true;
    }
    StartWrite(message);
  }
  // Waits for the write in flight; false when it failed (the call is over).
  bool WaitForWrite() {
    absl::MutexLock lock(&mu_);
    mu_.Await(absl::Condition(
        +[](PutReactor* r) ABSL_EXCLUSIVE_LOCKS_REQUIRED(r->mu_) { return !r->writing_; }, this));
    return write_ok_;
  }
  // Waits for the end of the call: its status, and whether an answer arrived.
  std::pair<grpc::Status, bool> WaitForDone() {
    absl::MutexLock lock(&mu_);
    mu_.Await(absl::Condition(&done_));
    return {status_, answered_};
  }

 private:
  absl::Mutex mu_;
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool write_ok_ ABSL_GUARDED_BY(mu_) = true;
  bool answered_ ABSL_GUARDED_BY(mu_) = false;
  bool done_ ABSL_GUARDED_BY(mu_) = false;
  grpc::Status status_ ABSL_GUARDED_BY(mu_);
  std::shared_ptr<PutReactor> self_;  // set until OnDone
};

}  // namespace

grpc::Status UploadPut(const std::shared_ptr<grpc::Channel>& channel, grpc::ClientContext* context,
                       PutChunker* chunker,
                       const std::function<void(int64_t sent, int64_t total)>& on_progress,
                       v1::PutTensorResponse* response) {
  grpc::GenericStub stub(channel);
  auto reactor_ref = std::make_shared<PutReactor>();
  PutReactor& reactor = *reactor_ref;
  reactor.Hold(reactor_ref);
  grpc::ByteBuffer answer;  // like `buffers` below, used by gRPC only until OnDone
  stub.PrepareBidiStreamingCall(context, kPutTensorMethod, grpc::StubOptions(), &reactor);
  // Writes are started from this thread, not from reactions: the hold keeps the call from
  // finishing (OnDone) until the last of them has been started and waited for, so that each
  // write completes, failed if the call is over, instead of being started on a finished call.
  reactor.AddHold();
  // The answer's read is posted before StartCall, which gRPC allows (it is held until the call
  // starts), so that it is pending even if the server answers mid-upload.
  reactor.StartRead(&answer);
  reactor.StartCall();
  // Two buffers: one being sent while the next is read into the other.
  grpc::ByteBuffer buffers[2];
  int current = 0;
  bool more = chunker->NextBuffer(&buffers[current]);
  bool sent_all = true;
  // gRPC allows one write in flight per stream: each write is waited for before the next one,
  // and the read into the other buffer happens in between.
  while (more) {
    reactor.Write(&buffers[current]);
    const int64_t through = chunker->sent();  // before the next chunk is read
    more = chunker->NextBuffer(&buffers[1 - current]);
    if (!reactor.WaitForWrite()) {
      sent_all = false;  // the server answered early, or the connection broke
      break;
    }
    if (on_progress) on_progress(through, chunker->total());
    current = 1 - current;
  }
  if (!chunker->status().ok()) {
    context->TryCancel();  // an incomplete tensor is never finished as an upload
  } else if (sent_all) {
    reactor.StartWritesDone();  // the half-close that tells the server the tensor is complete
  }
  reactor.RemoveHold();
  const auto [status, answered] = reactor.WaitForDone();
  if (!status.ok()) return status;
  if (!answered) return grpc::Status(grpc::StatusCode::INTERNAL, "PutTensor: no answer");
  grpc::ProtoBufferReader reader(&answer);
  if (!response->ParseFromZeroCopyStream(&reader)) {
    return grpc::Status(grpc::StatusCode::INTERNAL, "PutTensor: an answer that does not parse");
  }
  return status;
}

}  // namespace tensorcompute::client
