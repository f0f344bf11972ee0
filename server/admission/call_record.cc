#include "server/admission/call_record.h"

#include <algorithm>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace tensorcompute::server {
namespace {

bool Set(absl::Time t) { return t != absl::InfinitePast(); }

// A duration as a Server-Timing dur: milliseconds, to the microsecond. Durations are clamped at
// zero here and in Micros: the stamps come from absl::Now(), the wall clock, which can step
// back between two of them.
std::string Millis(absl::Duration d) {
  return absl::StrFormat("%.3f", absl::ToDoubleMilliseconds(std::max(d, absl::ZeroDuration())));
}

std::string Micros(absl::Duration d) {
  return absl::StrCat(absl::ToInt64Microseconds(std::max(d, absl::ZeroDuration())));
}

// Trace Context requires lowercase hex for the ids, and an all-zero id is invalid.
bool LowerHex(absl::string_view s, size_t length) {
  if (s.size() != length) return false;
  bool nonzero = false;
  for (char c : s) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
    nonzero |= c != '0';
  }
  return nonzero;
}

// "00-<trace id: 32 hex>-<parent id: 16 hex>-<flags: 2 hex>"
// (https://www.w3.org/TR/trace-context/#traceparent-header-field-values)
bool ValidTraceparent(absl::string_view v) {
  // 55 = 2 + 1 + 32 + 1 + 16 + 1 + 2; version 00 has exactly that length. The flags are only
  // checked to be hex: the server does not interpret them.
  if (v.size() != 55 || v.substr(0, 3) != "00-" || v[35] != '-' || v[52] != '-') return false;
  const absl::string_view flags = v.substr(53, 2);
  return LowerHex(v.substr(3, 32), 32) && LowerHex(v.substr(36, 16), 16) &&
         absl::ascii_isxdigit(flags[0]) && absl::ascii_isxdigit(flags[1]);
}

bool ValidRequestId(absl::string_view v) {
  if (v.empty() || v.size() > kMaxRequestIdBytes) return false;
  // Printable, no spaces: the id is logged as one token of a log line and echoed as a header,
  // so a client cannot break or forge a line with it.
  return std::all_of(v.begin(), v.end(), [](char c) { return c > ' ' && c < 0x7f; });
}

}  // namespace

core::RequestStages CallRecord::Stages(absl::Time answered) const {
  core::RequestStages stages;
  stages.total = answered - arrived;
  stages.request_bytes = request_bytes;
  stages.response_bytes = response_bytes;
  if (Set(submitted) && Set(computed)) {
    stages.computed = true;
    stages.decode = submitted - arrived;
    // No batch_start: the call never reached a batch (a shard router's, or one the budget or the
    // queue refused), so everything after Submit counts as compute.
    if (Set(batch_start)) {
      stages.queue = batch_start - submitted;
      stages.compute = computed - batch_start;
    } else {
      stages.compute = computed - submitted;
    }
  }
  return stages;
}

std::string CallRecord::ServerTiming(absl::Time answered) const {
  const core::RequestStages stages = Stages(answered);
  if (!stages.computed) return absl::StrCat("total;dur=", Millis(stages.total));
  return absl::StrCat("queue;dur=", Millis(stages.queue), ", compute;dur=", Millis(stages.compute),
                      ", total;dur=", Millis(stages.total));
}

std::vector<std::pair<std::string, std::string>> CallRecord::TimingTrailers(
    absl::Time answered) const {
  const core::RequestStages stages = Stages(answered);
  std::vector<std::pair<std::string, std::string>> out;
  if (stages.computed) {
    out.emplace_back(kQueueMicrosKey, Micros(stages.queue));
    out.emplace_back(kComputeMicrosKey, Micros(stages.compute));
  }
  out.emplace_back(kServerMicrosKey, Micros(stages.total));
  if (table_sequence >= 0) out.emplace_back(kTableSequenceKey, absl::StrCat(table_sequence));
  if (disk_hits >= 0) {
    out.emplace_back(kDiskHitsKey, absl::StrCat(disk_hits));
    out.emplace_back(kDiskMissesKey, absl::StrCat(disk_misses));
  }
  return out;
}

void SetRequestId(absl::string_view traceparent, absl::string_view x_request_id,
                  CallRecord* record) {
  // A valid traceparent wins: it ties the log line to the caller's distributed trace.
  if (ValidTraceparent(traceparent)) {
    record->request_id = absl::StrCat("trace_id=", traceparent.substr(3, 32));
    record->request_id_header = {kTraceparentKey, std::string(traceparent)};
  } else if (ValidRequestId(x_request_id)) {
    record->request_id = absl::StrCat("request_id=", x_request_id);
    record->request_id_header = {kRequestIdKey, std::string(x_request_id)};
  }
}

}  // namespace tensorcompute::server
