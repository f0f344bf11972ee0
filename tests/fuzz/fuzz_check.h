// File: tests/fuzz/fuzz_check.h
//
// What both fuzz targets assert about one request, once core has answered it:
//   - a refused plan is INVALID_ARGUMENT or RESOURCE_EXHAUSTED with a non-empty message;
//   - an accepted one executes to exactly the slow reference's output (tests/testing/
//     reference_gather.h), byte for byte, or to the reference's bad-index error, or (strings
//     only) to RESOURCE_EXHAUSTED when the reference's strings really exceed the cap.
// A failed check prints what differed and calls abort(), which libFuzzer reports as a crash.
// Thread-safety: pure functions.

#ifndef TENSORCOMPUTE_TESTS_FUZZ_FUZZ_CHECK_H_
#define TENSORCOMPUTE_TESTS_FUZZ_FUZZ_CHECK_H_

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#include "core/gather_plan.h"
#include "core/shape.h"
#include "core/tensor.h"
#include "tests/testing/reference_gather.h"

namespace tensorcompute::fuzz {

// Outputs with more elements than this are executed (under the sanitizers) but not compared:
// the reference works one element at a time and would make such inputs slow.
inline constexpr int64_t kMaxReferenceElements = int64_t{1} << 16;

// TC_FUZZ_VERBOSE=1 in the environment prints every request's outcome (to check seeds).
inline bool Verbose() {
  static const bool verbose = std::getenv("TC_FUZZ_VERBOSE") != nullptr;
  return verbose;
}

[[noreturn]] inline void Fail(const std::string& what) {
  std::fprintf(stderr, "FUZZ CHECK FAILED: %s\n", what.c_str());
  std::abort();
}

inline void Check(bool ok, const std::string& what) {
  if (!ok) Fail(what);
}

// A refused request: the documented codes, and a message to show the user.
inline void CheckRefusal(const absl::Status& status, const char* stage) {
  if (Verbose()) std::fprintf(stderr, "%s: %s\n", stage, status.ToString().c_str());
  Check(!status.ok(), std::string(stage) + ": expected an error");
  Check(!status.message().empty(), std::string(stage) + ": empty error message");
  Check(status.code() == absl::StatusCode::kInvalidArgument ||
            status.code() == absl::StatusCode::kResourceExhausted,
        std::string(stage) + ": unexpected code in " + status.ToString());
}

// Facts of an accepted plan that hold whatever the request was.
inline void CheckPlan(const core::GatherPlan& plan, const core::TensorView& params,
                      int64_t batch_dims) {
  const std::optional<int64_t> n = core::CheckedNumElements(plan.output_shape);
  Check(n.has_value() && *n == plan.output_elements, "plan: output_elements != product(shape)");
  Check(plan.dtype == params.dtype, "plan: dtype differs from params'");
  Check(core::IsIndexType(plan.index_dtype), "plan: non-integer index dtype accepted");
  Check(plan.output_bytes >= 0 && plan.output_bytes <= plan.max_output_bytes,
        "plan: output_bytes outside [0, max_output_bytes]");
  Check(plan.op == core::GatherOp::kGather || batch_dims >= 0,
        "plan: GatherNd accepted a negative batch_dims");
}

inline std::string Describe(const core::TensorView& params, const core::TensorView& indices,
                            const std::optional<int64_t>& axis, int64_t batch_dims, bool nd) {
  return std::string(nd ? "GatherNd" : "Gather") + "(params " + testing::TensorDebugString(params) +
         ", indices " + testing::TensorDebugString(indices) +
         ", axis=" + (axis ? std::to_string(*axis) : std::string("unset")) +
         ", batch_dims=" + std::to_string(batch_dims) + ")";
}

// Compares core's answer for an accepted plan (`executed`, and `output` when it is OK) with
// the reference's.
inline void CheckAgainstReference(const core::GatherPlan& plan, const core::TensorView& params,
                                  const core::TensorView& indices,
                                  const std::optional<int64_t>& axis, int64_t batch_dims,
                                  const absl::Status& executed, const core::TensorView& output) {
  const bool nd = plan.op == core::GatherOp::kGatherNd;
  if (!executed.ok()) CheckRefusal(executed, "execute");
  if (plan.output_elements > kMaxReferenceElements) return;
  const absl::StatusOr<core::Tensor> expected =
      nd ? testing::ReferenceGatherNd(params, indices, batch_dims)
         : testing::ReferenceGather(params, indices, axis, batch_dims);
  // Messages are built only on failure: formatting tensors costs more than the gather.
  auto request = [&] { return Describe(params, indices, axis, batch_dims, nd); };
  if (Verbose()) {
    std::fprintf(
        stderr, "%s -> %s\n", request().c_str(),
        executed.ok() ? testing::TensorDebugString(output).c_str() : executed.ToString().c_str());
  }
  if (executed.code() == absl::StatusCode::kResourceExhausted) {
    // Only a string output can outgrow a plan that fit; the reference must agree that it did.
    if (plan.dtype != core::DataType::kString)
      Fail("RESOURCE_EXHAUSTED after planning: " + request());
    if (!expected.ok()) {
      Fail("core: output too large; the reference fails with " + expected.status().ToString() +
           " for " + request());
    }
    int64_t bytes = 0;
    for (const std::string& s : expected->strings()) {
      bytes += static_cast<int64_t>(s.size()) + core::kStringElementOverhead;
    }
    if (bytes <= plan.max_output_bytes) {
      Fail("core: " + executed.ToString() + " but the output is only " + std::to_string(bytes) +
           " bytes, for " + request());
    }
    return;
  }
  if (executed.ok()) {
    if (!expected.ok()) {
      Fail("core succeeded; the reference fails with " + expected.status().ToString() + " for " +
           request());
    }
    if (!core::IdenticalTensors(output, expected->view())) {
      Fail("core gives " + testing::TensorDebugString(output) + "\nthe reference gives " +
           testing::TensorDebugString(expected->view()) + "\nfor " + request());
    }
    return;
  }
  const ::testing::AssertionResult agree =
      testing::AgreesWithReference(absl::StatusOr<core::Tensor>(executed), expected);
  if (!agree) Fail(std::string(agree.message()) + "\nfor " + request());
}

}  // namespace tensorcompute::fuzz

#endif  // TENSORCOMPUTE_TESTS_FUZZ_FUZZ_CHECK_H_
