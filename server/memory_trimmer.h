// File: server/memory_trimmer.h
//
// Gives memory that the process has freed back to the operating system, periodically: a
// thread that calls glibc's malloc_trim(0) every `interval` (ServerOptions::
// malloc_trim_interval). Why: under a burst of load gRPC buffers many requests and responses
// (up to a few hundred KiB each), on many threads, so glibc's per-thread arenas grow; once
// they are freed, glibc keeps most of those pages, and RSS steps up with each new high-water
// mark. Trimming returns the free pages at the cost of faulting them in again on the next
// burst (docs/reliability.md has the measured figures). Without glibc it does nothing.
//
// Thread-safety: construct and destroy on one thread; the trimming thread touches nothing
// else. The destructor stops and joins it.

#ifndef TENSORCOMPUTE_SERVER_MEMORY_TRIMMER_H_
#define TENSORCOMPUTE_SERVER_MEMORY_TRIMMER_H_

#include <thread>

#include "absl/synchronization/notification.h"
#include "absl/time/time.h"

namespace tensorcompute::server {

class MemoryTrimmer {
 public:
  // Starts trimming every `interval`. REQUIRES: interval > 0.
  explicit MemoryTrimmer(absl::Duration interval);
  ~MemoryTrimmer();

  MemoryTrimmer(const MemoryTrimmer&) = delete;
  MemoryTrimmer& operator=(const MemoryTrimmer&) = delete;

 private:
  absl::Notification stop_;
  std::thread thread_;
};

}  // namespace tensorcompute::server

#endif  // TENSORCOMPUTE_SERVER_MEMORY_TRIMMER_H_
