#include "core/disk/row_file.h"

#include <atomic>
#include <cstdio>
#include <fstream>
#include <random>
#include <thread>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

namespace tensorcompute::core::disk {
namespace {

using ::testing::HasSubstr;

// A file of random bytes in the test's temporary folder, removed at the end.
class TempFile {
 public:
  explicit TempFile(int64_t bytes, uint32_t seed = 7) {
    static std::atomic<int> count{0};
    path_ = absl::StrCat(::testing::TempDir(), "row_file_test_", ::getpid(), "_", count++);
    bytes_.resize(static_cast<size_t>(bytes));
    std::mt19937 rng(seed);
    for (auto& b : bytes_) b = static_cast<uint8_t>(rng());
    std::ofstream(path_, std::ios::binary)
        .write(reinterpret_cast<const char*>(bytes_.data()), bytes);
  }
  ~TempFile() { std::remove(path_.c_str()); }
  const std::string& path() const { return path_; }
  const std::vector<uint8_t>& bytes() const { return bytes_; }

 private:
  std::string path_;
  std::vector<uint8_t> bytes_;
};

// The rows' bytes read back, one buffer of rows.size() * row_bytes.
std::vector<uint8_t> ReadRows(const RowFile& file, const std::vector<int64_t>& rows,
                              absl::Status* status, ReadObserver* observer = nullptr) {
  std::vector<uint8_t> out(rows.size() * file.row_bytes());
  std::vector<uint8_t*> dest(rows.size());
  for (size_t i = 0; i < rows.size(); ++i) dest[i] = out.data() + i * file.row_bytes();
  *status = file.Read(rows, dest.data(), observer);
  return out;
}

std::vector<uint8_t> Expected(const TempFile& temp, int64_t offset, int64_t row_bytes,
                              const std::vector<int64_t>& rows) {
  std::vector<uint8_t> out;
  for (int64_t r : rows) {
    const auto* p = temp.bytes().data() + offset + r * row_bytes;
    out.insert(out.end(), p, p + row_bytes);
  }
  return out;
}

std::vector<int64_t> RandomRows(int64_t rows, int n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int64_t> pick(0, rows - 1);
  std::vector<int64_t> out(static_cast<size_t>(n));
  for (auto& r : out) r = pick(rng);
  return out;
}

struct Layout {
  int64_t offset;
  int64_t row_bytes;
  int64_t rows;
};

class RowFileLayouts : public ::testing::TestWithParam<std::tuple<Layout, bool, bool>> {};

// Every layout (rows inside blocks, rows across block boundaries, rows longer than a block,
// an .npy's header before them, the file's last block partial) read with io_uring and with
// pread, direct and through the page cache, against the file's own bytes; rows repeat, and a
// call asks for many more rows than are in flight.
TEST_P(RowFileLayouts, ReadsTheRowsAsTheFileHoldsThem) {
  const auto [layout, uring, direct] = GetParam();
  TempFile temp(layout.offset + layout.rows * layout.row_bytes + 3);
  RowFile::Options options;
  options.uring = uring;
  options.direct = direct;
  auto file = RowFile::Open(temp.path(), layout.offset, layout.rows, layout.row_bytes, options);
  ASSERT_TRUE(file.ok()) << file.status();
  if (uring) {
    EXPECT_TRUE((*file)->uring()) << "io_uring cannot be set up on this machine";
  }
  EXPECT_FALSE(!uring && (*file)->uring());
  std::vector<int64_t> rows = RandomRows(layout.rows, 1000, 11);
  rows.push_back(layout.rows - 1);
  rows.push_back(0);
  rows.push_back(rows[5]);
  absl::Status status;
  const std::vector<uint8_t> got = ReadRows(**file, rows, &status);
  ASSERT_TRUE(status.ok()) << status;
  EXPECT_TRUE(got == Expected(temp, layout.offset, layout.row_bytes, rows));
}

std::string LayoutName(const ::testing::TestParamInfo<std::tuple<Layout, bool, bool>>& info) {
  const Layout& layout = std::get<0>(info.param);
  return absl::StrCat("From", layout.offset, "Rows", layout.rows, "Of", layout.row_bytes,
                      std::get<1>(info.param) ? "Uring" : "Pread",
                      std::get<2>(info.param) ? "Direct" : "Buffered");
}

INSTANTIATE_TEST_SUITE_P(
    Layouts, RowFileLayouts,
    ::testing::Combine(::testing::Values(Layout{128, 256, 4096}, Layout{0, 256, 1000},
                                         Layout{80, 100, 5000}, Layout{128, 5000, 300},
                                         Layout{7, 4096, 64}),
                       ::testing::Bool(), ::testing::Bool()),
    LayoutName);

class CountingObserver : public ReadObserver {
 public:
  void OnRead(int64_t bytes, int64_t nanos) override {
    ++reads;
    total_bytes += bytes;
    if (nanos < 0) ++negative;
  }
  int64_t reads = 0, total_bytes = 0, negative = 0;
};

TEST(RowFile, TellsTheObserverOfEveryRead) {
  TempFile temp(4096 + 2000 * 256);
  auto file = RowFile::Open(temp.path(), 4096, 2000, 256, {});
  ASSERT_TRUE(file.ok()) << file.status();
  CountingObserver observer;
  absl::Status status;
  ReadRows(**file, RandomRows(2000, 500, 3), &status, &observer);
  ASSERT_TRUE(status.ok()) << status;
  EXPECT_EQ(observer.reads, 500);
  EXPECT_EQ(observer.total_bytes, 500 * RowFile::kBlockBytes);  // no row crosses a block
  EXPECT_EQ(observer.negative, 0);
}

TEST(RowFile, ThreadsReadAtOnceEachWithItsOwnRing) {
  TempFile temp(64 + 20000 * 96);
  auto file = RowFile::Open(temp.path(), 64, 20000, 96, {});
  ASSERT_TRUE(file.ok()) << file.status();
  std::atomic<int> wrong{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int round = 0; round < 20; ++round) {
        const std::vector<int64_t> rows = RandomRows(20000, 300, 100 * t + round);
        absl::Status status;
        if (ReadRows(**file, rows, &status) != Expected(temp, 64, 96, rows) || !status.ok()) {
          ++wrong;
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(wrong.load(), 0);
}

TEST(RowFile, ReadsWhatWasWrittenAndLeavesTheNeighbours) {
  TempFile temp(128 + 100 * 300);
  RowFile::Options options;
  options.writable = true;
  auto file = RowFile::Open(temp.path(), 128, 100, 300, options);
  ASSERT_TRUE(file.ok()) << file.status();
  const std::vector<int64_t> rows = {0, 13, 14, 15, 99};
  absl::Status status;
  ReadRows(**file, rows, &status);  // the old bytes, read before the write
  ASSERT_TRUE(status.ok()) << status;
  std::vector<uint8_t> row(300, 0xAB);
  ASSERT_TRUE((*file)->Write(14, row.data()).ok());
  std::vector<uint8_t> expected = Expected(temp, 128, 300, rows);
  std::fill(expected.begin() + 2 * 300, expected.begin() + 3 * 300, 0xAB);
  EXPECT_TRUE(ReadRows(**file, rows, &status) == expected);
  ASSERT_TRUE(status.ok()) << status;  // its own write is not a change under the server
  ASSERT_TRUE((*file)->Sync().ok());
  EXPECT_TRUE(ReadRows(**file, rows, &status) == expected);
  ASSERT_TRUE(status.ok()) << status;
  // A fresh open sees the written row: it is in the file.
  auto again = RowFile::Open(temp.path(), 128, 100, 300, {});
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_TRUE(ReadRows(**again, rows, &status) == expected);
}

TEST(RowFile, ReadOnlyRefusesWrites) {
  TempFile temp(4096);
  auto file = RowFile::Open(temp.path(), 0, 16, 256, {});
  ASSERT_TRUE(file.ok()) << file.status();
  std::vector<uint8_t> row(256);
  EXPECT_EQ((*file)->Write(0, row.data()).code(), absl::StatusCode::kFailedPrecondition);
}

TEST(RowFile, ATruncatedFileIsUnavailableNamingTheFile) {
  for (bool uring : {true, false}) {
    TempFile temp(128 + 1000 * 256);
    RowFile::Options options;
    options.uring = uring;
    auto file = RowFile::Open(temp.path(), 128, 1000, 256, options);
    ASSERT_TRUE(file.ok()) << file.status();
    ASSERT_EQ(::truncate(temp.path().c_str(), 128 + 500 * 256), 0);
    absl::Status status;
    ReadRows(**file, {1, 2, 900}, &status);
    EXPECT_EQ(status.code(), absl::StatusCode::kUnavailable);
    EXPECT_THAT(status.message(), HasSubstr(absl::StrCat("table file '", temp.path(), "'")));
    EXPECT_THAT(status.message(), HasSubstr("changed under the server"));
    // Still unavailable on the next read, with no row that needs the lost part.
    ReadRows(**file, {1}, &status);
    EXPECT_EQ(status.code(), absl::StatusCode::kUnavailable);
  }
}

TEST(RowFile, AFileRewrittenByAnotherWriterIsUnavailable) {
  TempFile temp(128 + 100 * 256);
  auto file = RowFile::Open(temp.path(), 128, 100, 256, {});
  ASSERT_TRUE(file.ok()) << file.status();
  {  // the same size, other bytes, a later modification time
    const int fd = ::open(temp.path().c_str(), O_WRONLY);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(::pwrite(fd, "xxxx", 4, 200), 4);
    struct timespec times[2] = {{0, UTIME_OMIT}, {0, 0}};
    ASSERT_EQ(::clock_gettime(CLOCK_REALTIME, &times[1]), 0);
    times[1].tv_sec += 10;
    ASSERT_EQ(::futimens(fd, times), 0);
    ::close(fd);
  }
  absl::Status status;
  ReadRows(**file, {0}, &status);
  EXPECT_EQ(status.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(status.message(), HasSubstr("modified"));
}

TEST(RowFile, OpenErrors) {
  const std::string missing = absl::StrCat(::testing::TempDir(), "row_file_test_missing");
  EXPECT_EQ(RowFile::Open(missing, 0, 1, 4, {}).status().code(), absl::StatusCode::kNotFound);
  TempFile temp(1000);
  auto short_file = RowFile::Open(temp.path(), 128, 4, 256, {});
  EXPECT_EQ(short_file.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(short_file.status().message(), HasSubstr("1000 bytes, shorter than its 4 rows"));
  EXPECT_TRUE(RowFile::Open(temp.path(), 104, 3, 256, {}).ok());  // exactly fits
  EXPECT_EQ(RowFile::Open(temp.path(), 0, 1, 0, {}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(RowFile::Open(temp.path(), -1, 1, 4, {}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(RowFile::Open(temp.path(), 0, -1, 4, {}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(RowFile::Open(temp.path(), 0, 1, RowFile::kMaxRowBytes + 1, {}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(RowFile::Open(::testing::TempDir(), 0, 0, 4, {}).status().code(),
            absl::StatusCode::kFailedPrecondition);  // a folder
}

TEST(RowFile, LongRowsKeepFewerReadsInFlight) {
  TempFile temp(RowFile::kMaxBounceBytes + 3 * 1000000);
  auto file = RowFile::Open(temp.path(), 0, 3, 1000000, {});
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_EQ((*file)->SpanBytes(), 246 * 4096);  // 245 blocks' worth may touch 246
  EXPECT_EQ((*file)->InFlight(), 4);            // 4 MiB of bounce buffers
  auto small = RowFile::Open(temp.path(), 0, 100, 256, {});
  ASSERT_TRUE(small.ok());
  EXPECT_EQ((*small)->SpanBytes(), 8192);
  EXPECT_EQ((*small)->InFlight(), RowFile::kQueueDepth);
  absl::Status status;
  const std::vector<int64_t> rows = {2, 0, 1, 2};
  EXPECT_TRUE(ReadRows(**file, rows, &status) == Expected(temp, 0, 1000000, rows));
  EXPECT_TRUE(status.ok()) << status;
}

}  // namespace
}  // namespace tensorcompute::core::disk
