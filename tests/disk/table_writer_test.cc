// RowFile::CreateUnnamed, RowFile::WriteRows and TableWriter (core/disk/table_writer.h): a
// table written as it arrives, in chunks of any size, reads back as the same table built in
// memory (TableEncoder, CheckStoredRows), with the same errors.
#include "core/disk/table_writer.h"

#include <cmath>
#include <csignal>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include <dirent.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/table_storage.h"

namespace tensorcompute::core::disk {
namespace {

using ::testing::HasSubstr;

// A fresh directory under the test's temporary folder, removed (it must be empty) at the end.
class TempDir {
 public:
  TempDir() {
    path_ = absl::StrCat(::testing::TempDir(), "table_writer_test_", ::getpid(), "_", count_++);
    ::mkdir(path_.c_str(), 0700);
  }
  ~TempDir() { ::rmdir(path_.c_str()); }
  const std::string& path() const { return path_; }
  int Entries() const {
    int n = 0;
    DIR* dir = ::opendir(path_.c_str());
    while (dirent* e = ::readdir(dir)) n += e->d_name[0] != '.';
    ::closedir(dir);
    return n;
  }

 private:
  static inline int count_ = 0;
  std::string path_;
};

std::vector<uint8_t> ReadAll(const RowFile& file) {
  std::vector<uint8_t> out(static_cast<size_t>(file.rows() * file.row_bytes()));
  std::vector<int64_t> rows(static_cast<size_t>(file.rows()));
  std::vector<uint8_t*> dest(rows.size());
  for (size_t i = 0; i < rows.size(); ++i) {
    rows[i] = static_cast<int64_t>(i);
    dest[i] = out.data() + i * file.row_bytes();
  }
  EXPECT_TRUE(file.Read(rows, dest.data()).ok());
  return out;
}

TEST(CreateUnnamed, MakesAFileOfZerosThatNoNameReaches) {
  TempDir dir;
  auto file = RowFile::CreateUnnamed(dir.path(), 100, 300, {});
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_EQ((*file)->path(), dir.path() + "/(unnamed)");
  EXPECT_EQ(dir.Entries(), 0);
  EXPECT_EQ(ReadAll(**file), std::vector<uint8_t>(30000, 0));
  std::vector<uint8_t> rows(3 * 300);
  for (size_t i = 0; i < rows.size(); ++i) rows[i] = static_cast<uint8_t>(i * 7);
  ASSERT_TRUE((*file)->WriteRows(40, 3, rows.data()).ok());
  const std::vector<uint8_t> all = ReadAll(**file);
  EXPECT_TRUE(std::equal(rows.begin(), rows.end(), all.begin() + 40 * 300));
  EXPECT_EQ(all[40 * 300 - 1], 0);
  EXPECT_EQ(all[43 * 300], 0);
}

TEST(CreateUnnamed, NamesTheDirectoryItCannotUse) {
  TempDir dir;
  const std::string missing = dir.path() + "/missing";
  auto file = RowFile::CreateUnnamed(missing, 1, 1, {});
  EXPECT_EQ(file.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(file.status().message(),
              HasSubstr(absl::StrCat("table directory '", missing, "': cannot make a file")));
  EXPECT_EQ(RowFile::CreateUnnamed(dir.path(), 1, 0, {}).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(CreateUnnamed, AFileTheFileSystemHasNoRoomForIsResourceExhausted) {
  // RLIMIT_FSIZE stands in for a full disk: posix_fallocate then fails with EFBIG.
  TempDir dir;
  rlimit saved{};
  ASSERT_EQ(::getrlimit(RLIMIT_FSIZE, &saved), 0);
  rlimit small = saved;
  small.rlim_cur = 1 << 20;
  auto old_handler = std::signal(SIGXFSZ, SIG_IGN);
  ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &small), 0);
  auto file = RowFile::CreateUnnamed(dir.path(), 1 << 12, 1 << 10, {});  // 4 MiB
  ::setrlimit(RLIMIT_FSIZE, &saved);
  std::signal(SIGXFSZ, old_handler);
  EXPECT_EQ(file.status().code(), absl::StatusCode::kResourceExhausted) << file.status();
  EXPECT_THAT(file.status().message(), HasSubstr("no room for a file of 4194304 bytes"));
}

// Float32 [rows, dim] values with a few the storage kinds must carry exactly (0, -0, large).
std::vector<float> RandomTable(int64_t rows, int64_t dim, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.f, 3.f);
  std::vector<float> values(static_cast<size_t>(rows * dim));
  for (float& v : values) v = normal(rng);
  values[0] = 0.f;
  values[1] = -0.f;
  values[2] = 60000.f;
  return values;
}

// The table `storage` makes of `sent` in memory (what PutTensor builds), and through a
// TableWriter fed in random chunks: the same bytes, or the same error.
void ExpectSameAsInMemory(TableStorage storage, DataType dtype, const Shape& shape,
                          const std::vector<uint8_t>& sent, uint32_t seed) {
  SCOPED_TRACE(TableStorageName(storage));
  auto layout = PlanTableLayout("t", storage, dtype, shape);
  ASSERT_TRUE(layout.ok()) << layout.status();
  std::vector<uint8_t> memory(static_cast<size_t>(layout->stored_bytes));
  absl::Status in_memory;
  if (layout->encodes()) {
    TableEncoder encoder("t", *layout, memory.data());
    in_memory = encoder.Append(sent);
  } else {
    std::memcpy(memory.data(), sent.data(), sent.size());
    TensorView view;
    view.dtype = layout->stored_dtype;
    view.shape = layout->stored_shape;
    view.data = memory;
    in_memory = CheckStoredRows("t", storage, view);
  }
  TempDir dir;
  auto writer = TableWriter::Create("t", *layout, dir.path(), {});
  ASSERT_TRUE(writer.ok()) << writer.status();
  std::mt19937 rng(seed);
  absl::Status on_disk;
  size_t at = 0;
  while (at < sent.size() && on_disk.ok()) {
    const size_t n = std::min(sent.size() - at, size_t{1} + rng() % 300000);
    on_disk = (*writer)->Append(absl::MakeConstSpan(sent.data() + at, n));
    at += n;
  }
  absl::StatusOr<std::unique_ptr<RowFile>> file = absl::InternalError("not finished");
  if (on_disk.ok()) {
    file = (*writer)->Finish();
    on_disk = file.status();
  }
  ASSERT_EQ(on_disk.code(), in_memory.code()) << on_disk << " vs " << in_memory;
  ASSERT_EQ(on_disk.message(), in_memory.message());
  if (!in_memory.ok()) return;
  EXPECT_EQ(ReadAll(**file), memory);
  EXPECT_EQ(dir.Entries(), 0);
}

std::vector<uint8_t> Bytes(const std::vector<float>& values) {
  std::vector<uint8_t> out(values.size() * 4);
  std::memcpy(out.data(), values.data(), out.size());
  return out;
}

TEST(TableWriter, EveryStorageKindWritesTheTableInMemory) {
  const int64_t rows = 5000, dim = 37;  // rows of 148 B: chunks end inside rows
  const std::vector<uint8_t> sent = Bytes(RandomTable(rows, dim, 1));
  ExpectSameAsInMemory(TableStorage::kAsIs, DataType::kFloat32, {rows, dim}, sent, 2);
  ExpectSameAsInMemory(TableStorage::kFloat16, DataType::kFloat32, {rows, dim}, sent, 3);
  ExpectSameAsInMemory(TableStorage::kInt8Rowwise, DataType::kFloat32, {rows, dim}, sent, 4);
  std::vector<uint8_t> quantized(static_cast<size_t>(rows * (dim + 8)));
  std::mt19937 rng(5);
  for (int64_t r = 0; r < rows; ++r) {
    uint8_t* row = quantized.data() + r * (dim + 8);
    for (int64_t c = 0; c < dim; ++c) row[c] = static_cast<uint8_t>(rng());
    const float scale = 0.01f * static_cast<float>(r % 7 + 1), bias = -0.5f;
    std::memcpy(row + dim, &scale, 4);
    std::memcpy(row + dim + 4, &bias, 4);
  }
  ExpectSameAsInMemory(TableStorage::kInt8RowwisePrequantized, DataType::kUint8, {rows, dim + 8},
                       quantized, 6);
  // Rank 3, int16: any fixed-size table as is.
  ExpectSameAsInMemory(TableStorage::kAsIs, DataType::kInt16, {rows, 3, 5},
                       std::vector<uint8_t>(sent.begin(), sent.begin() + rows * 30), 7);
}

TEST(TableWriter, RowsTheStorageCannotHoldGiveTheWordsOfTheTableInMemory) {
  // More than a buffer (1 MiB) of each: the bad row is in a later one.
  const int64_t rows = 20000, dim = 64;
  std::vector<float> values = RandomTable(rows, dim, 8);
  values[18500 * dim + 3] = 1e6f;  // beyond float16
  ExpectSameAsInMemory(TableStorage::kFloat16, DataType::kFloat32, {rows, dim}, Bytes(values), 9);
  values[18500 * dim + 3] = std::nanf("");
  ExpectSameAsInMemory(TableStorage::kInt8Rowwise, DataType::kFloat32, {rows, dim}, Bytes(values),
                       10);
  std::vector<uint8_t> quantized(static_cast<size_t>(rows * (dim + 8)), 0);
  const float nan = std::nanf("");
  std::memcpy(quantized.data() + 18700 * (dim + 8) + dim, &nan, 4);
  ExpectSameAsInMemory(TableStorage::kInt8RowwisePrequantized, DataType::kUint8, {rows, dim + 8},
                       quantized, 11);
}

TEST(TableWriter, RowsOfNoBytesAreRefused) {
  auto layout = PlanTableLayout("t", TableStorage::kAsIs, DataType::kFloat32, {10, 0});
  ASSERT_TRUE(layout.ok());
  TempDir dir;
  auto writer = TableWriter::Create("t", *layout, dir.path(), {});
  EXPECT_EQ(writer.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(writer.status().message(), HasSubstr("needs rows of at least one byte"));
}

}  // namespace
}  // namespace tensorcompute::core::disk
