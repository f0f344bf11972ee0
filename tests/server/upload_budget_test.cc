// The uploads' share of memory (server/admission/upload_budget.h, --max_upload_bytes) and the
// idle bound on an upload (--upload_idle_timeout_s): the share's arithmetic, then through a
// real server: uploads beyond the share are refused UNAVAILABLE before they send anything,
// gathers go on beside uploads that fill it, every ending (done, cancelled, stalled) gives the
// share back, and a stalled upload is answered DEADLINE_EXCEEDED; UpdateRows streams likewise.

#include "server/admission/upload_budget.h"

#include <cstdint>
#include <memory>
#include <string>

#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"

#include "core/tensor_registry.h"
#include "server/server.h"
#include "tests/server/test_server.h"
#include "tests/testing/status_matchers.h"

namespace tensorcompute::server {
namespace {

using ::tensorcompute::server::test_support::MakeStub;
using ::tensorcompute::server::test_support::SendGather;
using ::tensorcompute::server::test_support::SmallGather;
using ::tensorcompute::server::test_support::StartServer;
using ::tensorcompute::server::test_support::Stub;
using ::tensorcompute::server::test_support::TestOptions;
using ::tensorcompute::server::test_support::ToAbsl;
using ::tensorcompute::server::test_support::WaitFor;
using ::tensorcompute::testing::IsOk;
using ::tensorcompute::testing::StatusIs;
using ::testing::AllOf;
using ::testing::HasSubstr;

TEST(UploadBudget, AdmitsSlotsUntilFullThenRefusesUnavailable) {
  UploadBudget uploads(100, 40);
  absl::StatusOr<ByteBudget::Reservation> a = uploads.Admit();
  absl::StatusOr<ByteBudget::Reservation> b = uploads.Admit();
  ASSERT_THAT(a, IsOk());
  ASSERT_THAT(b, IsOk());
  EXPECT_EQ(uploads.used(), 80);
  EXPECT_THAT(uploads.Admit(),
              StatusIs(absl::StatusCode::kUnavailable,
                       AllOf(HasSubstr("server overloaded: 80 of the max_upload_bytes budget of "
                                       "100 bytes are held by uploads in progress, and an upload "
                                       "needs 40 (twice max_message_bytes)"),
                             HasSubstr("retry with backoff"))));
  EXPECT_EQ(uploads.refused(), 1);
  a->Reset();
  EXPECT_THAT(uploads.Admit(), IsOk());  // and given back at once
  EXPECT_EQ(uploads.used(), 40);
}

TEST(UploadBudget, TheSlotIsCappedToTheLimitSoOneUploadIsAlwaysAdmitted) {
  UploadBudget uploads(100, 500);
  EXPECT_EQ(uploads.slot(), 100);
  absl::StatusOr<ByteBudget::Reservation> alone = uploads.Admit();
  ASSERT_THAT(alone, IsOk());
  EXPECT_THAT(uploads.Admit(), StatusIs(absl::StatusCode::kUnavailable));
}

TEST(UploadBudget, AMessageBeyondTheSlotGrowsTheShareIfThereIsRoom) {
  UploadBudget uploads(100, 30);
  absl::StatusOr<ByteBudget::Reservation> a = uploads.Admit();
  absl::StatusOr<ByteBudget::Reservation> b = uploads.Admit();
  ASSERT_THAT(a, IsOk());
  ASSERT_THAT(b, IsOk());
  EXPECT_THAT(uploads.HoldMessage(30, "x", &*a), IsOk());  // within the slot
  EXPECT_EQ(a->bytes(), 30);
  EXPECT_THAT(uploads.HoldMessage(70, "x", &*a), IsOk());  // 40 more: 100 of 100
  EXPECT_EQ(uploads.used(), 100);
  EXPECT_THAT(uploads.HoldMessage(31, "x", &*b),
              StatusIs(absl::StatusCode::kUnavailable,
                       HasSubstr("this PutTensor message needs 31 bytes but 100 of the "
                                 "max_upload_bytes budget of 100 are in use")));
  EXPECT_EQ(b->bytes(), 30);
  EXPECT_EQ(uploads.refused(), 1);
  uploads.ReleaseMessage(&*a);
  EXPECT_EQ(a->bytes(), 30);
  EXPECT_THAT(uploads.HoldMessage(31, "x", &*b), IsOk());
}

TEST(UploadBudget, AMessageBeyondTheWholeShareIsResourceExhaustedEvenAlone) {
  UploadBudget uploads(100, 30);
  absl::StatusOr<ByteBudget::Reservation> alone = uploads.Admit();
  ASSERT_THAT(alone, IsOk());
  EXPECT_THAT(uploads.HoldMessage(101, "1 strings", &*alone),
              StatusIs(absl::StatusCode::kResourceExhausted,
                       HasSubstr("the PutTensor message would take 101 bytes once decoded (1 "
                                 "strings), more than the whole max_upload_bytes budget of 100 "
                                 "bytes (--max_upload_bytes)")));
  EXPECT_EQ(alone->bytes(), 30);
  EXPECT_EQ(uploads.refused(), 0);  // not for want of room: it never fits
  EXPECT_THAT(uploads.HoldMessage(100, "x", &*alone), IsOk());  // alone, up to the whole share
}

constexpr int64_t kMessageBytes = int64_t{1} << 20;

ServerOptions UploadOptions(int slots) {
  ServerOptions options = TestOptions();
  options.max_message_bytes = kMessageBytes;
  options.max_upload_bytes = slots * 2 * kMessageBytes;
  return options;
}

// An upload of a uint8 [n] tensor in progress: the first message (name, shape, `first` bytes)
// is sent by the constructor; Send adds the next `bytes`; Finish half-closes, Wait does not.
class HeldUpload {
 public:
  HeldUpload(Stub& stub, const std::string& name, int64_t n, int64_t first)
      : writer_(stub.PutTensor(&context_, &response_)) {
    v1::PutTensorRequest message;
    message.set_name(name);
    message.set_dtype(v1::DT_UINT8);
    message.add_shape(n);
    message.set_replace(true);
    message.set_data(std::string(first, '\1'));
    sent_ = first;
    // A refused upload may be answered before its first message is written: ignore the result.
    (void)writer_->Write(message);
  }
  bool Send(int64_t bytes) {
    v1::PutTensorRequest message;
    message.set_offset(sent_);
    message.set_data(std::string(bytes, '\2'));
    sent_ += bytes;
    return writer_->Write(message);
  }
  absl::Status Finish() {
    writer_->WritesDone();
    return Wait();
  }
  // The call's status, without half-closing it.
  absl::Status Wait() { return ToAbsl(writer_->Finish()); }
  void Cancel() { context_.TryCancel(); }

 private:
  grpc::ClientContext context_;
  v1::PutTensorResponse response_;
  std::unique_ptr<grpc::ClientWriter<v1::PutTensorRequest>> writer_;
  int64_t sent_ = 0;
};

TEST(UploadBudgetServer, UploadsBeyondTheShareAreRefusedWhileGathersGoOn) {
  std::unique_ptr<Server> server = StartServer(UploadOptions(/*slots=*/2));
  ASSERT_NE(server, nullptr);
  const UploadBudget& uploads = server->upload_budget();
  auto stub = MakeStub(server->port());
  HeldUpload done(*stub, "done", 2000, 1000);
  HeldUpload cancelled(*stub, "cancelled", 2000, 1000);
  ASSERT_TRUE(WaitFor([&] { return uploads.used() == 4 * kMessageBytes; }));

  HeldUpload refused(*stub, "refused", 2000, 2000);
  EXPECT_THAT(refused.Finish(),
              StatusIs(absl::StatusCode::kUnavailable,
                       AllOf(HasSubstr("of the max_upload_bytes budget of 4194304 bytes are held "
                                       "by uploads in progress"),
                             HasSubstr("retry with backoff"))));
  EXPECT_EQ(uploads.refused(), 1);
  // The uploads hold none of the compute calls' budget.
  EXPECT_EQ(server->inflight_budget().used(), 0);
  EXPECT_THAT(SendGather(*stub, SmallGather()), IsOk());

  ASSERT_TRUE(done.Send(1000));
  EXPECT_THAT(done.Finish(), IsOk());
  EXPECT_TRUE(WaitFor([&] { return uploads.used() == 2 * kMessageBytes; }));
  HeldUpload next(*stub, "next", 10, 10);
  EXPECT_THAT(next.Finish(), IsOk());
  cancelled.Cancel();
  EXPECT_THAT(cancelled.Finish(), StatusIs(absl::StatusCode::kCancelled));
  EXPECT_TRUE(WaitFor([&] { return uploads.used() == 0; }));
  // Only the finished uploads' tensors stay resident: the cancelled one's went with it.
  EXPECT_TRUE(WaitFor([&] { return server->registry().resident_bytes() == 2010; }));
}

TEST(UploadBudgetServer, AStalledUploadIsAnsweredDeadlineExceededAndLetsGo) {
  ServerOptions options = UploadOptions(/*slots=*/1);
  options.upload_idle_timeout = absl::Milliseconds(300);
  std::unique_ptr<Server> server = StartServer(options);
  ASSERT_NE(server, nullptr);
  auto stub = MakeStub(server->port());

  // A message every 100 ms for 1 s in all, longer than the bound: not idle, stored.
  HeldUpload steady(*stub, "steady", 1100, 100);
  for (int i = 0; i < 10; ++i) {
    absl::SleepFor(absl::Milliseconds(100));
    ASSERT_TRUE(steady.Send(100));
  }
  EXPECT_THAT(steady.Finish(), IsOk());

  const absl::Time start = absl::Now();
  HeldUpload stalled(*stub, "stalled", 2000, 1000);
  EXPECT_THAT(stalled.Wait(),
              StatusIs(absl::StatusCode::kDeadlineExceeded,
                       HasSubstr("the upload of tensor 'stalled' sent no message for 300ms "
                                 "(--upload_idle_timeout_s); nothing was stored")));
  EXPECT_LT(absl::Now() - start, absl::Seconds(10));
  EXPECT_TRUE(WaitFor([&] { return server->upload_budget().used() == 0; }));
  EXPECT_TRUE(WaitFor([&] { return server->registry().resident_bytes() == 1100; }));
  // Its slot is free again: the only one.
  HeldUpload after(*stub, "after", 10, 10);
  EXPECT_THAT(after.Finish(), IsOk());
}

// An UpdateRows stream on a uint8 [n] table (row shape []) in progress: its first message (one
// row) is sent by the constructor.
class HeldUpdate {
 public:
  HeldUpdate(Stub& stub, const std::string& name)
      : writer_(stub.UpdateRows(&context_, &response_)) {
    v1::UpdateRowsRequest message = Row(0);
    message.set_name(name);
    (void)writer_->Write(message);  // a refused stream may be answered before this is written
  }
  bool Send(int64_t row) { return writer_->Write(Row(row)); }
  absl::Status Finish() {
    writer_->WritesDone();
    return Wait();
  }
  absl::Status Wait() { return ToAbsl(writer_->Finish()); }
  const v1::UpdateRowsResponse& response() const { return response_; }

 private:
  static v1::UpdateRowsRequest Row(int64_t row) {
    v1::UpdateRowsRequest message;
    message.mutable_indices()->set_dtype(v1::DT_INT64);
    message.mutable_indices()->add_shape(1);
    message.mutable_indices()->set_data(std::string(reinterpret_cast<const char*>(&row), 8));
    message.mutable_values()->set_dtype(v1::DT_UINT8);
    message.mutable_values()->add_shape(1);
    message.mutable_values()->set_data(std::string(1, '\7'));
    return message;
  }

  grpc::ClientContext context_;
  v1::UpdateRowsResponse response_;
  std::unique_ptr<grpc::ClientWriter<v1::UpdateRowsRequest>> writer_;
};

// UpdateRows is read as PutTensor is (server/native/upload_stream_call.h): it holds a slot of
// the uploads' share while it runs, and a stalled stream is ended.
TEST(UploadBudgetServer, UpdateStreamsHoldAnUploadSlotAndAreBoundedWhenIdle) {
  ServerOptions options = UploadOptions(/*slots=*/1);
  options.upload_idle_timeout = absl::Milliseconds(300);
  std::unique_ptr<Server> server = StartServer(options);
  ASSERT_NE(server, nullptr);
  auto stub = MakeStub(server->port());
  HeldUpload table(*stub, "live", 8, 8);
  ASSERT_THAT(table.Finish(), IsOk());

  HeldUpdate steady(*stub, "live");
  ASSERT_TRUE(WaitFor([&] { return server->upload_budget().used() == 2 * kMessageBytes; }));
  // The only slot is taken: an upload is refused before it sends anything.
  HeldUpload refused(*stub, "refused", 10, 10);
  EXPECT_THAT(refused.Finish(),
              StatusIs(absl::StatusCode::kUnavailable, HasSubstr("held by uploads in progress")));
  for (int64_t row = 1; row < 4; ++row) {
    absl::SleepFor(absl::Milliseconds(100));
    ASSERT_TRUE(steady.Send(row));
  }
  ASSERT_THAT(steady.Finish(), IsOk());
  EXPECT_EQ(steady.response().messages(), 4);
  EXPECT_EQ(steady.response().rows(), 4);
  EXPECT_EQ(steady.response().sequence(), 4);

  HeldUpdate stalled(*stub, "live");
  EXPECT_THAT(stalled.Wait(),
              StatusIs(absl::StatusCode::kDeadlineExceeded,
                       HasSubstr("the update of tensor 'live' sent no message for 300ms "
                                 "(--upload_idle_timeout_s); 1 messages (1 rows) were applied "
                                 "before")));
  EXPECT_TRUE(WaitFor([&] { return server->upload_budget().used() == 0; }));
}

}  // namespace
}  // namespace tensorcompute::server
