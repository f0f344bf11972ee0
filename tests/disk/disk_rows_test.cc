#include "core/disk_rows.h"

#include <atomic>
#include <cstdio>
#include <fstream>
#include <random>
#include <thread>

#include "absl/container/flat_hash_set.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include <unistd.h>

#include "core/disk/row_file.h"

namespace tensorcompute::core {
namespace {

using disk::RowFile;
using ::testing::HasSubstr;

constexpr int64_t kHeader = 128;  // an .npy's header before the rows

// A table file of `rows` random rows of `row_bytes` after a header, kept in memory too (the
// reference), removed at the end.
class TableFile {
 public:
  TableFile(int64_t rows, int64_t row_bytes) : rows_(rows), row_bytes_(row_bytes) {
    static std::atomic<int> count{0};
    path_ = absl::StrCat(::testing::TempDir(), "disk_rows_test_", ::getpid(), "_", count++);
    bytes_.resize(static_cast<size_t>(kHeader + rows * row_bytes));
    std::mt19937 rng(5);
    for (auto& b : bytes_) b = static_cast<uint8_t>(rng());
    std::ofstream(path_, std::ios::binary)
        .write(reinterpret_cast<const char*>(bytes_.data()),
               static_cast<std::streamsize>(bytes_.size()));
  }
  ~TableFile() { std::remove(path_.c_str()); }

  std::unique_ptr<DiskRows> Open(int64_t cache_rows, bool admission = true,
                                 bool writable = false) const {
    RowFile::Options file_options;
    file_options.writable = writable;
    auto file = RowFile::Open(path_, kHeader, rows_, row_bytes_, file_options);
    EXPECT_TRUE(file.ok()) << file.status();
    DiskRows::Options options;
    options.cache_bytes = cache_rows * row_bytes_;
    options.admission = admission;
    auto rows = DiskRows::Open("t", *std::move(file), options);
    EXPECT_TRUE(rows.ok()) << rows.status();
    return *std::move(rows);
  }
  std::vector<uint8_t> Expected(absl::Span<const int64_t> rows) const {
    std::vector<uint8_t> out;
    for (int64_t r : rows) {
      const uint8_t* p = bytes_.data() + kHeader + r * row_bytes_;
      out.insert(out.end(), p, p + row_bytes_);
    }
    return out;
  }
  void SetRow(int64_t row, const uint8_t* bytes) {
    std::memcpy(bytes_.data() + kHeader + row * row_bytes_, bytes, row_bytes_);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  int64_t rows_, row_bytes_;
  std::vector<uint8_t> bytes_;
};

std::vector<uint8_t> Fetch(const DiskRows& table, absl::Span<const int64_t> rows,
                           absl::Status* status, DiskRows::FetchStats* stats = nullptr) {
  std::vector<uint8_t> out(rows.size() * table.row_bytes());
  *status = table.Fetch(rows, out.data(), stats);
  return out;
}

// `n` distinct rows of [0, rows), at random.
std::vector<int64_t> DistinctRows(int64_t rows, int n, std::mt19937_64& rng) {
  absl::flat_hash_set<int64_t> seen;
  std::vector<int64_t> out;
  while (static_cast<int>(out.size()) < n) {
    const int64_t r = static_cast<int64_t>(rng() % rows);
    if (seen.insert(r).second) out.push_back(r);
  }
  return out;
}

TEST(DiskRows, FetchesTheFilesRowsAndCountsHitsAndMisses) {
  TableFile file(5000, 100);
  std::unique_ptr<DiskRows> table = file.Open(512);
  EXPECT_EQ(table->cache_rows(), 512);
  EXPECT_EQ(table->memory_bytes(), 512 * 100 + RowCachePolicy::MemoryBytes(512));
  std::mt19937_64 rng(1);
  int64_t hits = 0, misses = 0;
  for (int round = 0; round < 200; ++round) {
    // Half the rows from a hot few, half from anywhere.
    std::vector<int64_t> rows = DistinctRows(300, 20, rng);
    for (int64_t r : DistinctRows(5000, 40, rng)) {
      if (std::find(rows.begin(), rows.end(), r) == rows.end()) rows.push_back(r);
    }
    DiskRows::FetchStats stats;
    absl::Status status;
    const std::vector<uint8_t> got = Fetch(*table, rows, &status, &stats);
    ASSERT_TRUE(status.ok()) << status;
    ASSERT_TRUE(got == file.Expected(rows)) << "round " << round;
    ASSERT_EQ(stats.hits + stats.misses, static_cast<int64_t>(rows.size()));
    hits += stats.hits;
    misses += stats.misses;
    ASSERT_LE(table->cached_rows(), table->cache_rows());
  }
  EXPECT_EQ(table->hits(), hits);
  EXPECT_EQ(table->misses(), misses);
  EXPECT_GT(hits, 0);
  EXPECT_GT(misses, 0);
}

TEST(DiskRows, TheHotRowsStayCachedThroughAScanUnlessLru) {
  TableFile file(20000, 64);
  for (bool admission : {true, false}) {
    std::unique_ptr<DiskRows> table = file.Open(1024, admission);
    std::vector<int64_t> hot(400);
    for (int64_t i = 0; i < 400; ++i) hot[static_cast<size_t>(i)] = i * 37;
    absl::Status status;
    for (int round = 0; round < 20; ++round) Fetch(*table, hot, &status);
    DiskRows::FetchStats before;
    Fetch(*table, hot, &status, &before);
    EXPECT_GE(before.hits, 380) << "admission " << admission;  // all but set conflicts
    std::vector<int64_t> scan;
    for (int64_t r = 0; r < 20000; ++r) {
      if (r % 37 != 0 || r / 37 >= 400) scan.push_back(r);
    }
    for (size_t i = 0; i < scan.size(); i += 500) {
      Fetch(*table, absl::MakeConstSpan(scan).subspan(i, std::min<size_t>(500, scan.size() - i)),
            &status);
      ASSERT_TRUE(status.ok()) << status;
    }
    DiskRows::FetchStats after;
    Fetch(*table, hot, &status, &after);
    if (admission) {
      EXPECT_GE(after.hits, before.hits * 9 / 10) << "TinyLFU keeps the hot rows";
    } else {
      EXPECT_LT(after.hits, before.hits / 2) << "a scan flushes plain LRU";
    }
  }
}

TEST(DiskRows, WritesGoThroughToTheFileAndTheCache) {
  TableFile file(1000, 256);
  std::unique_ptr<DiskRows> table = file.Open(64, true, /*writable=*/true);
  const std::vector<int64_t> rows = {3, 500, 999};
  absl::Status status;
  for (int i = 0; i < 3; ++i) Fetch(*table, rows, &status);  // cached now
  DiskRows::FetchStats stats;
  Fetch(*table, rows, &status, &stats);
  ASSERT_EQ(stats.hits, 3);
  std::vector<uint8_t> row(256);
  for (int64_t r : {int64_t{500}, int64_t{7}}) {  // one cached, one not
    std::fill(row.begin(), row.end(), static_cast<uint8_t>(r));
    ASSERT_TRUE(table->Write(r, row.data()).ok());
    file.SetRow(r, row.data());
  }
  ASSERT_TRUE(table->Sync().ok());
  const std::vector<int64_t> all = {3, 500, 999, 7};
  EXPECT_TRUE(Fetch(*table, all, &status) == file.Expected(all));
  EXPECT_TRUE(status.ok()) << status;
  // The file holds them: a table opened afresh reads them.
  EXPECT_TRUE(Fetch(*file.Open(64), all, &status) == file.Expected(all));
}

TEST(DiskRows, FetchesBesideWritesNeverLeaveAStaleRowCached) {
  TableFile file(2000, 128);
  std::unique_ptr<DiskRows> table = file.Open(256, true, /*writable=*/true);
  std::atomic<bool> stop{false};
  std::vector<std::thread> readers;
  for (int t = 0; t < 3; ++t) {
    readers.emplace_back([&, t] {
      std::mt19937_64 rng(t);
      while (!stop) {
        absl::Status status;
        Fetch(*table, DistinctRows(100, 30, rng), &status);
        EXPECT_TRUE(status.ok()) << status;
      }
    });
  }
  std::vector<uint8_t> row(128);
  for (int i = 0; i < 3000; ++i) {
    const int64_t r = i % 100;
    std::fill(row.begin(), row.end(), static_cast<uint8_t>(i));
    ASSERT_TRUE(table->Write(r, row.data()).ok());
    file.SetRow(r, row.data());
  }
  stop = true;
  for (auto& t : readers) t.join();
  std::vector<int64_t> rows(100);
  for (int64_t r = 0; r < 100; ++r) rows[static_cast<size_t>(r)] = r;
  absl::Status status;
  for (int i = 0; i < 3; ++i) {  // from the cache or the file: the last writes either way
    EXPECT_TRUE(Fetch(*table, rows, &status) == file.Expected(rows)) << i;
    EXPECT_TRUE(status.ok()) << status;
  }
}

TEST(DiskRows, AReadErrorIsUnavailableNamingTheTableAndCachesNothing) {
  TableFile file(1000, 256);
  std::unique_ptr<DiskRows> table = file.Open(64);
  absl::Status status;
  Fetch(*table, std::vector<int64_t>{1, 2}, &status);
  ASSERT_TRUE(status.ok());
  const int64_t cached = table->cached_rows();
  ASSERT_EQ(::truncate(file.path().c_str(), 4096), 0);
  Fetch(*table, std::vector<int64_t>{5, 900}, &status);
  EXPECT_EQ(status.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(status.message(), HasSubstr("table 't' on disk: table file '"));
  EXPECT_EQ(table->cached_rows(), cached);
}

TEST(DiskRows, CacheSizes) {
  EXPECT_EQ(DiskRows::CacheRowsFor(4 << 20, 256, 1 << 20), 16384);
  EXPECT_EQ(DiskRows::CacheRowsFor(1000, 100, 1 << 20), 8);     // whole sets
  EXPECT_EQ(DiskRows::CacheRowsFor(700, 100, 1 << 20), 0);      // less than a set
  EXPECT_EQ(DiskRows::CacheRowsFor(1 << 30, 256, 1000), 1000);  // no more than the table
  EXPECT_EQ(DiskRows::CacheRowsFor(1 << 30, 256, 1001), 1008);  // ... rounded up to a set
  TableFile file(100, 100);
  auto opened = RowFile::Open(file.path(), kHeader, 100, 100, {});
  ASSERT_TRUE(opened.ok());
  DiskRows::Options options;
  options.cache_bytes = 700;
  auto small = DiskRows::Open("t", *std::move(opened), options);
  EXPECT_EQ(small.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(small.status().message(), HasSubstr("holds less than one set of 8 rows"));
}

}  // namespace
}  // namespace tensorcompute::core
