// File: core/cuda/bag_unit.h
//
// What the EmbeddingBag kernel (bag_kernel.cu) does for one work unit, as TC_HOST_DEVICE
// functions: compiled into the kernel and, on the host, into RunBagBatchOnHost
// (bag_batch.h), which the CPU tests run over every unit against core::ExecuteEmbeddingBag.
// Only core/ headers of host-device arithmetic (embedding_bag_math.h, half_float.h,
// index_math.h) and work_units.h are included, so nvcc sees no Abseil here.
//
// Work units. A task of `bags` bags of rows of `dim` elements has bags x chunks_per_bag
// units: unit u is chunk c = u % chunks_per_bag of bag b = u / chunks_per_bag, the elements
// [c * kE, min(dim, (c + 1) * kE)) of bag b's output row, kE = BagChunkElements(element size)
// (16 bytes of elements: 8 float16/bfloat16, 4 float32, 2 float64). Rows of 0 elements still
// get one unit per bag, which checks the bag's indices and writes nothing. Consecutive units
// are consecutive 16-byte pieces of an output row and of every row that the bag reads, so a
// warp's accesses are coalesced; on the device a whole, 16-byte-aligned piece is read with one
// vector load.
//
// Loads in flight. A unit takes its bag's positions kBagRowsInFlight at a time: it checks
// the group's index values in order (read while the previous group's rows were loading), loads
// the pieces (and weights) of all the group's rows, then adds them one by one in position
// order. The loads overlap; the arithmetic is the one below, unchanged.
//
// Arithmetic. A unit walks its bag's index positions in order (core::BagBounds) and treats
// each element exactly as the CPU's ExecuteEmbeddingBag does: the same functions of
// core/embedding_bag_math.h (AccumulateWeighted / AccumulateUnweighted / AccumulateMax,
// AddWeight, BagDivisor, CanonicalNan), the same conversions (core::Float16Elem & co.,
// core/half_float.h), in the same order, one rounding to the stored type at the end. Each unit
// keeps its own copy of the bag's statistics (count, weights), which every unit of the bag
// computes alike. A NaN result is stored as the one canonical NaN (core::CanonicalNan, as the
// CPU does), since NaN arithmetic gives different bits on a GPU and on x86. So the output is
// byte-identical to the CPU's, whatever the grid; bag_kernel.cu is compiled without fma
// contraction and with IEEE division and square root so that the device rounds as the host
// does.
//
// Compact tables (BagDesc::encoding, core/compact_row.h): a unit's piece is 4 float32 output
// elements, read from a float16 row or from an 8-bit row-wise row (codes, scale, bias) through
// the CPU's own readers (HalfToFloat; DequantizeRowwise8: a product and a sum, each rounded,
// never fused). An unpooled task (a Gather of axis 0 on such a table) stores each bag's one row
// as read, as the CPU does.
//
// Bad indices: a unit meeting an index value outside [-rows, rows) stops there, writing
// nothing and reading no later row, and lowers its task's flag (work_units.h) to that flat
// position of indices. Padding rows are skipped (not read, not counted). Every
// unit of a bag meets the bag's first bad position first, and every index belongs to exactly
// one bag, so the flag ends at the task's lowest bad position: the one the CPU reports.
//
// Thread-safety: pure functions; the flag update is atomic on the device.

#ifndef TENSORCOMPUTE_CORE_CUDA_BAG_UNIT_H_
#define TENSORCOMPUTE_CORE_CUDA_BAG_UNIT_H_

#include <cstdint>
#include <cstring>

#include "core/compact_row.h"
#include "core/cuda/work_units.h"
#include "core/embedding_bag_math.h"
#include "core/index_math.h"

namespace tensorcompute::cuda {

// The stored type of a task's output (and of its params when they are not compact).
enum BagElemType : uint8_t {
  kBagFloat16 = 0,
  kBagBfloat16 = 1,
  kBagFloat32 = 2,
  kBagFloat64 = 3,
};

// The stored type of a task's per-sample weights.
enum BagWeights : uint8_t {
  kBagUnweighted = 0,
  kBagWeightsFloat32 = 1,
  kBagWeightsLikeParams = 2,
};

// One task as the kernel sees it. Offsets are bytes into the batch's input / output buffers.
// params_address: the device address of a resident table's copy on the batch's device (the
// input buffer then has no params region for the task, and params_offset is unused), or 0.
struct BagDesc {
  uint64_t params_offset;
  uint64_t params_address;
  uint64_t indices_offset;
  uint64_t offsets_offset;  // unused for fixed bags
  uint64_t weights_offset;  // unused without weights
  uint64_t output_offset;
  uint64_t unit_begin;      // first work unit of this task in the batch
  uint64_t units;           // bags x chunks_per_bag
  uint64_t chunks_per_bag;  // BagChunksPerBag(dim, element size)
  int64_t rows;             // EmbeddingBagPlan fields
  int64_t dim;
  int64_t num_indices;
  int64_t num_offsets;   // entries of offsets; 0 for fixed bags
  int64_t bag_size;      // fixed bags: indices per bag
  int64_t padding_row;   // -1: none
  uint8_t elem;          // BagElemType
  uint8_t mode;          // core::EmbeddingBagMode
  uint8_t index_bytes;   // 4 (int32) or 8 (int64)
  uint8_t offset_bytes;  // 4 or 8; 0: fixed bags
  uint8_t weights;       // BagWeights
  uint8_t encoding;      // core::TableEncoding of params (elem is then the output's, float32)
  uint8_t unpooled;      // 1: bags of one row copied as read (core::PlanUnpooledGather)
  uint8_t reserved[1];
};
// The host writes the table that the device reads: one layout for both compilers.
static_assert(sizeof(BagDesc) == 128, "BagDesc must have no padding surprises");

// Rows of a bag whose pieces one unit loads before adding them (so that this many loads are in
// flight per thread, not one); the order of the additions does not depend on it.
inline constexpr int kBagRowsInFlight = 4;

// Elements of one unit: 16 bytes' worth. REQUIRES: element_size is 2, 4 or 8.
TC_HOST_DEVICE inline int64_t BagChunkElements(int64_t element_size) { return 16 / element_size; }

// Units per bag: ceil(dim / BagChunkElements), at least 1 (a bag's indices are checked even
// when its rows are empty).
TC_HOST_DEVICE inline uint64_t BagChunksPerBag(int64_t dim, int64_t element_size) {
  const int64_t e = BagChunkElements(element_size);
  const int64_t chunks = (dim + e - 1) / e;
  return chunks > 0 ? static_cast<uint64_t>(chunks) : 1;
}

// --- implementation details below ---

namespace bag_internal {

template <int kSize>
struct Bits;
template <>
struct Bits<2> {
  using T = uint16_t;
};
template <>
struct Bits<4> {
  using T = uint32_t;
};
template <>
struct Bits<8> {
  using T = uint64_t;
};

// Value i of an int32 (bytes 4) or int64 (bytes 8) array. Regions are aligned on the device,
// so a plain load there; any address on the host.
TC_HOST_DEVICE inline int64_t LoadIndexAt(const uint8_t* data, int bytes, int64_t i) {
#if defined(TC_DEVICE_CODE)
  return bytes == 4 ? static_cast<int64_t>(reinterpret_cast<const int32_t*>(data)[i])
                    : reinterpret_cast<const int64_t*>(data)[i];
#else
  if (bytes == 4) {
    int32_t v;
    std::memcpy(&v, data + i * 4, 4);
    return v;
  }
  int64_t v;
  std::memcpy(&v, data + i * 8, 8);
  return v;
#endif
}

// out[j] = value `first + j` of an int32 (bytes 4) or int64 (bytes 8) array, for the j < G with
// first + j < last (0 for the others). One branch on the type for all G, so that the G reads
// sit together and are in flight together.
template <int G>
TC_HOST_DEVICE inline void LoadIndexGroup(const uint8_t* data, int bytes, int64_t first,
                                          int64_t last, int64_t (&out)[G]) {
  if (bytes == 4) {
    TC_UNROLL
    for (int j = 0; j < G; ++j) out[j] = first + j < last ? LoadIndexAt(data, 4, first + j) : 0;
  } else {
    TC_UNROLL
    for (int j = 0; j < G; ++j) out[j] = first + j < last ? LoadIndexAt(data, 8, first + j) : 0;
  }
}

// The element at `p` as Elem::Acc: on the device an aligned load of its bits (Elem::Load's
// memcpy from an address of unknown alignment would go byte by byte), then Elem::Load.
template <typename Elem>
TC_HOST_DEVICE inline typename Elem::Acc LoadElem(const uint8_t* p) {
#if defined(TC_DEVICE_CODE)
  using B = typename Bits<Elem::kSize>::T;
  const B bits = *reinterpret_cast<const B*>(p);
  return Elem::Load(reinterpret_cast<const uint8_t*>(&bits));
#else
  return Elem::Load(p);
#endif
}

template <typename Elem>
TC_HOST_DEVICE inline void StoreElem(uint8_t* p, typename Elem::Acc v) {
#if defined(TC_DEVICE_CODE)
  using B = typename Bits<Elem::kSize>::T;
  B bits;
  Elem::Store(reinterpret_cast<uint8_t*>(&bits), v);
  *reinterpret_cast<B*>(p) = bits;
#else
  Elem::Store(p, v);
#endif
}

// A unit's piece of one stored row as loaded, before it is read as numbers: the bytes of its
// elements (or 8-bit codes) from byte 0 of `words` (little-endian, on the host as on the
// device), and for an 8-bit row-wise row the row's scale and bias. A unit loads the pieces of a
// group of rows into RawPieces (registers on the device), then decodes them one at a time as it
// adds them (Piece::Fetch, Piece::Decode).
struct RawPiece {
  uint32_t words[4];
  float scale;
  float bias;
};
// The host fills `words` with memcpy and RawBits reads them as little-endian, as the device is.
static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "RawPiece assumes a little-endian host");

// Element k (of kSize bytes; kSize 1: an 8-bit code) of a RawPiece, as its bits.
template <int kSize>
TC_HOST_DEVICE inline auto RawBits(const RawPiece& raw, int k) {
  if constexpr (kSize == 1) {
    return static_cast<uint8_t>(raw.words[k >> 2] >> ((k & 3) * 8));
  } else if constexpr (kSize == 2) {
    return static_cast<uint16_t>(raw.words[k >> 1] >> ((k & 1) * 16));
  } else if constexpr (kSize == 4) {
    return raw.words[k];
  } else {
    return static_cast<uint64_t>(raw.words[2 * k]) |
           (static_cast<uint64_t>(raw.words[2 * k + 1]) << 32);
  }
}

// raw.words = the bytes [0, n * kSize) at `src` (kSize-aligned on the device), the rest 0;
// kPiece = kE * kSize bytes is the whole piece (at most 16). On the device a whole piece at an
// address aligned to its size is one vector load through the read-only path (params are not
// written while the kernel runs), else one load per element; on the host a memcpy.
template <int kSize, int kE>
TC_HOST_DEVICE inline void FetchRaw(const uint8_t* src, int n, RawPiece& raw) {
  constexpr int kPiece = kSize * kE;
  static_assert(kPiece == 4 || kPiece == 8 || kPiece == 16, "a piece is 4, 8 or 16 bytes");
  TC_UNROLL
  for (int w = 0; w < 4; ++w) raw.words[w] = 0;
#if defined(TC_DEVICE_CODE)
  if (n == kE && (reinterpret_cast<uintptr_t>(src) & (kPiece - 1)) == 0) {
    if constexpr (kPiece == 16) {
      const uint4 v = __ldg(reinterpret_cast<const uint4*>(src));
      raw.words[0] = v.x;
      raw.words[1] = v.y;
      raw.words[2] = v.z;
      raw.words[3] = v.w;
    } else if constexpr (kPiece == 8) {
      const uint2 v = __ldg(reinterpret_cast<const uint2*>(src));
      raw.words[0] = v.x;
      raw.words[1] = v.y;
    } else {
      raw.words[0] = __ldg(reinterpret_cast<const unsigned int*>(src));
    }
    return;
  }
  TC_UNROLL
  for (int k = 0; k < kE; ++k) {
    if (k >= n) break;
    if constexpr (kSize == 1) {
      raw.words[k >> 2] |= static_cast<uint32_t>(src[k]) << ((k & 3) * 8);
    } else if constexpr (kSize == 2) {
      raw.words[k >> 1] |= static_cast<uint32_t>(reinterpret_cast<const uint16_t*>(src)[k])
                           << ((k & 1) * 16);
    } else if constexpr (kSize == 4) {
      raw.words[k] = reinterpret_cast<const uint32_t*>(src)[k];
    } else {
      const uint64_t v = reinterpret_cast<const uint64_t*>(src)[k];
      raw.words[2 * k] = static_cast<uint32_t>(v);
      raw.words[2 * k + 1] = static_cast<uint32_t>(v >> 32);
    }
  }
#else
  if (n > 0) std::memcpy(raw.words, src, static_cast<size_t>(n) * kSize);
#endif
}

// Element k of a RawPiece of `Elem`s as Elem::Acc (Elem::Load of its bits).
template <typename Elem>
TC_HOST_DEVICE inline typename Elem::Acc DecodeRawElem(const RawPiece& raw, int k) {
  const auto bits = RawBits<Elem::kSize>(raw, k);
  return Elem::Load(reinterpret_cast<const uint8_t*>(&bits));
}

// How a unit's piece of a stored row is read: Fetch(row, dim, e0, n, raw) loads the bytes of
// elements [e0, e0 + n) of the row at `row` (n <= kE); Decode(raw, n, x) sets x[0, n) to their
// values. PlainPiece: params of the output's own type. Float16Piece and Rowwise8Piece: compact
// tables (core/compact_row.h), decoded element by element with the TC_HOST_DEVICE readers the
// CPU uses (HalfToFloat, DequantizeRowwise8), so both dequantize alike.
template <typename Elem, int kE>
struct PlainPiece {
  TC_HOST_DEVICE static void Fetch(const uint8_t* row, int64_t /*dim*/, int64_t e0, int n,
                                   RawPiece& raw) {
    FetchRaw<Elem::kSize, kE>(row + e0 * Elem::kSize, n, raw);
  }
  TC_HOST_DEVICE static void Decode(const RawPiece& raw, int n, typename Elem::Acc* x) {
    TC_UNROLL
    for (int k = 0; k < kE; ++k) {
      if (k < n) x[k] = DecodeRawElem<Elem>(raw, k);
    }
  }
};

template <int kE>
struct Float16Piece {
  TC_HOST_DEVICE static void Fetch(const uint8_t* row, int64_t /*dim*/, int64_t e0, int n,
                                   RawPiece& raw) {
    FetchRaw<2, kE>(row + e0 * 2, n, raw);
  }
  TC_HOST_DEVICE static void Decode(const RawPiece& raw, int n, float* x) {
    TC_UNROLL
    for (int k = 0; k < kE; ++k) {
      if (k < n) x[k] = DecodeRawElem<core::Float16Elem>(raw, k);
    }
  }
};

template <int kE>
struct Rowwise8Piece {
  TC_HOST_DEVICE static void Fetch(const uint8_t* row, int64_t dim, int64_t e0, int n,
                                   RawPiece& raw) {
    FetchRaw<1, kE>(row + e0, n, raw);
    // The trailer's floats: 4-byte aligned (one load each on the device) when dim is a
    // multiple of 4; otherwise read byte by byte.
    const uint8_t* trailer = row + dim;
#if defined(TC_DEVICE_CODE)
    if ((reinterpret_cast<uintptr_t>(trailer) & 3) == 0) {
      raw.scale = __ldg(reinterpret_cast<const float*>(trailer));
      raw.bias = __ldg(reinterpret_cast<const float*>(trailer + 4));
      return;
    }
#endif
    std::memcpy(&raw.scale, trailer, 4);
    std::memcpy(&raw.bias, trailer + 4, 4);
  }
  TC_HOST_DEVICE static void Decode(const RawPiece& raw, int n, float* x) {
    TC_UNROLL
    for (int k = 0; k < kE; ++k) {
      if (k < n) x[k] = core::DequantizeRowwise8(RawBits<1>(raw, k), raw.scale, raw.bias);
    }
  }
};

// How a bag's rows go into the accumulators (as in core/embedding_bag.cc): kWeighted (fma
// with the row's weight), kMax, or kPlain (a sum, for SUM, MEAN and SQRTN without weights).
enum class Reduce { kPlain, kWeighted, kMax };

// `Elem`: the output's element type (and the weights' "like params" type); `Piece<kE>`: how
// the stored rows are read.
template <typename Elem, template <int> class Piece, Reduce kReduce>
TC_HOST_DEVICE inline void BagUnitOf(const BagDesc& d, uint64_t u, const uint8_t* in, uint8_t* out,
                                     unsigned long long* flag) {
  using Acc = typename Elem::Acc;
  constexpr int kSize = Elem::kSize;
  constexpr int kE = 16 / kSize;
  const uint64_t b = u / d.chunks_per_bag;
  const int64_t e0 = static_cast<int64_t>(u - b * d.chunks_per_bag) * kE;
  const int64_t left = d.dim - e0;
  const int n = left >= kE ? kE : (left > 0 ? static_cast<int>(left) : 0);
  const uint8_t* params = d.params_address != 0 ? reinterpret_cast<const uint8_t*>(d.params_address)
                                                : in + d.params_offset;
  const uint8_t* indices = in + d.indices_offset;
  const uint8_t* offsets = in + d.offsets_offset;
  const uint8_t* weights = in + d.weights_offset;
  const int offset_bytes = d.offset_bytes;
  const core::BagSpan span = core::BagBounds(
      static_cast<int64_t>(b), offset_bytes == 0, d.bag_size, d.num_offsets, d.num_indices,
      [offsets, offset_bytes](int64_t i) { return LoadIndexAt(offsets, offset_bytes, i); });
  const int64_t row_bytes =
      core::StoredRowBytes(static_cast<core::TableEncoding>(d.encoding), d.dim, kSize);
  const int64_t out_row_bytes = d.dim * kSize;
  const auto mode = static_cast<core::EmbeddingBagMode>(d.mode);
  uint8_t* to = out + d.output_offset + b * out_row_bytes + e0 * kSize;

  Acc acc[kE];
  TC_UNROLL
  for (int k = 0; k < kE; ++k) acc[k] = Acc(0);
  core::BagStats<Acc> stats;
  // The bag's positions go by groups of G = kBagRowsInFlight: the group's index values (read
  // while the previous group's rows were loading) are checked in order, its rows' pieces (and
  // weights) are all loaded, then added in position order, exactly as one at a time: a bad
  // value stops the unit at its position before any later row is read, and the sums see the
  // same terms in the same order.
  constexpr int G = kBagRowsInFlight;
  int64_t next[G];
  LoadIndexGroup<G>(indices, d.index_bytes, span.first, span.last, next);
  for (int64_t i = span.first; i < span.last; i += G) {
    int64_t value[G];
    TC_UNROLL
    for (int j = 0; j < G; ++j) value[j] = next[j];
    LoadIndexGroup<G>(indices, d.index_bytes, i + G, span.last, next);
    int64_t row[G];
    bool use[G];  // position i + j is in the bag and names a row that is not the padding row
    TC_UNROLL
    for (int j = 0; j < G; ++j) {
      row[j] = 0;
      use[j] = false;
      if (i + j < span.last) {
        if (!core::NormalizeIndex(value[j], d.rows, &row[j])) {
          LowerFlag(flag, static_cast<unsigned long long>(i + j));
          return;
        }
        use[j] = !core::IsPaddingRow(row[j], d.padding_row);
      }
    }
    RawPiece raw[G];
    Acc w[G];
    TC_UNROLL
    for (int j = 0; j < G; ++j) {
      w[j] = Acc(0);
      if (!use[j]) continue;
      Piece<kE>::Fetch(params + row[j] * row_bytes, d.dim, e0, n, raw[j]);
      if constexpr (kReduce == Reduce::kWeighted) {
        w[j] = d.weights == kBagWeightsFloat32
                   ? static_cast<Acc>(LoadElem<core::NativeElem<float>>(weights + (i + j) * 4))
                   : LoadElem<Elem>(weights + (i + j) * kSize);
      }
    }
    TC_UNROLL
    for (int j = 0; j < G; ++j) {
      if (!use[j]) continue;
      Acc x[kE];
      TC_UNROLL
      for (int k = 0; k < kE; ++k) x[k] = Acc(0);
      Piece<kE>::Decode(raw[j], n, x);
      if (d.unpooled) {  // a gather: the row as read (a bag holds exactly this one index)
        TC_UNROLL
        for (int k = 0; k < kE; ++k) {
          if (k < n) StoreElem<Elem>(to + k * kSize, x[k]);
        }
        return;
      }
      if constexpr (kReduce == Reduce::kWeighted) {
        core::AddWeight(stats, w[j]);
        TC_UNROLL
        for (int k = 0; k < kE; ++k) {
          if (k < n) acc[k] = core::AccumulateWeighted(acc[k], w[j], x[k]);
        }
      } else if constexpr (kReduce == Reduce::kMax) {
        const bool first_row = stats.count == 0;
        ++stats.count;
        TC_UNROLL
        for (int k = 0; k < kE; ++k) {
          if (k < n) acc[k] = core::AccumulateMax(acc[k], x[k], first_row);
        }
      } else {
        ++stats.count;
        TC_UNROLL
        for (int k = 0; k < kE; ++k) {
          if (k < n) acc[k] = core::AccumulateUnweighted(acc[k], x[k]);
        }
      }
    }
  }
  // core::BagResult, with the divisor computed once for the piece (as the CPU does per bag).
  if (stats.count == 0) {
    TC_UNROLL
    for (int k = 0; k < kE; ++k) {
      if (k < n) StoreElem<Elem>(to + k * kSize, Acc(0));
    }
  } else if (core::ModeDivides(mode)) {
    const Acc divisor = core::BagDivisor(mode, kReduce == Reduce::kWeighted, stats);
    TC_UNROLL
    for (int k = 0; k < kE; ++k) {
      if (k < n) StoreElem<Elem>(to + k * kSize, core::CanonicalNan(acc[k] / divisor));
    }
  } else {
    TC_UNROLL
    for (int k = 0; k < kE; ++k) {
      if (k < n) StoreElem<Elem>(to + k * kSize, core::CanonicalNan(acc[k]));
    }
  }
}

template <typename Elem, template <int> class Piece>
TC_HOST_DEVICE inline void BagUnitFor(const BagDesc& d, uint64_t u, const uint8_t* in, uint8_t* out,
                                      unsigned long long* flag) {
  if (d.weights != kBagUnweighted) {
    BagUnitOf<Elem, Piece, Reduce::kWeighted>(d, u, in, out, flag);
  } else if (d.mode == static_cast<uint8_t>(core::EmbeddingBagMode::kMax)) {
    BagUnitOf<Elem, Piece, Reduce::kMax>(d, u, in, out, flag);
  } else {
    BagUnitOf<Elem, Piece, Reduce::kPlain>(d, u, in, out, flag);
  }
}

template <typename Elem>
struct Plain {
  template <int kE>
  using Piece = PlainPiece<Elem, kE>;
};

}  // namespace bag_internal

// Computes work unit `u` (0 <= u < d.units) of task `d`: one piece of one bag's output row,
// after checking the bag's index values in order. `in`/`out` are the batch's buffers; `flag`
// the task's bad-index flag.
TC_HOST_DEVICE inline void BagUnit(const BagDesc& d, uint64_t u, const uint8_t* in, uint8_t* out,
                                   unsigned long long* flag) {
  using bag_internal::BagUnitFor;
  using bag_internal::Plain;
  using F32 = core::NativeElem<float>;
  switch (static_cast<core::TableEncoding>(d.encoding)) {
    case core::TableEncoding::kFloat16:
      return BagUnitFor<F32, bag_internal::Float16Piece>(d, u, in, out, flag);
    case core::TableEncoding::kRowwise8:
      return BagUnitFor<F32, bag_internal::Rowwise8Piece>(d, u, in, out, flag);
    case core::TableEncoding::kNone:
      break;
  }
  switch (d.elem) {
    case kBagFloat16:
      BagUnitFor<core::Float16Elem, Plain<core::Float16Elem>::Piece>(d, u, in, out, flag);
      break;
    case kBagBfloat16:
      BagUnitFor<core::BFloat16Elem, Plain<core::BFloat16Elem>::Piece>(d, u, in, out, flag);
      break;
    case kBagFloat32:
      BagUnitFor<F32, Plain<F32>::Piece>(d, u, in, out, flag);
      break;
    default:
      BagUnitFor<core::NativeElem<double>, Plain<core::NativeElem<double>>::Piece>(d, u, in, out,
                                                                                   flag);
      break;
  }
}

}  // namespace tensorcompute::cuda

#endif  // TENSORCOMPUTE_CORE_CUDA_BAG_UNIT_H_
