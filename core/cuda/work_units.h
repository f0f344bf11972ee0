// File: core/cuda/work_units.h
//
// What the kernels (gather_unit.h, bag_unit.h, scatter_unit.h) share, as TC_HOST_DEVICE
// functions compiled into the kernels and into their host twins: the "no bad index" flag value,
// the atomic lowering of a task's flag, finding the task that holds a work unit, the width of a
// chunk copy and the copy itself, and TC_UNROLL. A batch's units are numbered across its tasks;
// each descriptor's unit_begin says where its own start. No CUDA runtime calls and no Abseil
// here.
//
// Thread-safety: pure functions; the flag update is atomic on the device.

#ifndef TENSORCOMPUTE_CORE_CUDA_WORK_UNITS_H_
#define TENSORCOMPUTE_CORE_CUDA_WORK_UNITS_H_

#include <cstdint>
#include <cstring>

#include "core/host_device.h"

#if defined(__CUDA_ARCH__)
#define TC_DEVICE_CODE 1
#endif

// Unrolls the loop that follows in device code (its small arrays then live in registers); a
// plain loop on the host.
#if defined(TC_DEVICE_CODE)
#define TC_UNROLL _Pragma("unroll")
#else
#define TC_UNROLL
#endif

namespace tensorcompute::cuda {

// A task's flag before any bad index was met (the output buffer's flags start so).
inline constexpr uint64_t kNoBadIndex = ~uint64_t{0};

// The task that holds `unit`: binary search over the descriptors' unit_begin (`Desc` is
// GatherDesc or BagDesc). REQUIRES: num_tasks >= 1; unit < the batch's total units.
template <typename Desc>
TC_HOST_DEVICE inline int FindTask(const Desc* descs, int num_tasks, uint64_t unit) {
  int lo = 0, hi = num_tasks - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (descs[mid].unit_begin <= unit) {
      lo = mid;
    } else {
      hi = mid - 1;
    }
  }
  return lo;
}

// *flag = min(*flag, position): atomically on the device, plainly on the host.
TC_HOST_DEVICE inline void LowerFlag(unsigned long long* flag, unsigned long long position) {
#if defined(TC_DEVICE_CODE)
  atomicMin(flag, position);
#else
  if (position < *flag) *flag = position;
#endif
}

// The widest access (16, 8, 4, 2 or 1 bytes) that divides `slice_bytes`: the width of a
// kernel's copies, so that every access of a 256-byte aligned buffer's rows is aligned.
TC_HOST_DEVICE inline uint32_t VectorBytes(int64_t slice_bytes) {
  uint32_t w = 16;
  while (w > 1 && slice_bytes % w != 0) w >>= 1;
  return w;
}

// Copies W bytes, as one W-byte access on the device. REQUIRES: both addresses W-aligned.
template <int W>
TC_HOST_DEVICE inline void CopyChunk(uint8_t* dst, const uint8_t* src) {
#if defined(TC_DEVICE_CODE)
  if constexpr (W == 16) {
    *reinterpret_cast<uint4*>(dst) = *reinterpret_cast<const uint4*>(src);
  } else if constexpr (W == 8) {
    *reinterpret_cast<uint2*>(dst) = *reinterpret_cast<const uint2*>(src);
  } else if constexpr (W == 4) {
    *reinterpret_cast<uint32_t*>(dst) = *reinterpret_cast<const uint32_t*>(src);
  } else if constexpr (W == 2) {
    *reinterpret_cast<uint16_t*>(dst) = *reinterpret_cast<const uint16_t*>(src);
  } else {
    *dst = *src;
  }
#else
  std::memcpy(dst, src, W);
#endif
}

}  // namespace tensorcompute::cuda

#endif  // TENSORCOMPUTE_CORE_CUDA_WORK_UNITS_H_
