// File: core/cuda/upload_chunks.h
//
// How a resident table is cut into chunks for its copy to the device (table_upload.h): a table
// of more than kUploadDirectMaxBytes goes chunk by chunk through two pinned staging buffers of
// kUploadMaxChunkBytes, which the device's uploader keeps for the next upload, used in turn (one
// is filled by the host while the other's chunk is in flight), so that the host never holds a
// second whole copy of the table. Plain host arithmetic, no CUDA here, so that every build (with
// nvcc or without) compiles and tests it.
//
// Thread-safety: pure functions and constants.

#ifndef TENSORCOMPUTE_CORE_CUDA_UPLOAD_CHUNKS_H_
#define TENSORCOMPUTE_CORE_CUDA_UPLOAD_CHUNKS_H_

#include <algorithm>
#include <cstdint>

namespace tensorcompute::cuda {

// Tables of at most this many bytes are copied from their own (pageable) memory with one copy:
// staging would cost more than it saves.
inline constexpr uint64_t kUploadDirectMaxBytes = uint64_t{4} << 20;

// The most each of the two pinned staging buffers of a larger upload holds (16 MiB: a copy of
// that size runs at the bus's speed, and the two are kept per device, 32 MiB of pinned memory).
inline constexpr uint64_t kUploadMaxChunkBytes = uint64_t{16} << 20;

// One chunk of an upload: bytes [offset, offset + bytes) of the table, staged through staging
// buffer `buffer` (0 or 1).
struct UploadChunk {
  uint64_t offset = 0;
  uint64_t bytes = 0;
  int buffer = 0;
  // Whether `buffer` held an earlier chunk, whose copy to the device must have finished
  // before the host writes this one into it.
  bool reuses_buffer = false;
};

// Whether a table of `total` bytes goes through pinned staging (else one direct copy).
inline bool UploadIsStaged(uint64_t total) { return total > kUploadDirectMaxBytes; }

// The size of each staging buffer for an upload of `total` bytes:
// min(total, kUploadMaxChunkBytes).
inline uint64_t UploadChunkBytes(uint64_t total) { return std::min(total, kUploadMaxChunkBytes); }

// How many chunks of at most `chunk_bytes` cover `total` bytes: ceil(total / chunk_bytes),
// 0 when total is 0. REQUIRES: chunk_bytes > 0.
inline uint64_t UploadChunkCount(uint64_t total, uint64_t chunk_bytes) {
  return total / chunk_bytes + (total % chunk_bytes != 0 ? 1 : 0);
}

// How many staging buffers an upload of `chunks` chunks uses: 2, or 1 for a single chunk
// (0 for none). Chunk i goes through buffer i % 2.
inline int UploadStagingBuffers(uint64_t chunks) {
  return static_cast<int>(std::min<uint64_t>(chunks, 2));
}

// Chunk `index` of `total` bytes cut into chunks of `chunk_bytes`: offset index * chunk_bytes,
// min(chunk_bytes, total - offset) bytes, buffer index % 2, reusing it from index 2 on. The
// chunks 0 .. UploadChunkCount(total, chunk_bytes) - 1 cover [0, total) in order, exactly once.
// REQUIRES: chunk_bytes > 0, index < UploadChunkCount(total, chunk_bytes).
inline UploadChunk UploadChunkAt(uint64_t total, uint64_t chunk_bytes, uint64_t index) {
  UploadChunk chunk;
  chunk.offset = index * chunk_bytes;
  chunk.bytes = std::min(chunk_bytes, total - chunk.offset);
  chunk.buffer = static_cast<int>(index % 2);
  chunk.reuses_buffer = index >= 2;
  return chunk;
}

}  // namespace tensorcompute::cuda

#endif  // TENSORCOMPUTE_CORE_CUDA_UPLOAD_CHUNKS_H_
