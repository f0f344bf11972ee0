// core_gather_fuzzer: bytes -> one Gather or GatherNd request -> core's public API.
//
// The input is read with FuzzedDataProvider, integers only (so every call takes its bytes from
// the end of the input and tests/fuzz/make_seeds.py can write seeds that mean something):
//   nd?, dtype (all 16, plus unspecified and 99), index dtype (int32/int64, sometimes any),
//   params rank 0..6 and dims, indices rank 0..6 and dims (mostly 0..5; sometimes 6..300,
//   2^16..2^62, int64 max, negative), axis, batch_dims (in or near range, int64 min/max,
//   anything; axis sometimes unset), a corruption of the data size (one byte or one string
//   short or long), the string length scale, the execution path, then one index value per
//   index element (mostly in range, sometimes just out, the type's extremes or anything).
// Params' values are a fixed pattern, not input: only their shape matters to the operators.
// Tensors are built only when small; larger declared shapes get a short buffer, so validation
// must refuse them. Outputs are capped at 1 MiB by the plan (larger ones must be refused).
// Checks: tests/fuzz/fuzz_check.h.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include <fuzzer/FuzzedDataProvider.h>

#include "core/dtype.h"
#include "core/gather.h"
#include "core/gather_plan.h"
#include "core/shape.h"
#include "core/tensor.h"
#include "core/thread_pool.h"
#include "tests/fuzz/fuzz_check.h"

namespace tensorcompute::fuzz {
namespace {

using core::DataType;

constexpr int64_t kMaxBuiltElements = int64_t{1} << 16;  // larger tensors are not built
constexpr int64_t kMaxOutputBytes = int64_t{1} << 20;
constexpr int64_t kInt64Min = std::numeric_limits<int64_t>::min();
constexpr int64_t kInt64Max = std::numeric_limits<int64_t>::max();

constexpr int64_t kBigDims[] = {int64_t{1} << 16,
                                int64_t{1} << 20,
                                int64_t{1} << 31,
                                (int64_t{1} << 31) + 1,
                                int64_t{1} << 32,
                                int64_t{1} << 40,
                                int64_t{1} << 62,
                                kInt64Max,
                                -1,
                                kInt64Min};
constexpr int64_t kStringLengths[] = {4, 16, 200, 70000};

int64_t ConsumeDim(FuzzedDataProvider& in) {
  switch (in.ConsumeIntegralInRange<int>(0, 15)) {
    case 13:
      return kBigDims[in.ConsumeIntegralInRange<int>(0, std::size(kBigDims) - 1)];
    case 14:
      return in.ConsumeIntegral<int64_t>();
    case 15:
      return in.ConsumeIntegralInRange<int64_t>(6, 300);
    default:
      return in.ConsumeIntegralInRange<int64_t>(0, 5);
  }
}

core::Shape ConsumeShape(FuzzedDataProvider& in) {
  core::Shape shape(in.ConsumeIntegralInRange<int>(0, 6));
  for (int64_t& d : shape) d = ConsumeDim(in);
  return shape;
}

// An axis or batch_dims for a tensor of rank `rank`: mostly in [-rank-1, rank], sometimes the
// int64 extremes or anything; `unset` is returned for selector 15.
std::optional<int64_t> ConsumeArg(FuzzedDataProvider& in, int64_t rank,
                                  std::optional<int64_t> unset) {
  switch (in.ConsumeIntegralInRange<int>(0, 15)) {
    case 12:
      return kInt64Min;
    case 13:
      return kInt64Max;
    case 14:
      return in.ConsumeIntegral<int64_t>();
    case 15:
      return unset;
    default:
      return in.ConsumeIntegralInRange<int64_t>(-rank - 1, rank);
  }
}

// Element count of a shape when it is valid and small enough to build, else nullopt.
std::optional<int64_t> BuildableElements(const core::Shape& shape) {
  for (int64_t d : shape) {
    if (d < 0) return std::nullopt;
  }
  const std::optional<int64_t> n = core::CheckedNumElements(shape);
  if (!n || *n > kMaxBuiltElements) return std::nullopt;
  return n;
}

// Backing storage of one fuzzed TensorView.
struct Storage {
  std::vector<uint8_t> bytes;
  std::vector<std::string> strings;
  std::vector<const std::string*> string_ptrs;

  core::TensorView View(DataType dtype, const core::Shape& shape) {
    string_ptrs.clear();
    for (const std::string& s : strings) string_ptrs.push_back(&s);
    return core::TensorView{dtype, shape, bytes, string_ptrs};
  }
};

uint8_t PatternByte(uint64_t k) { return static_cast<uint8_t>((k * 0x9E3779B97F4A7C15ULL) >> 56); }

// Fills `storage` for `n` elements of `dtype` (n unset: a short buffer for a shape too large to
// build). `corrupt` makes the size one byte (or one string) short or long.
void FillParams(Storage& storage, DataType dtype, std::optional<int64_t> n, int corrupt,
                int64_t max_string_length) {
  const bool is_string = dtype == DataType::kString;
  const int64_t count = n ? *n : 3;
  const size_t size = core::DataTypeFromInt(static_cast<int32_t>(dtype)) && !is_string
                          ? core::ElementSize(dtype)
                          : 1;
  if (is_string) {
    // At most about 1 MiB of characters in all.
    max_string_length =
        std::min(max_string_length, (int64_t{1} << 20) / std::max<int64_t>(count, 1));
    for (int64_t i = 0; i < count + (corrupt == 1) - (corrupt == 0 && count > 0); ++i) {
      const size_t len = static_cast<size_t>((i * 7919) % (max_string_length + 1));
      storage.strings.emplace_back(len, static_cast<char>('a' + i % 26));
      if (len > 0) storage.strings.back()[0] = static_cast<char>(PatternByte(i));
    }
    if (corrupt == 2) storage.bytes.push_back(1);  // a string tensor with data
    return;
  }
  int64_t bytes = count * static_cast<int64_t>(size);
  if (corrupt == 0 && bytes > 0) --bytes;
  if (corrupt == 1) ++bytes;
  storage.bytes.resize(bytes);
  for (int64_t k = 0; k < bytes; ++k) {
    storage.bytes[k] = dtype == DataType::kBool ? PatternByte(k) & 1 : PatternByte(k);
  }
  if (corrupt == 2) storage.strings.emplace_back("x");  // a numeric tensor with strings
}

void WriteIndex(std::vector<uint8_t>& bytes, DataType dtype, int64_t position, int64_t value) {
  if (dtype == DataType::kInt32) {
    const auto v = static_cast<int32_t>(value);
    std::memcpy(bytes.data() + position * 4, &v, 4);
  } else {
    std::memcpy(bytes.data() + position * 8, &value, 8);
  }
}

// The size of the params dimension that index value `position` addresses if the request is
// valid (1 when it is not, so that the values drawn are still plausible).
int64_t IndexedDim(bool nd, const core::Shape& params, const core::Shape& indices,
                   std::optional<int64_t> axis, int64_t batch_dims, int64_t position) {
  const auto rank_p = static_cast<int64_t>(params.size());
  const auto rank_i = static_cast<int64_t>(indices.size());
  int64_t dim = -1;
  if (!nd) {
    int64_t b = batch_dims < 0 && batch_dims > kInt64Min ? batch_dims + rank_i : batch_dims;
    int64_t a = axis.value_or(b);
    if (a < 0 && a > kInt64Min) a += rank_p;
    if (a >= 0 && a < rank_p) dim = params[a];
  } else if (rank_i > 0 && indices.back() > 0 && batch_dims >= 0 && batch_dims < rank_p) {
    const int64_t d = batch_dims + position % indices.back();
    if (d < rank_p) dim = params[d];
  }
  return dim < 0 ? 1 : dim;
}

void FillIndices(FuzzedDataProvider& in, Storage& storage, DataType dtype, std::optional<int64_t> n,
                 int corrupt, bool nd, const core::Shape& params, const core::Shape& indices,
                 std::optional<int64_t> axis, int64_t batch_dims) {
  if (!core::IsIndexType(dtype)) {
    FillParams(storage, dtype, n, corrupt, 4);  // a pattern of the wrong type
    return;
  }
  const int64_t size = dtype == DataType::kInt32 ? 4 : 8;
  const int64_t count = n ? *n : 3;
  storage.bytes.assign(count * size, 0);
  const int64_t lo = dtype == DataType::kInt32 ? std::numeric_limits<int32_t>::min() : kInt64Min;
  const int64_t hi = dtype == DataType::kInt32 ? std::numeric_limits<int32_t>::max() : kInt64Max;
  for (int64_t p = 0; p < count; ++p) {
    const int64_t d = IndexedDim(nd, params, indices, axis, batch_dims, p);
    int64_t v = 0;
    switch (in.ConsumeIntegralInRange<int>(0, 15)) {
      case 12:
        v = d;
        break;
      case 13:
        v = -d - 1;
        break;
      case 14:
        v = in.ConsumeBool() ? lo : hi;
        break;
      case 15:
        v = in.ConsumeIntegral<int64_t>();
        break;
      default:
        v = d > 0 ? in.ConsumeIntegralInRange<int64_t>(-d, d - 1) : 0;
        break;
    }
    WriteIndex(storage.bytes, dtype, p, v);
  }
  if (corrupt == 0 && !storage.bytes.empty()) storage.bytes.pop_back();
  if (corrupt == 1) storage.bytes.push_back(0);
  if (corrupt == 2) storage.strings.emplace_back("x");
}

DataType ConsumeDataType(FuzzedDataProvider& in) {
  const int sel = in.ConsumeIntegralInRange<int>(0, 17);
  if (sel < 16) return core::kAllDataTypes[sel];
  return sel == 16 ? DataType::kUnspecified : static_cast<DataType>(99);
}

void RunOne(FuzzedDataProvider& in) {
  const bool nd = in.ConsumeBool();
  const DataType dtype = ConsumeDataType(in);
  const int index_sel = in.ConsumeIntegralInRange<int>(0, 7);
  const DataType index_dtype = index_sel < 4 ? DataType::kInt32
                               : index_sel < 7
                                   ? DataType::kInt64
                                   : core::kAllDataTypes[in.ConsumeIntegralInRange<int>(0, 15)];
  const core::Shape params_shape = ConsumeShape(in);
  const core::Shape indices_shape = ConsumeShape(in);
  const std::optional<int64_t> axis =
      ConsumeArg(in, static_cast<int64_t>(params_shape.size()), std::nullopt);
  const int64_t batch_dims = *ConsumeArg(in, static_cast<int64_t>(indices_shape.size()), 0);
  // 0/1: params one byte (string) short/long, 2: params carry the wrong field;
  // 3/4/5: the same for indices; otherwise exact.
  const int corrupt = in.ConsumeIntegralInRange<int>(0, 15);
  const int64_t max_string_length = kStringLengths[in.ConsumeIntegralInRange<int>(0, 3)];
  const int exec_sel = in.ConsumeIntegralInRange<int>(0, 7);

  Storage params_storage, indices_storage;
  FillParams(params_storage, dtype, BuildableElements(params_shape), corrupt < 3 ? corrupt : -1,
             max_string_length);
  FillIndices(in, indices_storage, index_dtype, BuildableElements(indices_shape),
              corrupt >= 3 && corrupt < 6 ? corrupt - 3 : -1, nd, params_shape, indices_shape, axis,
              batch_dims);
  const core::TensorView params = params_storage.View(dtype, params_shape);
  const core::TensorView indices = indices_storage.View(index_dtype, indices_shape);

  // A pool of its own per input: a shared one would free a task's memory after the input
  // returned, and libFuzzer would run a full leak check after every such input (half the time).
  std::optional<core::ThreadPool> pool;
  core::GatherOptions options;
  options.plan.max_output_bytes = kMaxOutputBytes;
  if (exec_sel & 1) {
    options.execute.pool = &pool.emplace(2);
    options.execute.min_parallel_bytes = 1;
  }
  if (exec_sel & 2) options.execute.streaming_store_bytes = 64;

  absl::StatusOr<core::GatherPlan> plan =
      nd ? core::PlanGatherNd(params, indices, batch_dims, options.plan)
         : core::PlanGather(params, indices, axis, batch_dims, options.plan);
  if (exec_sel & 4) {  // the convenience entry points must agree with plan + execute
    absl::StatusOr<core::Tensor> t = nd ? core::GatherNd(params, indices, batch_dims, options)
                                        : core::Gather(params, indices, axis, batch_dims, options);
    if (!plan.ok()) {
      CheckRefusal(t.status(), "Gather/GatherNd");
      Check(t.status() == plan.status(),
            "Gather/GatherNd and Plan disagree: " + t.status().ToString() + " vs " +
                plan.status().ToString());
      return;
    }
    CheckPlan(*plan, params, batch_dims);
    CheckAgainstReference(*plan, params, indices, axis, batch_dims, t.status(),
                          t.ok() ? t->view() : core::TensorView{});
    return;
  }
  if (!plan.ok()) return CheckRefusal(plan.status(), "plan");
  CheckPlan(*plan, params, batch_dims);
  absl::StatusOr<core::Tensor> output = core::Tensor::Allocate(plan->dtype, plan->output_shape);
  Check(output.ok(), "Allocate failed for a planned output: " + output.status().ToString());
  const absl::Status executed =
      core::ExecuteGather(*plan, params, indices, output->mutable_view(), options.execute);
  CheckAgainstReference(*plan, params, indices, axis, batch_dims, executed, output->view());
}

}  // namespace
}  // namespace tensorcompute::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  FuzzedDataProvider in(data, size);
  tensorcompute::fuzz::RunOne(in);
  return 0;
}
