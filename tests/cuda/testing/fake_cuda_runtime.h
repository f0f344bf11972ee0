// File: tests/cuda/testing/fake_cuda_runtime.h
//
// The controls of the fake CUDA runtime (fake_cuda_runtime.cc), a test double that lets the
// GPU executor's host logic run on the CPU; see that file for what it fakes and what it cannot
// prove. This header has no CUDA in it, so that any test can include it to inject faults.
//
// Thread-safety: every function may be called from any thread.

#ifndef TENSORCOMPUTE_TESTS_CUDA_TESTING_FAKE_CUDA_RUNTIME_H_
#define TENSORCOMPUTE_TESTS_CUDA_TESTING_FAKE_CUDA_RUNTIME_H_

#include <cstdint>

namespace tensorcompute::cuda::fake {

// After `n` more successful launches (of any kernel), the next launch fails with
// cudaErrorLaunchFailure, a sticky error: from then on every stream synchronisation, copy and
// allocation fails the same way (until Reset).
void FailLaunchAfter(int n);

// The next `n` device allocations fail with cudaErrorMemoryAllocation (not sticky).
void FailNextAllocations(int n);

// Kernel launches (gather, EmbeddingBag and row scatter) that were accepted since the process
// started.
int64_t Launches();

// After `n` more successful pinned host allocations (cudaMallocHost), every later one fails
// with cudaErrorMemoryAllocation (not sticky) until Reset.
void FailPinnedAllocationsAfter(int n);

// After `n` more successful cudaMemcpyAsync calls, the next one fails with
// cudaErrorInvalidValue (not sticky; once).
void FailAsyncCopyAfter(int n);

// Every later cudaMemcpyAsync waits `microseconds` on its stream before copying (0: no
// extra wait; until Reset), so that the host races far ahead of the "device" and a missing
// wait for a copy's end before reusing its source shows as corrupt data.
void DelayAsyncCopies(int64_t microseconds);

// Successful cudaMallocHost calls since the process started, and pinned buffers allocated and
// not yet freed.
int64_t PinnedAllocations();
int64_t PinnedBuffersHeld();

// The device stops: no stream runs another operation until Reset (a hung kernel, a GPU that
// fell off the bus). Events are never reached, so every wait for one times out.
void HangDevice();

// The next cudaEventElapsedTime fails with cudaErrorInvalidValue (not sticky), leaving it as
// the calling thread's last error.
void FailNextElapsedTime();

// ProbeGatherKernels, ProbeBagKernels and ProbeScatterKernels fail with
// cudaErrorNoKernelImageForDevice (a binary built for another architecture) until Reset.
void FailKernelProbes();

// cudaMemPoolTrimTo calls since the process started.
int64_t PoolTrims();

// Clears every injected fault (the device works again).
void Reset();

}  // namespace tensorcompute::cuda::fake

#endif  // TENSORCOMPUTE_TESTS_CUDA_TESTING_FAKE_CUDA_RUNTIME_H_
