// File: client/progress_line.h
//
// A progress bar on one terminal line, for the CLI's long uploads (`put` of a large file):
//
//   ProgressLine progress("put emb", isatty(STDERR_FILENO));
//   options.on_progress = [&](int64_t sent, int64_t total) { progress.Update(sent, total); };
//   ... upload ...
//   progress.Done();
//
// drawn on stderr as
//   put emb [##########..........]  1.50 of 3.00 GiB  812 MB/s  2 s left
// redrawn in place ("\r") at most ten times a second, and ended with a newline by Done().
// Disabled (not a terminal), it writes nothing. Thread-safety: one thread at a time.

#ifndef TENSORCOMPUTE_CLIENT_PROGRESS_LINE_H_
#define TENSORCOMPUTE_CLIENT_PROGRESS_LINE_H_

#include <cstdint>
#include <string>

#include "absl/time/time.h"

namespace tensorcompute::client {

// The line for `done` of `total` bytes after `elapsed` (no "\r"): a bar of `width` cells, the
// bytes in GiB (MiB under 1 GiB), the rate in MB/s and the seconds left, once there is a rate.
std::string FormatProgress(const std::string& what, int64_t done, int64_t total,
                           absl::Duration elapsed, int width = 20);

class ProgressLine {
 public:
  ProgressLine(std::string what, bool enabled);
  // Redraws the line when enabled and 100 ms have passed since the last drawing (or done
  // reached total).
  void Update(int64_t done, int64_t total);
  // Ends the line with a newline if anything was drawn.
  void Done();

  // --- implementation details below ---
 private:
  const std::string what_;
  const bool enabled_;
  const absl::Time start_;
  absl::Time drawn_ = absl::InfinitePast();
  bool any_ = false;
};

}  // namespace tensorcompute::client

#endif  // TENSORCOMPUTE_CLIENT_PROGRESS_LINE_H_
