#include "core/cuda/cuda_status.h"

#include "absl/strings/str_cat.h"

namespace tensorcompute::cuda {

absl::Status CudaError(cudaError_t error, absl::string_view what) {
  if (error == cudaSuccess) return absl::OkStatus();
  return absl::InternalError(
      absl::StrCat(cudaGetErrorName(error), ": ", cudaGetErrorString(error), " (", what, ")"));
}

bool IsStickyError(cudaError_t error) {
  // The errors whose documentation (driver_types.h) says "the process must be terminated and
  // relaunched", plus cudaErrorUnknown, after which nothing is known to work.
  switch (error) {
    case cudaErrorIllegalAddress:
    case cudaErrorLaunchTimeout:
    case cudaErrorLaunchFailure:
    case cudaErrorAssert:
    case cudaErrorHardwareStackError:
    case cudaErrorIllegalInstruction:
    case cudaErrorMisalignedAddress:
    case cudaErrorInvalidAddressSpace:
    case cudaErrorInvalidPc:
    case cudaErrorECCUncorrectable:
    case cudaErrorNvlinkUncorrectable:
    case cudaErrorContained:
    case cudaErrorExternalDevice:
    case cudaErrorMpsClientTerminated:
    case cudaErrorTensorMemoryLeak:
    case cudaErrorUnknown:
      return true;
    default:
      return false;
  }
}

}  // namespace tensorcompute::cuda
