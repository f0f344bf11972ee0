// File: client/update_writer.h
//
// The load tester's writer (`tensorcompute load --update-rate R --update-rows N`): beside the
// lookups, it replaces random rows of a resident table with UpdateRows, N rows per message at
// R rows per second, on one stream of its own channel (a connection apart from the lookups'),
// so that a run measures lookups while updates stream (issue 41's benchmark):
//
//   absl::StatusOr<std::unique_ptr<UpdateWriter>> writer = UpdateWriter::Start(channel, spec);
//   ... RunLoad(...) ...
//   UpdateLoadReport updates = (*writer)->Stop();
//
// Pacing: message k is due at start + k * N / R (from the start, so that late sends do not
// add up into a slower rate); a writer that cannot keep up sends back to back, and the report
// says what it achieved. The messages (distinct random indices within each, random values in
// the table's dtype) are built up front and sent in turn. A stream that fails is counted as an
// error (by code, with its message) and a new one is opened after 100 ms, until Stop. (So is
// one the server ends for idleness: messages further apart than its --upload_idle_timeout_s,
// 2 min, i.e. a rate below N / 120 rows per second.)
//
// Thread-safety: Start and Stop are called from one thread; the writing runs on a thread of
// its own, started by Start and joined by Stop (or the destructor).

#ifndef TENSORCOMPUTE_CLIENT_UPDATE_WRITER_H_
#define TENSORCOMPUTE_CLIENT_UPDATE_WRITER_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "grpcpp/channel.h"
#include "grpcpp/client_context.h"
#include "tensorcompute/v1/tensorcompute.pb.h"

#include "core/dtype.h"
#include "core/shape.h"
#include "core/table_storage.h"

namespace tensorcompute::client {

// What the writer updates and how fast.
struct UpdateLoadSpec {
  std::string name;  // the resident table
  // The table as ListTensors describes it: its dtype, shape (rows first) and storage. The
  // values sent are the table's dtype and row shape, or for kInt8RowwisePrequantized uint8
  // [N, dim + 8] rows with a finite scale and bias.
  core::DataType dtype = core::DataType::kFloat32;
  core::Shape shape;
  core::TableStorage storage = core::TableStorage::kAsIs;
  double rows_per_second = 0;      // > 0
  int64_t rows_per_message = 1;    // in [1, shape[0]]: the indices of a message are distinct
  int64_t distinct_messages = 16;  // built up front, sent in turn; >= 1
  // "Bearer <token>" sent as "authorization" (UpdateRows needs the admin token when the
  // server has one); empty: none.
  std::string authorization;
  uint64_t seed = 1;  // of the random indices and values
};

struct UpdateLoadReport {
  double target_rows_per_s = 0;  // the spec's rate
  int64_t rows_sent = 0;         // rows in messages that were written
  int64_t messages_sent = 0;
  int64_t rows_applied = 0;      // rows the server acknowledged (UpdateRowsResponse.rows)
  int64_t messages_applied = 0;  // messages it acknowledged
  int64_t sequence = 0;          // the table's sequence in the last acknowledgement
  int64_t streams = 0;           // streams opened
  int64_t errors = 0;            // streams that ended not OK
  std::map<std::string, int64_t> error_codes;  // "UNAVAILABLE" -> streams
  std::string last_error;                      // "CODE: message" of the last failed stream
  double seconds = 0;                          // from Start to the end of Stop
  double rows_per_s = 0;                       // rows_applied / seconds
};

// The messages of `spec` (REQUIRES: CheckUpdateLoadSpec(spec) is OK): distinct_messages
// messages, each naming the table, of rows_per_message distinct random indices in
// [0, shape[0]) (int64) and random values.
std::vector<v1::UpdateRowsRequest> BuildUpdateMessages(const UpdateLoadSpec& spec);

// OK, or INVALID_ARGUMENT saying which: a rate that is not > 0 and finite, a table of rank 0
// or of strings, rows_per_message not in [1, shape[0]], distinct_messages < 1.
absl::Status CheckUpdateLoadSpec(const UpdateLoadSpec& spec);

class UpdateWriter {
 public:
  // Builds the messages and starts writing them on `channel` at once; INVALID_ARGUMENT for a
  // bad spec (CheckUpdateLoadSpec), before anything is sent.
  static absl::StatusOr<std::unique_ptr<UpdateWriter>> Start(std::shared_ptr<grpc::Channel> channel,
                                                             const UpdateLoadSpec& spec);
  // Stops writing: the stream in progress is half-closed and its answer waited for. Returns
  // the report. Call once.
  UpdateLoadReport Stop();
  ~UpdateWriter();  // Stop()s if it was not

  UpdateWriter(const UpdateWriter&) = delete;
  UpdateWriter& operator=(const UpdateWriter&) = delete;

  // --- implementation details below ---
 private:
  UpdateWriter(std::shared_ptr<grpc::Channel> channel, const UpdateLoadSpec& spec);
  void Write();         // the writing thread: WriteStreams, then finished_
  void WriteStreams();  // opens streams and writes on them until Stop
  // Waits until `due` or Stop, whichever is first; true when stopped.
  bool WaitUntil(absl::Time due);

  const std::shared_ptr<grpc::Channel> channel_;
  const UpdateLoadSpec spec_;
  const std::vector<v1::UpdateRowsRequest> messages_;
  const absl::Time start_;
  absl::Mutex mu_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  bool finished_ ABSL_GUARDED_BY(mu_) = false;  // the writing thread is about to end
  // The stream in progress, for Stop to cancel; null between streams.
  grpc::ClientContext* context_ ABSL_GUARDED_BY(mu_) = nullptr;
  UpdateLoadReport report_;  // written by the writing thread only, read after it is joined
  std::thread thread_;
  bool stopped_ = false;  // Stop was called
};

}  // namespace tensorcompute::client

#endif  // TENSORCOMPUTE_CLIENT_UPDATE_WRITER_H_
