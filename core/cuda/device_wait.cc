#include "core/cuda/device_wait.h"

#include <algorithm>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

#include "core/cuda/cuda_status.h"

namespace tensorcompute::cuda {

absl::Duration PollPause(absl::Duration waited, absl::Duration last_pause) {
  if (waited < absl::Microseconds(50)) return absl::ZeroDuration();
  if (last_pause < absl::Microseconds(10)) return absl::Microseconds(10);
  return std::min(last_pause * 2, absl::Microseconds(200));
}

absl::Status WaitForEvent(cudaEvent_t event, absl::Duration timeout, absl::string_view what) {
  const absl::Time start = absl::Now();
  absl::Duration pause = absl::ZeroDuration();
  while (true) {
    const cudaError_t state = cudaEventQuery(event);
    if (state == cudaSuccess) return absl::OkStatus();
    if (state != cudaErrorNotReady) return CudaError(state, what);
    // cudaErrorNotReady is not an error, but the runtime keeps it as the thread's last error:
    // clear it so that a later launch check does not take it for its own.
    (void)cudaGetLastError();
    const absl::Duration waited = absl::Now() - start;
    if (waited >= timeout) {
      return absl::DeadlineExceededError(
          absl::StrCat("the GPU did not finish ", what, " within ", absl::FormatDuration(timeout)));
    }
    pause = PollPause(waited, pause);
    if (pause == absl::ZeroDuration()) {
      std::this_thread::yield();
    } else {
      absl::SleepFor(pause);
    }
  }
}

absl::Status WaitForStream(cudaStream_t stream, cudaEvent_t event, absl::Duration timeout,
                           absl::string_view what) {
  TC_CUDA_RETURN_IF_ERROR(cudaEventRecord(event, stream), what);
  return WaitForEvent(event, timeout, what);
}

}  // namespace tensorcompute::cuda
