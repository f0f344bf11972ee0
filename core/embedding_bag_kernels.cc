#include "core/embedding_bag_kernels.h"

#include <type_traits>
#include <vector>

#include "core/compact_row.h"
#include "core/embedding_bag_simd.h"
#include "core/index_math.h"

namespace tensorcompute::core {
namespace {

// Reduces bags [begin, end) with the accumulator row in memory. `Row` reads a stored row's
// elements as Acc (compact_row.h: PlainRow<Elem>, Rowwise8Row); `Out` stores an output element
// (and loads a weight of the params' logical dtype). The element loops have a constant
// stride, so that the compiler vectorizes them across the row; each element's own sequence of
// operations is the one of embedding_bag_math.h, whatever the vector width.
template <typename Row, typename Out, Reduce kReduce>
int64_t ReduceGeneric(const EmbeddingBagPlan& plan, const BagViews& v, int64_t begin, int64_t end) {
  using Acc = typename Row::Acc;
  static_assert(std::is_same_v<Acc, typename Out::Acc>);
  constexpr int64_t kOut = Out::kSize;
  const int64_t dim = plan.dim;
  const int64_t row_bytes = plan.row_bytes;
  const int64_t out_row_bytes = dim * kOut;
  const int64_t distance = RowPrefetchDistance(row_bytes);
  const int64_t range_last = BagRange(plan, v, end - 1).last;  // the chunk's last position + 1
  std::vector<Acc> acc_buffer(static_cast<size_t>(dim));
  Acc* const acc = acc_buffer.data();
  for (int64_t b = begin; b < end; ++b) {
    const BagSpan span = BagRange(plan, v, b);
    const bool single = kReduce == Reduce::kPlain && span.last - span.first == 1;
    if (!single) std::fill(acc, acc + dim, Acc(0));
    BagStats<Acc> stats;
    bool written = false;
    for (int64_t i = span.first; i < span.last; ++i) {
      int64_t row;
      if (distance > 0 && i + distance < range_last) {
        int64_t ahead;  // a bad value is reported when its turn comes
        if (NormalizeIndex(LoadIndex(v.indices, plan.index_dtype, i + distance), plan.rows,
                           &ahead)) {
          PrefetchRow(v.params + ahead * row_bytes, row_bytes);
        }
      }
      if (!NormalizeIndex(LoadIndex(v.indices, plan.index_dtype, i), plan.rows, &row)) return i;
      if (IsPaddingRow(row, plan.padding_row)) continue;
      const Row src(v.params + row * row_bytes, dim);
      if constexpr (kReduce == Reduce::kWeighted) {
        const Acc w = plan.weights_dtype == DataType::kFloat32
                          ? static_cast<Acc>(NativeElem<float>::Load(v.weights + i * 4))
                          : Out::Load(v.weights + i * kOut);
        AddWeight(stats, w);
        for (int64_t d = 0; d < dim; ++d) acc[d] = AccumulateWeighted(acc[d], w, src[d]);
      } else if constexpr (kReduce == Reduce::kMax) {
        const bool first_row = stats.count == 0;
        ++stats.count;
        for (int64_t d = 0; d < dim; ++d) acc[d] = AccumulateMax(acc[d], src[d], first_row);
      } else if (single) {
        uint8_t* out = v.output + b * out_row_bytes;
        if (plan.unpooled) {
          // A gather (PlanUnpooledGather): the row as read, -0 and NaN's bits included.
          for (int64_t d = 0; d < dim; ++d) Out::Store(out + d * kOut, src[d]);
        } else {
          // A bag of one row, unweighted: every mode's result is 0 + x (MEAN and SQRTN divide
          // by 1, which is exact), written in the same pass as the row is read.
          for (int64_t d = 0; d < dim; ++d) {
            Out::Store(out + d * kOut, CanonicalNan(AccumulateUnweighted(Acc(0), src[d])));
          }
        }
        written = true;
      } else {
        ++stats.count;
        for (int64_t d = 0; d < dim; ++d) acc[d] = AccumulateUnweighted(acc[d], src[d]);
      }
    }
    // BagResult (embedding_bag_math.h), with the divisor computed once for the bag.
    uint8_t* out = v.output + b * out_row_bytes;
    if (written) {
      continue;
    } else if (stats.count == 0) {
      for (int64_t d = 0; d < dim; ++d) Out::Store(out + d * kOut, Acc(0));
    } else if (ModeDivides(plan.mode)) {
      const Acc divisor = BagDivisor(plan.mode, kReduce == Reduce::kWeighted, stats);
      for (int64_t d = 0; d < dim; ++d) {
        Out::Store(out + d * kOut, CanonicalNan(acc[d] / divisor));
      }
    } else {
      for (int64_t d = 0; d < dim; ++d) Out::Store(out + d * kOut, CanonicalNan(acc[d]));
    }
  }
  return -1;
}

template <typename Row, typename Out>
int64_t ReduceGenericFor(const EmbeddingBagPlan& plan, const BagViews& v, int64_t begin,
                         int64_t end) {
  switch (ReduceOf(plan)) {
    case Reduce::kWeighted:
      return ReduceGeneric<Row, Out, Reduce::kWeighted>(plan, v, begin, end);
    case Reduce::kMax:
      return ReduceGeneric<Row, Out, Reduce::kMax>(plan, v, begin, end);
    case Reduce::kPlain:
      break;
  }
  return ReduceGeneric<Row, Out, Reduce::kPlain>(plan, v, begin, end);
}

template <typename Elem>
int64_t ReducePlain(const EmbeddingBagPlan& plan, const BagViews& v, int64_t begin, int64_t end) {
  return ReduceGenericFor<PlainRow<Elem>, Elem>(plan, v, begin, end);
}

}  // namespace

int64_t ReduceBags(const EmbeddingBagPlan& plan, const BagViews& views, int64_t begin, int64_t end,
                   bool streaming, BagKernel kernel) {
  if (begin >= end) return -1;
  if (kernel == BagKernel::kBest && BagVectorKernelServes(plan)) {
    return ReduceBagsVector(plan, views, begin, end, streaming);
  }
  switch (plan.encoding) {
    case TableEncoding::kFloat16:
      return ReduceGenericFor<PlainRow<Float16Elem>, NativeElem<float>>(plan, views, begin, end);
    case TableEncoding::kRowwise8:
      return ReduceGenericFor<Rowwise8Row, NativeElem<float>>(plan, views, begin, end);
    case TableEncoding::kNone:
      break;
  }
  switch (plan.dtype) {
    case DataType::kFloat16:
      return ReducePlain<Float16Elem>(plan, views, begin, end);
    case DataType::kBfloat16:
      return ReducePlain<BFloat16Elem>(plan, views, begin, end);
    case DataType::kFloat32:
      return ReducePlain<NativeElem<float>>(plan, views, begin, end);
    default:
      return ReducePlain<NativeElem<double>>(plan, views, begin, end);
  }
}

}  // namespace tensorcompute::core
