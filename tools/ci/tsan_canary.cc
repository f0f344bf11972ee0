// File: tools/ci/tsan_canary.cc
//
// tools/ci/tsan.sh's check that its ThreadSanitizer set-up can see what the tests rely on.
// Built by the script (not by CMake) with -fsanitize=thread against the instrumented Abseil:
//   tsan_canary          two threads increment a counter under an absl::Mutex, and a third
//                        hands a value over through an absl::Notification: TSan must stay
//                        silent (with Debian's uninstrumented Abseil it reports both);
//   tsan_canary racy     the same counter without the lock: TSan must report the race, so
//                        the suppressions (tools/ci/tsan.supp) do not hide a race in our code.

#include <cstdio>
#include <cstring>
#include <thread>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"

int main(int argc, char** argv) {
  const bool racy = argc > 1 && std::strcmp(argv[1], "racy") == 0;
  absl::Mutex mu;
  long counter = 0;
  auto add = [&] {
    for (int i = 0; i < 10000; ++i) {
      if (racy) {
        ++counter;
      } else {
        absl::MutexLock lock(&mu);
        ++counter;
      }
    }
  };
  std::thread a(add);
  std::thread b(add);
  a.join();
  b.join();

  absl::Notification ready;
  int payload = 0;
  std::thread producer([&] {
    payload = 42;
    ready.Notify();
  });
  ready.WaitForNotification();
  std::printf("tsan_canary: counter %ld, payload %d\n", counter, payload);
  producer.join();
  return 0;
}
