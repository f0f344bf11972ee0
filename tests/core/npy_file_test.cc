// core::NpyFile: any range of a .npy file's data read in place equals what ParseNpy makes of
// the whole file, for every dtype the in-place path takes (big-endian included), and every
// way a file can be wrong is an error that says so.

#include "core/npy_file.h"

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include <unistd.h>

#include "core/dtype.h"
#include "core/npy_format.h"
#include "core/tensor.h"
#include "tests/testing/random_tensor.h"
#include "tests/testing/status_matchers.h"

namespace tensorcompute::core {
namespace {

using ::tensorcompute::testing::IsOk;
using ::tensorcompute::testing::StatusIs;
using ::testing::HasSubstr;

// A file holding `contents`, removed with the object.
class TempFile {
 public:
  explicit TempFile(const std::string& contents) {
    path_ = absl::StrCat(::testing::TempDir(), "npy_file_test_", ::getpid(), "_", count_++, ".npy");
    std::FILE* f = std::fopen(path_.c_str(), "wb");
    EXPECT_NE(f, nullptr);
    EXPECT_EQ(std::fwrite(contents.data(), 1, contents.size(), f), contents.size());
    std::fclose(f);
  }
  ~TempFile() { std::remove(path_.c_str()); }
  const std::string& path() const { return path_; }

 private:
  static inline int count_ = 0;
  std::string path_;
};

// The bytes of elements [first, first + n) of `t`.
std::string Elements(const Tensor& t, int64_t first, int64_t n) {
  const int64_t size = static_cast<int64_t>(ElementSize(t.dtype()));
  return std::string(reinterpret_cast<const char*>(t.bytes().data()) + first * size,
                     static_cast<size_t>(n * size));
}

// Reads `n` elements from element `first` of `file`'s data.
absl::StatusOr<std::string> ReadElements(const NpyFile& file, int64_t first, int64_t n) {
  std::string out(static_cast<size_t>(n * file.layout().item_bytes), '\0');
  std::atomic<int64_t> done{0};
  absl::Status status =
      file.ReadData(first * file.layout().item_bytes,
                    absl::MakeSpan(reinterpret_cast<uint8_t*>(out.data()), out.size()), &done);
  if (!status.ok()) return status;
  EXPECT_EQ(done.load(), static_cast<int64_t>(out.size()));
  return out;
}

TEST(NpyFile, AnyRangeReadsAsParseNpyReadsTheWholeFile) {
  tensorcompute::testing::Rng rng(28);
  for (DataType dtype : kAllDataTypes) {
    if (dtype == DataType::kBfloat16 || dtype == DataType::kString) continue;
    for (int64_t rank = 1; rank <= 3; ++rank) {
      const Tensor t = tensorcompute::testing::RandomTensor(
          dtype, tensorcompute::testing::RandomShape(rank, rng, 9, 0.1), rng);
      std::string bytes = *SerializeNpy(t.view());
      // The same file with its data read as big-endian (the descr's '<' made '>').
      std::string big = bytes;
      const size_t lt = big.find("'<");
      if (lt != std::string::npos) big[lt + 1] = '>';
      for (const std::string& contents : {bytes, big}) {
        TempFile temp(contents);
        const absl::StatusOr<NpyFile> file = NpyFile::Open(temp.path());
        ASSERT_THAT(file, IsOk());
        EXPECT_THAT(file->CheckSize(), IsOk());
        const Tensor parsed = *ParseNpy(contents);
        const int64_t n = t.num_elements();
        EXPECT_EQ(file->row_bytes() * t.shape()[0], n * file->layout().item_bytes);
        for (int trial = 0; trial < 5; ++trial) {
          const int64_t first = tensorcompute::testing::UniformInt(rng, 0, n);
          const int64_t count = tensorcompute::testing::UniformInt(rng, 0, n - first);
          const absl::StatusOr<std::string> got = ReadElements(*file, first, count);
          ASSERT_THAT(got, IsOk());
          EXPECT_EQ(*got, Elements(parsed, first, count))
              << file->layout().descr << " elements [" << first << ", " << first + count << ")";
        }
      }
    }
  }
}

TEST(NpyFile, ErrorsSayWhatIsWrong) {
  EXPECT_THAT(NpyFile::Open("/nonexistent/t.npy").status(),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("cannot open it: ")));
  EXPECT_THAT(NpyFile::Open(TempFile("\x93NUMPY").path()).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("truncated .npy file")));
  EXPECT_THAT(NpyFile::Open(TempFile("PK\x03\x04 a zip, not an array").path()).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("not a .npy file")));

  const Tensor t = tensorcompute::testing::MakeTensor<int32_t>({4, 2}, {1, 2, 3, 4, 5, 6, 7, 8});
  const std::string whole = *SerializeNpy(t.view());
  // A file cut short: its size says so, and a read past its end too.
  const TempFile cut(whole.substr(0, whole.size() - 6));
  const absl::StatusOr<NpyFile> file = NpyFile::Open(cut.path());
  ASSERT_THAT(file, IsOk());
  EXPECT_THAT(file->CheckSize(), StatusIs(absl::StatusCode::kInvalidArgument,
                                          HasSubstr("needs 32 bytes (truncated file?)")));
  EXPECT_THAT(ReadElements(*file, 4, 4).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("truncated .npy file")));
  EXPECT_THAT(ReadElements(*file, 0, 4), IsOk());
  // Trailing bytes.
  EXPECT_THAT(NpyFile::Open(TempFile(whole + "xx").path())->CheckSize(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("(trailing bytes)")));
  // A range that does not start on an element.
  const TempFile good(whole);
  std::string two(8, '\0');
  EXPECT_THAT(NpyFile::Open(good.path())
                  ->ReadData(2, absl::MakeSpan(reinterpret_cast<uint8_t*>(two.data()), 8)),
              StatusIs(absl::StatusCode::kInvalidArgument));
  // Fortran order is not read in place, but read whole it parses.
  std::string fortran = whole;
  fortran.replace(fortran.find("False"), 5, "True ");
  const TempFile f(fortran);
  const absl::StatusOr<NpyFile> ffile = NpyFile::Open(f.path());
  ASSERT_THAT(ffile, IsOk());
  EXPECT_FALSE(NpyRowsReadInPlace(ffile->layout()));
  EXPECT_THAT(ReadElements(*ffile, 0, 1).status(), StatusIs(absl::StatusCode::kInvalidArgument));
  const absl::StatusOr<std::string> all = ffile->ReadAll();
  ASSERT_THAT(all, IsOk());
  EXPECT_EQ(*all, fortran);
  EXPECT_THAT(ParseNpy(*all), IsOk());
}

}  // namespace
}  // namespace tensorcompute::core
