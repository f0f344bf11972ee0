// File: core/cuda/batch_buffers.h
//
// What every batch layout of the CUDA executor shares (gather_batch.h, bag_batch.h): one
// input buffer and one output buffer per batch, made of regions aligned to kRegionAlignment
// bytes, and the host pieces that fill the input buffer. Plain data; no CUDA here.
//
// Thread-safety: pure functions and plain data.

#ifndef TENSORCOMPUTE_CORE_CUDA_BATCH_BUFFERS_H_
#define TENSORCOMPUTE_CORE_CUDA_BATCH_BUFFERS_H_

#include <cstdint>

namespace tensorcompute::cuda {

// Every region of a batch's buffers starts at a multiple of this (so that every element and
// every 16-byte vector access of the kernels is aligned).
inline constexpr uint64_t kRegionAlignment = 256;

// `n` rounded up to a multiple of kRegionAlignment.
inline uint64_t AlignUp(uint64_t n) {
  return (n + kRegionAlignment - 1) / kRegionAlignment * kRegionAlignment;
}

// One host piece of an input buffer: `bytes` from `src`, to go at `offset` in the buffer.
// A layout lists its pieces in buffer order, so that they can be copied in windows through a
// staging buffer (stream_slot.cc) or all at once (PackInput, PackBagInput).
struct Piece {
  const uint8_t* src;
  uint64_t bytes;
  uint64_t offset;
};

}  // namespace tensorcompute::cuda

#endif  // TENSORCOMPUTE_CORE_CUDA_BATCH_BUFFERS_H_
