// cuda_executor.h in a build without nvcc: no device, and Create() says why, so that the
// server and the tests need no #ifdefs.

#include <utility>

#include "core/cuda/cuda_executor.h"

namespace tensorcompute::cuda {
namespace {

absl::Status NoCuda() {
  return absl::UnimplementedError("this build has no CUDA backend (built without nvcc)");
}

}  // namespace

// Never instantiated: Create() always fails.
class CudaExecutor::Impl {};

int CudaDeviceCount() { return 0; }

absl::StatusOr<std::string> CudaDeviceDescription(int) { return NoCuda(); }

absl::StatusOr<std::unique_ptr<CudaExecutor>> CudaExecutor::Create(const CudaExecutorOptions&) {
  return NoCuda();
}

CudaExecutor::CudaExecutor(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
CudaExecutor::~CudaExecutor() = default;

void CudaExecutor::Run(batching::Batch batch, absl::AnyInvocable<void() &&> batch_done) {
  for (std::unique_ptr<batching::Task>& task : batch) std::move(task->done)(NoCuda());
  std::move(batch_done)();
}

absl::StatusOr<core::DeviceCopy> CudaExecutor::UploadTable(int, const core::Tensor&) {
  return NoCuda();
}

absl::Status CudaExecutor::UpdateRows(const core::DeviceCopy&, absl::Span<const int64_t>, int64_t,
                                      absl::Span<const uint8_t>) {
  return NoCuda();
}

absl::string_view CudaExecutor::name() const { return "cuda"; }
int CudaExecutor::slots() const { return 0; }
bool CudaExecutor::healthy() const { return false; }

}  // namespace tensorcompute::cuda
