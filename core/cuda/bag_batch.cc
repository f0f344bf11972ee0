#include "core/cuda/bag_batch.h"

#include <cstring>

namespace tensorcompute::cuda {
namespace {

uint8_t ElemType(core::DataType dtype) {
  switch (dtype) {
    case core::DataType::kFloat16:
      return kBagFloat16;
    case core::DataType::kBfloat16:
      return kBagBfloat16;
    case core::DataType::kFloat32:
      return kBagFloat32;
    default:
      return kBagFloat64;
  }
}

uint8_t WeightsType(const core::EmbeddingBagPlan& plan) {
  if (!plan.weighted()) return kBagUnweighted;
  return plan.weights_dtype == core::DataType::kFloat32 ? kBagWeightsFloat32
                                                        : kBagWeightsLikeParams;
}

}  // namespace

BagLayout PlanBagBatch(absl::Span<const BagTaskInputs> tasks) {
  BagLayout layout;
  const size_t n = tasks.size();
  layout.descs.resize(n);
  layout.descs_offset = 0;
  uint64_t in = AlignUp(n * sizeof(BagDesc));
  layout.flags_offset = 0;
  uint64_t out = AlignUp(n * sizeof(uint64_t));
  uint64_t units = 0;
  for (size_t i = 0; i < n; ++i) {
    const core::EmbeddingBagPlan& p = *tasks[i].plan;
    BagDesc& d = layout.descs[i];
    std::memset(&d, 0, sizeof(d));
    const uint64_t index_bytes = core::ElementSize(p.index_dtype);
    d.params_address = reinterpret_cast<uint64_t>(tasks[i].resident_params);
    d.params_offset = in;
    if (d.params_address == 0) {
      in = AlignUp(in + static_cast<uint64_t>(p.rows) * p.row_bytes);
    }
    d.indices_offset = in;
    in = AlignUp(in + static_cast<uint64_t>(p.num_indices) * index_bytes);
    d.offsets_offset = in;
    if (!p.fixed_bags()) {
      d.num_offsets = tasks[i].offsets->shape[0];
      d.offset_bytes = static_cast<uint8_t>(core::ElementSize(p.offsets_dtype));
      in = AlignUp(in + static_cast<uint64_t>(d.num_offsets) * d.offset_bytes);
    }
    d.weights_offset = in;
    if (p.weighted()) {
      in = AlignUp(in + static_cast<uint64_t>(p.num_indices) * core::ElementSize(p.weights_dtype));
    }
    d.output_offset = out;
    out = AlignUp(out + static_cast<uint64_t>(p.output_bytes));
    d.rows = p.rows;
    d.dim = p.dim;
    d.num_indices = p.num_indices;
    d.bag_size = p.bag_size;
    d.padding_row = p.padding_row;
    d.elem = ElemType(p.dtype);
    d.mode = static_cast<uint8_t>(p.mode);
    d.index_bytes = static_cast<uint8_t>(index_bytes);
    d.weights = WeightsType(p);
    d.encoding = static_cast<uint8_t>(p.encoding);
    d.unpooled = p.unpooled ? 1 : 0;
    d.chunks_per_bag = BagChunksPerBag(p.dim, p.element_size);
    d.unit_begin = units;
    d.units = static_cast<uint64_t>(p.bags) * d.chunks_per_bag;
    units += d.units;
  }
  layout.input_bytes = in;
  layout.output_bytes = out;
  layout.total_units = units;
  return layout;
}

std::vector<uint8_t> PackBagTables(const BagLayout& layout) {
  std::vector<uint8_t> tables(layout.descs.size() * sizeof(BagDesc));
  if (!layout.descs.empty()) std::memcpy(tables.data(), layout.descs.data(), tables.size());
  return tables;
}

std::vector<Piece> BagInputPieces(const BagLayout& layout, const std::vector<uint8_t>& tables,
                                  absl::Span<const BagTaskInputs> tasks) {
  std::vector<Piece> pieces;
  pieces.push_back({tables.data(), tables.size(), layout.descs_offset});
  auto add = [&pieces](const core::TensorView* view, uint64_t offset) {
    if (view != nullptr && !view->data.empty()) {
      pieces.push_back({view->data.data(), view->data.size(), offset});
    }
  };
  for (size_t i = 0; i < layout.descs.size(); ++i) {
    const BagDesc& d = layout.descs[i];
    if (d.params_address == 0) add(tasks[i].params, d.params_offset);
    add(tasks[i].indices, d.indices_offset);
    add(tasks[i].offsets, d.offsets_offset);
    add(tasks[i].weights, d.weights_offset);
  }
  return pieces;
}

void PackBagInput(const BagLayout& layout, absl::Span<const BagTaskInputs> tasks, uint8_t* dst) {
  const std::vector<uint8_t> tables = PackBagTables(layout);
  for (const Piece& piece : BagInputPieces(layout, tables, tasks)) {
    std::memcpy(dst + piece.offset, piece.src, piece.bytes);
  }
}

void ResetBagFlags(const BagLayout& layout, uint8_t* output_buffer) {
  for (size_t i = 0; i < layout.descs.size(); ++i) {
    std::memcpy(output_buffer + layout.flags_offset + i * sizeof(uint64_t), &kNoBadIndex,
                sizeof(uint64_t));
  }
}

absl::Status BagVerdict(const core::EmbeddingBagPlan& plan, const core::TensorView& indices,
                        uint64_t flag) {
  if (flag == kNoBadIndex) return absl::OkStatus();
  if (flag >= static_cast<uint64_t>(plan.num_indices)) {
    return absl::InternalError("the EmbeddingBag kernel reported an impossible bad-index position");
  }
  return core::EmbeddingBagBadIndexError(plan, indices, static_cast<int64_t>(flag));
}

absl::Status UnpackBagTask(const BagLayout& layout, int i, const BagTaskInputs& task,
                           const uint8_t* output_buffer, uint8_t* out) {
  uint64_t flag;
  std::memcpy(&flag, output_buffer + layout.flags_offset + i * sizeof(uint64_t), sizeof(flag));
  const absl::Status verdict = BagVerdict(*task.plan, *task.indices, flag);
  if (!verdict.ok()) return verdict;
  if (task.plan->output_bytes > 0) {
    std::memcpy(out, output_buffer + layout.descs[i].output_offset, task.plan->output_bytes);
  }
  return absl::OkStatus();
}

void RunBagBatchOnHost(const BagLayout& layout, const uint8_t* input, uint8_t* output) {
  const auto* descs = reinterpret_cast<const BagDesc*>(input + layout.descs_offset);
  auto* flags = reinterpret_cast<unsigned long long*>(output + layout.flags_offset);
  const int n = static_cast<int>(layout.descs.size());
  for (uint64_t u = 0; u < layout.total_units; ++u) {
    const int t = FindTask(descs, n, u);
    BagUnit(descs[t], u - descs[t].unit_begin, input, output, flags + t);
  }
}

}  // namespace tensorcompute::cuda
