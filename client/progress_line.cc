#include "client/progress_line.h"

#include <algorithm>
#include <cstdio>
#include <utility>

#include "absl/strings/str_format.h"
#include "absl/time/clock.h"

namespace tensorcompute::client {

std::string FormatProgress(const std::string& what, int64_t done, int64_t total,
                           absl::Duration elapsed, int width) {
  const double fraction =
      total > 0 ? std::clamp(static_cast<double>(done) / static_cast<double>(total), 0.0, 1.0)
                : 1.0;
  const int filled = static_cast<int>(fraction * width);
  const std::string bar = std::string(static_cast<size_t>(filled), '#') +
                          std::string(static_cast<size_t>(width - filled), '.');
  const bool gib = total >= (int64_t{1} << 30);
  const double unit = gib ? static_cast<double>(int64_t{1} << 30) : static_cast<double>(1 << 20);
  std::string line =
      absl::StrFormat("%s [%s] %6.2f of %.2f %s", what, bar, static_cast<double>(done) / unit,
                      static_cast<double>(total) / unit, gib ? "GiB" : "MiB");
  const double seconds = absl::ToDoubleSeconds(elapsed);
  if (seconds > 0 && done > 0) {
    const double rate = static_cast<double>(done) / seconds;
    absl::StrAppendFormat(&line, "  %.0f MB/s  %.0f s left", rate / 1e6,
                          static_cast<double>(std::max<int64_t>(0, total - done)) / rate);
  }
  return line;
}

ProgressLine::ProgressLine(std::string what, bool enabled)
    : what_(std::move(what)), enabled_(enabled), start_(absl::Now()) {}

void ProgressLine::Update(int64_t done, int64_t total) {
  if (!enabled_) return;
  const absl::Time now = absl::Now();
  if (now - drawn_ < absl::Milliseconds(100) && done < total) return;
  drawn_ = now;
  any_ = true;
  // "\33[K" clears what a longer earlier line left on the right.
  std::fprintf(stderr, "\r%s\33[K", FormatProgress(what_, done, total, now - start_).c_str());
  std::fflush(stderr);
}

void ProgressLine::Done() {
  if (any_) std::fputc('\n', stderr);
  any_ = false;
}

}  // namespace tensorcompute::client
