#include "core/cuda/gather_batch.h"

#include <cstring>

namespace tensorcompute::cuda {
namespace {

uint64_t ParamsBytes(const core::GatherPlan& p) {
  return static_cast<uint64_t>(p.batch) * p.outer * p.rows * p.slice_bytes();
}

uint64_t IndicesBytes(const core::GatherPlan& p) {
  return static_cast<uint64_t>(p.num_index_values()) * core::ElementSize(p.index_dtype);
}

}  // namespace

BatchLayout PlanBatch(absl::Span<const core::GatherPlan* const> plans,
                      absl::Span<const void* const> resident_params) {
  BatchLayout layout;
  const size_t n = plans.size();
  layout.descs.resize(n);
  for (const core::GatherPlan* p : plans) {
    layout.dims.insert(layout.dims.end(), p->index_dims.begin(), p->index_dims.end());
  }
  layout.descs_offset = 0;
  layout.dims_offset = AlignUp(n * sizeof(GatherDesc));
  uint64_t in = AlignUp(layout.dims_offset + layout.dims.size() * sizeof(int64_t));
  layout.flags_offset = 0;
  uint64_t out = AlignUp(n * sizeof(uint64_t));
  uint64_t units = 0;
  uint32_t dims_at = 0;
  constexpr uint64_t k32 = uint64_t{1} << 31;
  for (size_t i = 0; i < n; ++i) {
    const core::GatherPlan& p = *plans[i];
    GatherDesc& d = layout.descs[i];
    const void* resident = resident_params.empty() ? nullptr : resident_params[i];
    d.params_address = reinterpret_cast<uint64_t>(resident);
    d.params_offset = in;
    if (resident == nullptr) in = AlignUp(in + ParamsBytes(p));
    d.indices_offset = in;
    in = AlignUp(in + IndicesBytes(p));
    d.output_offset = out;
    out = AlignUp(out + static_cast<uint64_t>(p.output_bytes));
    d.outer = p.outer;
    d.num_indices = p.num_indices;
    d.depth = p.depth;
    d.rows = p.rows;
    d.slice_bytes = p.slice_bytes();
    d.dims_offset = dims_at;
    dims_at += static_cast<uint32_t>(p.depth);
    d.vector_bytes = VectorBytes(d.slice_bytes);
    d.chunks_per_row = static_cast<uint32_t>(d.slice_bytes / d.vector_bytes);
    d.index_bytes = static_cast<uint32_t>(core::ElementSize(p.index_dtype));
    layout.uniform_vector_bytes =
        i == 0 || layout.uniform_vector_bytes == d.vector_bytes ? d.vector_bytes : 0;
    d.unit_begin = units;
    d.units = static_cast<uint64_t>(p.output_rows()) * d.chunks_per_row;
    units += d.units;
    // The 32-bit path also forms block / tuple numbers (< output rows) and multiplies
    // r * chunks back: all below the unit count, which is checked for the batch below.
    if (static_cast<uint64_t>(p.output_rows()) >= k32 || d.slice_bytes >= int64_t{k32}) {
      layout.fits_32bit = false;
    }
  }
  if (units >= k32) layout.fits_32bit = false;
  layout.input_bytes = in;
  layout.output_bytes = out;
  layout.total_units = units;
  return layout;
}

std::vector<uint8_t> PackTables(const BatchLayout& layout) {
  std::vector<uint8_t> tables(layout.dims_offset + layout.dims.size() * sizeof(int64_t), 0);
  if (!layout.descs.empty()) {
    std::memcpy(tables.data() + layout.descs_offset, layout.descs.data(),
                layout.descs.size() * sizeof(GatherDesc));
  }
  if (!layout.dims.empty()) {
    std::memcpy(tables.data() + layout.dims_offset, layout.dims.data(),
                layout.dims.size() * sizeof(int64_t));
  }
  return tables;
}

std::vector<Piece> InputPieces(const BatchLayout& layout, const std::vector<uint8_t>& tables,
                               absl::Span<const core::TensorView* const> params,
                               absl::Span<const core::TensorView* const> indices) {
  std::vector<Piece> pieces;
  pieces.push_back({tables.data(), tables.size(), 0});
  for (size_t i = 0; i < layout.descs.size(); ++i) {
    if (layout.descs[i].params_address == 0 && !params[i]->data.empty()) {
      pieces.push_back(
          {params[i]->data.data(), params[i]->data.size(), layout.descs[i].params_offset});
    }
    if (!indices[i]->data.empty()) {
      pieces.push_back(
          {indices[i]->data.data(), indices[i]->data.size(), layout.descs[i].indices_offset});
    }
  }
  return pieces;
}

void PackInput(const BatchLayout& layout, absl::Span<const core::TensorView* const> params,
               absl::Span<const core::TensorView* const> indices, uint8_t* dst) {
  const std::vector<uint8_t> tables = PackTables(layout);
  for (const Piece& piece : InputPieces(layout, tables, params, indices)) {
    std::memcpy(dst + piece.offset, piece.src, piece.bytes);
  }
}

void ResetFlags(const BatchLayout& layout, uint8_t* output_buffer) {
  for (size_t i = 0; i < layout.descs.size(); ++i) {
    std::memcpy(output_buffer + layout.flags_offset + i * sizeof(uint64_t), &kNoBadIndex,
                sizeof(uint64_t));
  }
}

absl::Status UnpackTask(const BatchLayout& layout, int i, const core::GatherPlan& plan,
                        const core::TensorView& indices, const uint8_t* output_buffer,
                        uint8_t* out) {
  uint64_t flag;
  std::memcpy(&flag, output_buffer + layout.flags_offset + i * sizeof(uint64_t), sizeof(flag));
  if (flag != kNoBadIndex) return core::BadIndexError(plan, indices, static_cast<int64_t>(flag));
  if (plan.output_bytes > 0) {
    std::memcpy(out, output_buffer + layout.descs[i].output_offset, plan.output_bytes);
  }
  return absl::OkStatus();
}

void RunBatchOnHost(const BatchLayout& layout, const uint8_t* input, uint8_t* output) {
  const auto* descs = reinterpret_cast<const GatherDesc*>(input + layout.descs_offset);
  const auto* dims = reinterpret_cast<const int64_t*>(input + layout.dims_offset);
  auto* flags = reinterpret_cast<unsigned long long*>(output + layout.flags_offset);
  const int n = static_cast<int>(layout.descs.size());
  for (uint64_t u = 0; u < layout.total_units; ++u) {
    const int t = FindTask(descs, n, u);
    if (layout.fits_32bit) {
      GatherUnit<uint32_t>(descs[t], dims, static_cast<uint32_t>(u - descs[t].unit_begin), input,
                           output, flags + t);
    } else {
      GatherUnit<uint64_t>(descs[t], dims, u - descs[t].unit_begin, input, output, flags + t);
    }
  }
}

}  // namespace tensorcompute::cuda
