// File: core/cuda/device_wait.h
//
// Waiting for the device with a deadline. cudaEventSynchronize and cudaStreamSynchronize
// wait forever: a hung kernel or a GPU that fell off the bus would block the waiting thread
// (a stream slot, a table upload, shutdown) for good. WaitForEvent polls cudaEventQuery
// instead: it yields the core for the first tens of microseconds (a small batch's round trip),
// then sleeps between polls, each sleep longer than the last up to a cap, and gives up at the
// deadline. The caller then treats the device as lost (cuda_executor.h).
//
// Thread-safety: thread-safe (the CUDA calls are).

#ifndef TENSORCOMPUTE_CORE_CUDA_DEVICE_WAIT_H_
#define TENSORCOMPUTE_CORE_CUDA_DEVICE_WAIT_H_

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include <cuda_runtime.h>

namespace tensorcompute::cuda {

// Waits until the work recorded before `event` has run. Returns OK; INTERNAL naming the CUDA
// error the query reported (CudaError, with `what`); or DEADLINE_EXCEEDED once `timeout` has
// passed with the work still running: "the GPU did not finish <what> within 10s".
absl::Status WaitForEvent(cudaEvent_t event, absl::Duration timeout, absl::string_view what);

// Records `event` on `stream` and waits for it (WaitForEvent): a stream synchronisation with a
// deadline. `event` must be of the stream's device; it is re-recorded by each call.
absl::Status WaitForStream(cudaStream_t stream, cudaEvent_t event, absl::Duration timeout,
                           absl::string_view what);

// How long WaitForEvent pauses before its next poll, having waited `waited` so far: zero (a
// yield) for the first 50 us, then 10 us doubling with each poll up to 200 us.
absl::Duration PollPause(absl::Duration waited, absl::Duration last_pause);

}  // namespace tensorcompute::cuda

#endif  // TENSORCOMPUTE_CORE_CUDA_DEVICE_WAIT_H_
