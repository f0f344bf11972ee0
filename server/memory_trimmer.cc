#include "server/memory_trimmer.h"

#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace tensorcompute::server {

MemoryTrimmer::MemoryTrimmer(absl::Duration interval)
    // stop_ is declared before thread_ (memory_trimmer.h), so it exists before the thread runs.
    // Waiting on it rather than sleeping lets the destructor stop the thread at once.
    : thread_([this, interval] {
        while (!stop_.WaitForNotificationWithTimeout(interval)) {
#if defined(__GLIBC__)
          malloc_trim(0);  // every arena, not just the top of the main heap
#endif
        }
      }) {
}

MemoryTrimmer::~MemoryTrimmer() {
  stop_.Notify();
  thread_.join();
}

}  // namespace tensorcompute::server
