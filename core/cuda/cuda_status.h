// File: core/cuda/cuda_status.h
//
// CUDA runtime errors as absl::Status, so that the CUDA code speaks the project's one error
// type (STYLE.md section 3): CudaError turns a cudaError_t into INTERNAL naming the CUDA
// error ("cudaErrorLaunchFailure: unspecified launch failure (copying outputs)"), and
// TC_CUDA_RETURN_IF_ERROR returns it early. IsStickyError says whether an error left the
// device's context unusable for the rest of the process (the executor then takes the device
// out of service).
//
// Thread-safety: pure functions.

#ifndef TENSORCOMPUTE_CORE_CUDA_CUDA_STATUS_H_
#define TENSORCOMPUTE_CORE_CUDA_CUDA_STATUS_H_

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include <cuda_runtime.h>

namespace tensorcompute::cuda {

// OK for cudaSuccess; otherwise INTERNAL with the message
// "<cudaGetErrorName>: <cudaGetErrorString> (<what>)".
absl::Status CudaError(cudaError_t error, absl::string_view what);

// Whether `error` is one after which every later CUDA call in this process fails the same way
// (illegal address, launch failure or timeout, device assert, ECC or NVLink uncorrectable,
// hardware stack error, illegal or misaligned access, invalid PC, contained error, MPS
// client terminated, unknown):
// the context is lost and only a new process can use the device again.
bool IsStickyError(cudaError_t error);

}  // namespace tensorcompute::cuda

// Evaluates `expr` (a cudaError_t); returns CudaError(error, what) from the enclosing
// function (which returns absl::Status or absl::StatusOr<T>) unless it is cudaSuccess.
#define TC_CUDA_RETURN_IF_ERROR(expr, what)                                         \
  do {                                                                              \
    const cudaError_t tc_cuda_status_macro_error_ = (expr);                         \
    if (tc_cuda_status_macro_error_ != cudaSuccess) {                               \
      return ::tensorcompute::cuda::CudaError(tc_cuda_status_macro_error_, (what)); \
    }                                                                               \
  } while (false)

#endif  // TENSORCOMPUTE_CORE_CUDA_CUDA_STATUS_H_
