// File: server/admission/call_record.h
//
// One call's account of itself, kept by its front end from arrival to answer, so that every
// front end reports the same things the same way:
//
//   arrived       CallGate::Arrive
//   submitted     ComputeEntry::Submit (after the message was read and decoded)
//   batch_start   the batch that computes it began (batching::Task::batch_start)
//   computed      Submit's done was called (its output written, or its error known)
//   sizes         the request's and the answer's bytes on the wire (message or HTTP body)
//   model         whose statistics it joins: the resident table's, or the built-in op's
//   table_sequence  the sequence of the resident table it read (core/live_rows.h): set by
//                 Submit when it is submitted, then exactly by the batch that computes it
//                 (batching::Task::table_sequence)
//   request_id    the caller's W3C `traceparent` or `x-request-id`, for the logs
//
// ComputeEntry::Submit fills the compute part; CallGate::Answer reads all of it once (the
// metrics, the model's statistics, the error log); the front end puts the timing into its
// answer with ServerTiming() (HTTP's Server-Timing header) or TimingTrailers() (gRPC trailing
// metadata), so that a client can tell server time from network time.
//
// Thread-safety: none; the front end, the executor (batch_start) and Submit's done write it one
// after another, each handing on to the next through the batcher or the done call.

#ifndef TENSORCOMPUTE_SERVER_CALL_RECORD_H_
#define TENSORCOMPUTE_SERVER_CALL_RECORD_H_

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/string_view.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

#include "core/request_stats.h"

namespace tensorcompute::server {

// Trailing metadata keys of a gRPC answer's timing, in microseconds (integers): the wait in
// the batcher's queue, the compute, and the server's whole time until the answer was ready.
inline constexpr char kQueueMicrosKey[] = "tc-queue-us";
inline constexpr char kComputeMicrosKey[] = "tc-compute-us";
inline constexpr char kServerMicrosKey[] = "tc-server-us";
// Trailing metadata key of the sequence (core/live_rows.h) of the resident table an answer was
// computed on: the row updates it reflects.
inline constexpr char kTableSequenceKey[] = "tc-table-sequence";
// Trailing metadata keys of a lookup on a table on disk (core/disk_rows.h): the distinct rows it
// read from the row cache, and from the disk.
inline constexpr char kDiskHitsKey[] = "tc-disk-hits";
inline constexpr char kDiskMissesKey[] = "tc-disk-misses";

// The request ids a caller may send (gRPC metadata or HTTP headers), echoed in error answers.
inline constexpr char kTraceparentKey[] = "traceparent";
inline constexpr char kRequestIdKey[] = "x-request-id";
// The longest x-request-id kept: a longer (or non-printable) one is ignored, not logged.
inline constexpr size_t kMaxRequestIdBytes = 128;

struct CallRecord {
  explicit CallRecord(absl::Time arrived = absl::Now()) : arrived(arrived) {}

  absl::Time arrived;
  absl::Time submitted = absl::InfinitePast();
  absl::Time batch_start = absl::InfinitePast();
  absl::Time computed = absl::InfinitePast();
  int64_t request_bytes = 0;
  int64_t response_bytes = 0;
  std::shared_ptr<core::RequestStats> model;  // set by Submit; null for other calls
  int64_t table_sequence = -1;                // -1: no resident table
  // A lookup on a table on disk: the distinct rows its batch found in the row cache and read
  // from the disk (-1: none; set by that batch, disk_lookup.h).
  int64_t disk_hits = -1;
  int64_t disk_misses = -1;
  // The caller's id as it is logged, "trace_id=4bf9...36" or "request_id=abc", and the header
  // it came in, to be echoed in an error answer. Empty: none (or an invalid one).
  std::string request_id;
  std::pair<std::string, std::string> request_id_header;

  // The stages as of `answered` (core/request_stats.h). A call submitted but answered without
  // a batch (a shard router's, which sends its parts elsewhere) has no queue, and its compute
  // is its routing.
  core::RequestStages Stages(absl::Time answered) const;

  // The Server-Timing header's value (milliseconds with microsecond precision), e.g.
  // "queue;dur=0.012, compute;dur=0.402, total;dur=0.611"; total only for a call never
  // computed.
  std::string ServerTiming(absl::Time answered) const;
  // (key, value) pairs of trailing metadata: kQueueMicrosKey and kComputeMicrosKey when it was
  // computed, kServerMicrosKey, kTableSequenceKey when it read a resident table, and
  // kDiskHitsKey and kDiskMissesKey when it read a table on disk.
  std::vector<std::pair<std::string, std::string>> TimingTrailers(absl::Time answered) const;
};

// Sets `record`'s request id from a call's `traceparent` (when valid per W3C Trace Context:
// version 00, a 32-hex-digit trace id and a 16-hex-digit parent id, neither all zeros) or else
// its `x-request-id` (printable ASCII without spaces, at most kMaxRequestIdBytes). Either may be
// absent.
void SetRequestId(absl::string_view traceparent, absl::string_view x_request_id,
                  CallRecord* record);

}  // namespace tensorcompute::server

#endif  // TENSORCOMPUTE_SERVER_CALL_RECORD_H_
