// How CudaUploadTable cuts a table into chunks (core/cuda/upload_chunks.h), on the CPU: the
// chunks cover [0, total) in order, exactly once, none larger than the chunk size, through
// alternating staging buffers, each reused only after its first chunk; and which tables are
// staged at all.

#include "core/cuda/upload_chunks.h"

#include <cstdint>
#include <vector>

#include "gtest/gtest.h"

namespace tensorcompute::cuda {
namespace {

// Every chunk of `total` bytes cut into chunks of `chunk_bytes`, in order.
std::vector<UploadChunk> Chunks(uint64_t total, uint64_t chunk_bytes) {
  std::vector<UploadChunk> chunks;
  const uint64_t n = UploadChunkCount(total, chunk_bytes);
  for (uint64_t i = 0; i < n; ++i) chunks.push_back(UploadChunkAt(total, chunk_bytes, i));
  return chunks;
}

// Whether `chunks` tile [0, total) in order with chunks of at most `chunk_bytes` (all full but
// the last), alternating buffers 0, 1, 0, ... and reusing a buffer from the third chunk on.
::testing::AssertionResult TilesExactly(const std::vector<UploadChunk>& chunks, uint64_t total,
                                        uint64_t chunk_bytes) {
  uint64_t next = 0;
  for (size_t i = 0; i < chunks.size(); ++i) {
    const UploadChunk& c = chunks[i];
    if (c.offset != next) {
      return ::testing::AssertionFailure()
             << "chunk " << i << " starts at " << c.offset << ", expected " << next;
    }
    if (c.bytes == 0 || c.bytes > chunk_bytes) {
      return ::testing::AssertionFailure() << "chunk " << i << " has " << c.bytes << " bytes";
    }
    if (i + 1 < chunks.size() && c.bytes != chunk_bytes) {
      return ::testing::AssertionFailure() << "chunk " << i << " is short but not last";
    }
    if (c.buffer != static_cast<int>(i % 2) || c.reuses_buffer != (i >= 2)) {
      return ::testing::AssertionFailure() << "chunk " << i << " uses buffer " << c.buffer
                                           << " (reused: " << c.reuses_buffer << ")";
    }
    next += c.bytes;
  }
  if (next != total) {
    return ::testing::AssertionFailure() << "chunks cover " << next << " of " << total << " bytes";
  }
  return ::testing::AssertionSuccess();
}

TEST(UploadChunks, EmptyTableHasNoChunks) {
  EXPECT_EQ(UploadChunkCount(0, 10), 0u);
  EXPECT_TRUE(Chunks(0, 10).empty());
  EXPECT_EQ(UploadStagingBuffers(0), 0);
}

TEST(UploadChunks, TableSmallerThanAChunkIsOneChunkInBufferZero) {
  const std::vector<UploadChunk> chunks = Chunks(7, 10);
  ASSERT_EQ(chunks.size(), 1u);
  EXPECT_EQ(chunks[0].offset, 0u);
  EXPECT_EQ(chunks[0].bytes, 7u);
  EXPECT_EQ(chunks[0].buffer, 0);
  EXPECT_FALSE(chunks[0].reuses_buffer);
  EXPECT_EQ(UploadStagingBuffers(1), 1);
  EXPECT_TRUE(TilesExactly(Chunks(10, 10), 10, 10));
  EXPECT_EQ(Chunks(10, 10).size(), 1u);
}

TEST(UploadChunks, ExactMultipleEndsOnAFullChunk) {
  const std::vector<UploadChunk> chunks = Chunks(30, 10);
  ASSERT_EQ(chunks.size(), 3u);
  EXPECT_TRUE(TilesExactly(chunks, 30, 10));
  EXPECT_EQ(chunks[2].offset, 20u);
  EXPECT_EQ(chunks[2].bytes, 10u);
  EXPECT_EQ(chunks[2].buffer, 0);
  EXPECT_TRUE(chunks[2].reuses_buffer);
  EXPECT_EQ(UploadStagingBuffers(3), 2);
}

TEST(UploadChunks, MultiplePlusOneEndsOnAOneByteChunk) {
  const std::vector<UploadChunk> chunks = Chunks(31, 10);
  ASSERT_EQ(chunks.size(), 4u);
  EXPECT_TRUE(TilesExactly(chunks, 31, 10));
  EXPECT_EQ(chunks[3].offset, 30u);
  EXPECT_EQ(chunks[3].bytes, 1u);
  EXPECT_EQ(chunks[3].buffer, 1);
}

TEST(UploadChunks, EveryTotalUpToAFewChunksTilesExactly) {
  for (uint64_t chunk_bytes : {1u, 2u, 3u, 8u}) {
    for (uint64_t total = 0; total <= 5 * chunk_bytes + 1; ++total) {
      EXPECT_TRUE(TilesExactly(Chunks(total, chunk_bytes), total, chunk_bytes))
          << "total " << total << ", chunk " << chunk_bytes;
    }
  }
}

TEST(UploadChunks, SmallTablesAreCopiedDirectlyLargeOnesInChunksOfAtMost16MiB) {
  EXPECT_EQ(kUploadMaxChunkBytes, uint64_t{16} << 20);
  EXPECT_FALSE(UploadIsStaged(0));
  EXPECT_FALSE(UploadIsStaged(kUploadDirectMaxBytes));
  EXPECT_TRUE(UploadIsStaged(kUploadDirectMaxBytes + 1));
  // A staged table smaller than the largest chunk is one chunk of its own size.
  EXPECT_EQ(UploadChunkBytes(kUploadDirectMaxBytes + 1), kUploadDirectMaxBytes + 1);
  EXPECT_EQ(UploadChunkBytes(kUploadMaxChunkBytes), kUploadMaxChunkBytes);
  EXPECT_EQ(UploadChunkBytes(uint64_t{4} << 30), kUploadMaxChunkBytes);
  // 150 MiB and 3 KiB (the GPU test's table): nine chunks of 16 MiB, then 6 MiB and 3 KiB.
  const uint64_t total = (uint64_t{150} << 20) + 3072;
  const uint64_t chunk_bytes = UploadChunkBytes(total);
  const std::vector<UploadChunk> chunks = Chunks(total, chunk_bytes);
  ASSERT_EQ(chunks.size(), 10u);
  EXPECT_TRUE(TilesExactly(chunks, total, chunk_bytes));
  EXPECT_EQ(chunks[9].bytes, (uint64_t{6} << 20) + 3072);
  // Sizes past 4 GiB do not overflow.
  const uint64_t huge = (uint64_t{5} << 30) + 1;
  EXPECT_EQ(UploadChunkCount(huge, kUploadMaxChunkBytes), 321u);
  EXPECT_EQ(UploadChunkAt(huge, kUploadMaxChunkBytes, 320).bytes, 1u);
}

}  // namespace
}  // namespace tensorcompute::cuda
