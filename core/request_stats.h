// File: core/request_stats.h
//
// What a model served, counted where the requests are answered and read when an operator asks
// (Prometheus scrapes, KServe's ModelStatistics): how many requests ended well or badly, and
// histograms of how long each stage of them took and how large they were.
//
//   Histogram        counts of observations in fixed buckets (upper bounds, then +Inf), their
//                    count and their sum. DurationBounds() and SizeBounds() are the buckets
//                    every duration and size in the server uses, so that series of different
//                    replicas, RPCs and models can be summed before histogram_quantile.
//   RequestStats     one model's (a resident table's, or an op's with params sent inline) or
//                    one RPC's histograms and outcome counters.
//
// A request's stages, as the server measures them (server/admission/call_record.h):
//   decode   arrival to its submission to compute (reading and decoding the message)
//   queue    submission to the start of the batch that computes it
//   compute  the batch's start to the request's output written
//   total    arrival to the answer
//
// Recording only does relaxed atomic adds: no lock, no allocation, so every request may record
// on its own thread. A reader sees each counter at some moment, not all at one moment (a scrape
// may see a request counted but not yet summed); Prometheus and Triton read their own counters
// the same way.
//
// Thread-safety: every method may be called from any thread.

#ifndef TENSORCOMPUTE_CORE_REQUEST_STATS_H_
#define TENSORCOMPUTE_CORE_REQUEST_STATS_H_

#include <array>
#include <atomic>
#include <cstdint>
#include <vector>

#include "absl/time/time.h"
#include "absl/types/span.h"

namespace tensorcompute::core {

class Histogram {
 public:
  // The most bounds a histogram has (a few more than the durations' 22).
  static constexpr int kMaxBounds = 24;

  // `bounds` are increasing upper bounds; observations above the last go to +Inf.
  // REQUIRES: bounds.size() <= kMaxBounds, and the span's storage outlives the histogram.
  explicit Histogram(absl::Span<const double> bounds);

  void Observe(double value);
  void ObserveDuration(absl::Duration d) { Observe(absl::ToDoubleSeconds(d)); }

  absl::Span<const double> bounds() const { return bounds_; }
  // Observations in bucket i: above bounds()[i-1] and at most bounds()[i]; bucket
  // bounds().size() holds everything above the last bound (+Inf). Not cumulative.
  int64_t bucket(int i) const { return buckets_[i].load(std::memory_order_relaxed); }
  std::vector<int64_t> buckets() const;
  int64_t count() const { return count_.load(std::memory_order_relaxed); }
  double sum() const;

 private:
  const absl::Span<const double> bounds_;
  std::array<std::atomic<int64_t>, kMaxBounds + 1> buckets_{};
  std::atomic<int64_t> count_{0};
  std::atomic<uint64_t> sum_bits_{0};  // a double, added to with compare-and-swap
};

// Seconds: 10 us to 60 s in 1-2.5-5 steps.
absl::Span<const double> DurationBounds();
// Bytes: 64 B to 1 GiB in steps of 4.
absl::Span<const double> SizeBounds();

// A count of events and the time they took in all: Triton's StatisticDuration.
class DurationTotal {
 public:
  void Add(absl::Duration d) {
    count_.fetch_add(1, std::memory_order_relaxed);
    ns_.fetch_add(absl::ToInt64Nanoseconds(d), std::memory_order_relaxed);
  }
  int64_t count() const { return count_.load(std::memory_order_relaxed); }
  int64_t ns() const { return ns_.load(std::memory_order_relaxed); }

 private:
  std::atomic<int64_t> count_{0};
  std::atomic<int64_t> ns_{0};
};

// The stages of one answered request (see the top of this file). A stage the request never
// reached (refused before compute, or answered without a batch) is absent.
struct RequestStages {
  bool computed = false;  // it went through a batch: decode, queue and compute are set
  absl::Duration decode;
  absl::Duration queue;
  absl::Duration compute;
  absl::Duration total;
  int64_t request_bytes = 0;
  int64_t response_bytes = 0;  // 0 for a failure
};

class RequestStats {
 public:
  RequestStats();

  // A request was answered, OK or not, at `answered`.
  void Record(const RequestStages& stages, bool ok, absl::Time answered);

  // Histograms: queue, compute and sizes only of requests that were computed (and response
  // sizes of those that succeeded); total of every request.
  const Histogram& queue() const { return queue_; }
  const Histogram& compute() const { return compute_; }
  const Histogram& total() const { return total_; }
  const Histogram& request_bytes() const { return request_bytes_; }
  const Histogram& response_bytes() const { return response_bytes_; }

  // Triton's InferStatistics: success and fail (total time), and of the successes queue,
  // compute_input (decode), compute_infer (compute) and compute_output (from the output written
  // to the answer: encoding the response).
  const DurationTotal& success() const { return success_; }
  const DurationTotal& failure() const { return failure_; }
  const DurationTotal& queue_total() const { return queue_total_; }
  const DurationTotal& decode_total() const { return decode_total_; }
  const DurationTotal& compute_total() const { return compute_total_; }
  const DurationTotal& encode_total() const { return encode_total_; }
  // When the last request was answered, in milliseconds since the Unix epoch; 0 before one.
  int64_t last_answer_ms() const { return last_answer_ms_.load(std::memory_order_relaxed); }

  // Row updates (UpdateRows, core/live_rows.h) applied to the table: `rows` rows of one
  // message, visible `visible` after the message arrived.
  void RecordUpdate(int64_t rows, absl::Duration visible);
  int64_t updated_rows() const { return updated_rows_.load(std::memory_order_relaxed); }
  int64_t update_messages() const { return update_messages_.load(std::memory_order_relaxed); }
  const Histogram& update_visible() const { return update_visible_; }

 private:
  Histogram queue_;
  Histogram compute_;
  Histogram total_;
  Histogram request_bytes_;
  Histogram response_bytes_;
  DurationTotal success_;
  DurationTotal failure_;
  DurationTotal queue_total_;
  DurationTotal decode_total_;
  DurationTotal compute_total_;
  DurationTotal encode_total_;
  std::atomic<int64_t> last_answer_ms_{0};
  std::atomic<int64_t> updated_rows_{0};
  std::atomic<int64_t> update_messages_{0};
  Histogram update_visible_;
};

}  // namespace tensorcompute::core

#endif  // TENSORCOMPUTE_CORE_REQUEST_STATS_H_
