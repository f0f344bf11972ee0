#include "core/embedding_bag_kernels.h"

#include <vector>

#include "core/embedding_bag_simd.h"
#include "core/index_math.h"

namespace tensorcompute::core {
namespace {

// Reduces bags [begin, end) with the accumulator row in memory. The element loops have a
// constant stride, so that the compiler vectorizes them across the row; each element's own
// sequence of operations is the one of embedding_bag_math.h, whatever the vector width.
template <typename Elem, Reduce kReduce>
int64_t ReduceGeneric(const EmbeddingBagPlan& plan, const BagViews& v, int64_t begin, int64_t end) {
  using Acc = typename Elem::Acc;
  constexpr int64_t kSize = Elem::kSize;
  const int64_t dim = plan.dim;
  const int64_t row_bytes = dim * kSize;
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
      const uint8_t* src = v.params + row * row_bytes;
      if constexpr (kReduce == Reduce::kWeighted) {
        const Acc w = plan.weights_dtype == DataType::kFloat32
                          ? static_cast<Acc>(NativeElem<float>::Load(v.weights + i * 4))
                          : Elem::Load(v.weights + i * kSize);
        AddWeight(stats, w);
        for (int64_t d = 0; d < dim; ++d) {
          acc[d] = AccumulateWeighted(acc[d], w, Elem::Load(src + d * kSize));
        }
      } else if constexpr (kReduce == Reduce::kMax) {
        const bool first_row = stats.count == 0;
        ++stats.count;
        for (int64_t d = 0; d < dim; ++d) {
          acc[d] = AccumulateMax(acc[d], Elem::Load(src + d * kSize), first_row);
        }
      } else if (single) {
        // A bag of one row, unweighted: every mode's result is 0 + x (MEAN and SQRTN divide by
        // 1, which is exact), written in the same pass as the row is read.
        uint8_t* out = v.output + b * row_bytes;
        for (int64_t d = 0; d < dim; ++d) {
          Elem::Store(out + d * kSize,
                      CanonicalNan(AccumulateUnweighted(Acc(0), Elem::Load(src + d * kSize))));
        }
        written = true;
      } else {
        ++stats.count;
        for (int64_t d = 0; d < dim; ++d) {
          acc[d] = AccumulateUnweighted(acc[d], Elem::Load(src + d * kSize));
        }
      }
    }
    // BagResult (embedding_bag_math.h), with the divisor computed once for the bag.
    uint8_t* out = v.output + b * row_bytes;
    if (written) {
      continue;
    } else if (stats.count == 0) {
      for (int64_t d = 0; d < dim; ++d) Elem::Store(out + d * kSize, Acc(0));
    } else if (ModeDivides(plan.mode)) {
      const Acc divisor = BagDivisor(plan.mode, kReduce == Reduce::kWeighted, stats);
      for (int64_t d = 0; d < dim; ++d) {
        Elem::Store(out + d * kSize, CanonicalNan(acc[d] / divisor));
      }
    } else {
      for (int64_t d = 0; d < dim; ++d) Elem::Store(out + d * kSize, CanonicalNan(acc[d]));
    }
  }
  return -1;
}

template <typename Elem>
int64_t ReduceGenericFor(const EmbeddingBagPlan& plan, const BagViews& v, int64_t begin,
                         int64_t end) {
  switch (ReduceOf(plan)) {
    case Reduce::kWeighted:
      return ReduceGeneric<Elem, Reduce::kWeighted>(plan, v, begin, end);
    case Reduce::kMax:
      return ReduceGeneric<Elem, Reduce::kMax>(plan, v, begin, end);
    case Reduce::kPlain:
      break;
  }
  return ReduceGeneric<Elem, Reduce::kPlain>(plan, v, begin, end);
}

}  // namespace

int64_t ReduceBags(const EmbeddingBagPlan& plan, const BagViews& views, int64_t begin, int64_t end,
                   bool streaming, BagKernel kernel) {
  if (begin >= end) return -1;
  if (kernel == BagKernel::kBest && BagVectorKernelServes(plan)) {
    return ReduceBagsVector(plan, views, begin, end, streaming);
  }
  switch (plan.dtype) {
    case DataType::kFloat16:
      return ReduceGenericFor<Float16Elem>(plan, views, begin, end);
    case DataType::kBfloat16:
      return ReduceGenericFor<BFloat16Elem>(plan, views, begin, end);
    case DataType::kFloat32:
      return ReduceGenericFor<NativeElem<float>>(plan, views, begin, end);
    default:
      return ReduceGenericFor<NativeElem<double>>(plan, views, begin, end);
  }
}

}  // namespace tensorcompute::core
