// client/tensor_source.h and the CLI's progress line: a .npy file as an upload's source gives
// the same messages as the tensor read whole (so the server stores the same bytes), rows of a
// source are those rows, a failed read stops the messages with its error, and the progress
// line says how far an upload has come.

#include "client/tensor_source.h"

#include <cstdio>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include <unistd.h>

#include "client/progress_line.h"
#include "client/put_chunker.h"
#include "client/tensor_io.h"
#include "core/npy_format.h"
#include "tests/testing/random_tensor.h"
#include "tests/testing/status_matchers.h"

namespace tensorcompute::client {
namespace {

using ::tensorcompute::testing::IsOk;
using ::tensorcompute::testing::StatusIs;
using ::testing::HasSubstr;

std::string TempPath(const std::string& name) {
  return absl::StrCat(::testing::TempDir(), "tensor_source_test_", ::getpid(), "_", name);
}

// Every message `chunker` makes.
std::vector<v1::PutTensorRequest> Messages(PutChunker chunker) {
  std::vector<v1::PutTensorRequest> out;
  for (v1::PutTensorRequest m; chunker.Next(&m);) out.push_back(m);
  EXPECT_THAT(chunker.status(), IsOk());
  return out;
}

// Every message `chunker` makes as byte buffers (NextBuffer), parsed.
std::vector<v1::PutTensorRequest> BufferMessages(PutChunker chunker) {
  std::vector<v1::PutTensorRequest> out;
  for (grpc::ByteBuffer b; chunker.NextBuffer(&b);) {
    std::vector<grpc::Slice> slices;
    EXPECT_TRUE(b.Dump(&slices).ok());
    std::string bytes;
    for (const grpc::Slice& slice : slices) {
      bytes.append(reinterpret_cast<const char*>(slice.begin()), slice.size());
    }
    EXPECT_TRUE(out.emplace_back().ParseFromString(bytes));
  }
  EXPECT_THAT(chunker.status(), IsOk());
  return out;
}

// `a` and `b` are the same messages, byte for byte.
void ExpectSameMessages(const std::vector<v1::PutTensorRequest>& a,
                        const std::vector<v1::PutTensorRequest>& b) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].SerializeAsString(), b[i].SerializeAsString()) << i;
  }
}

TEST(TensorSource, ANpyFileGivesTheMessagesOfTheTensorReadWhole) {
  tensorcompute::testing::Rng rng(28);
  for (core::DataType dtype : {core::DataType::kFloat32, core::DataType::kInt8,
                               core::DataType::kComplex128, core::DataType::kBool}) {
    const core::Tensor t = tensorcompute::testing::RandomTensor(dtype, {301, 7}, rng);
    const std::string path = TempPath("t.npy");
    ASSERT_THAT(WriteTensorFile(t.view(), path), IsOk());
    absl::StatusOr<std::optional<TensorSource>> source = OpenNpySource(path);
    ASSERT_THAT(source, IsOk());
    ASSERT_TRUE(source->has_value());
    EXPECT_EQ((*source)->dtype, dtype);
    EXPECT_EQ(SourceBytes(**source), static_cast<int64_t>(t.bytes().size()));
    PutChunkerOptions options;
    options.chunk_bytes = 1000;
    const auto from_memory = Messages(PutChunker("t", t.view(), options));
    ExpectSameMessages(Messages(PutChunker("t", **source, options)), from_memory);
    // The bytes gRPC sends (the chunk in a slice of its own) are the same messages.
    ExpectSameMessages(BufferMessages(PutChunker("t", **source, options)), from_memory);
    // Rows [100, 250) of the file are those rows of the tensor.
    const TensorSource rows = SourceRows(**source, {100, 250});
    EXPECT_EQ(rows.shape, core::Shape({150, 7}));
    std::string got(static_cast<size_t>(*SourceBytes(rows)), '\0');
    ASSERT_THAT(rows.read(0, absl::MakeSpan(reinterpret_cast<uint8_t*>(got.data()), got.size())),
                IsOk());
    const size_t row = t.bytes().size() / 301;
    EXPECT_EQ(got,
              std::string(reinterpret_cast<const char*>(t.bytes().data()) + 100 * row, 150 * row));
    std::remove(path.c_str());
  }
}

TEST(TensorSource, StringsAndEmptyTensorsAsByteBuffersAreTheirMessages) {
  PutChunkerOptions options;
  options.chunk_bytes = 5;
  options.replace = true;
  const core::Tensor words =
      tensorcompute::testing::MakeStrings({2, 2}, {"a", "", "bcdefgh", "ij"});
  ExpectSameMessages(BufferMessages(PutChunker("w", words.view(), options)),
                     Messages(PutChunker("w", words.view(), options)));
  const core::Tensor empty = *core::Tensor::Allocate(core::DataType::kInt32, {0, 3});
  const auto messages = BufferMessages(PutChunker("e", empty.view(), options));
  ExpectSameMessages(messages, Messages(PutChunker("e", empty.view(), options)));
  EXPECT_EQ(messages.size(), 1u);
}

TEST(TensorSource, FilesOffTheInPlacePathAndBadFiles) {
  // Strings are read whole instead (nullopt, not an error).
  const std::string strings = TempPath("s.npy");
  ASSERT_THAT(
      WriteTensorFile(tensorcompute::testing::MakeStrings({2}, {"a", "bc"}).view(), strings),
      IsOk());
  absl::StatusOr<std::optional<TensorSource>> source = OpenNpySource(strings);
  ASSERT_THAT(source, IsOk());
  EXPECT_FALSE(source->has_value());
  std::remove(strings.c_str());
  EXPECT_THAT(OpenNpySource("/nonexistent.npy").status(),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("cannot open it")));
  // A file shorter than its header says is refused before anything is sent.
  const std::string cut = TempPath("cut.npy");
  std::string bytes =
      *core::SerializeNpy(tensorcompute::testing::MakeTensor<int64_t>({3}, {1, 2, 3}).view());
  bytes.resize(bytes.size() - 8);
  std::FILE* f = std::fopen(cut.c_str(), "wb");
  ASSERT_NE(f, nullptr);
  std::fwrite(bytes.data(), 1, bytes.size(), f);
  std::fclose(f);
  EXPECT_THAT(OpenNpySource(cut).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("truncated file?")));
  std::remove(cut.c_str());
}

TEST(TensorSource, AFailedReadStopsTheMessagesWithItsError) {
  const core::Tensor t =
      tensorcompute::testing::MakeTensor<int32_t>({10}, {0, 1, 2, 3, 4, 5, 6, 7, 8, 9});
  TensorSource source = SourceOf(t.view());
  source.read = [read = source.read](int64_t offset, absl::Span<uint8_t> out) {
    if (offset >= 16) return absl::DataLossError("bad sector");
    return read(offset, out);
  };
  PutChunkerOptions options;
  options.chunk_bytes = 8;
  PutChunker chunker("t", source, options);
  v1::PutTensorRequest m;
  ASSERT_TRUE(chunker.Next(&m));
  EXPECT_EQ(m.name(), "t");
  ASSERT_TRUE(chunker.Next(&m));
  EXPECT_EQ(m.offset(), 8);
  EXPECT_EQ(chunker.sent(), 16);
  EXPECT_EQ(chunker.total(), 40);
  EXPECT_FALSE(chunker.Next(&m));
  EXPECT_THAT(chunker.status(), StatusIs(absl::StatusCode::kDataLoss, "bad sector"));
  EXPECT_FALSE(chunker.Next(&m));
  EXPECT_EQ(chunker.messages(), 2);
}

TEST(ProgressLine, SaysHowFarHowFastAndHowLong) {
  EXPECT_EQ(FormatProgress("put emb", int64_t{3} << 29, int64_t{3} << 30, absl::Seconds(2), 10),
            "put emb [#####.....]   1.50 of 3.00 GiB  805 MB/s  2 s left");
  EXPECT_EQ(FormatProgress("put t", 0, 10 << 20, absl::ZeroDuration(), 4),
            "put t [....]   0.00 of 10.00 MiB");
  EXPECT_EQ(FormatProgress("put t", 10 << 20, 10 << 20, absl::Seconds(1), 4),
            "put t [####]  10.00 of 10.00 MiB  10 MB/s  0 s left");
  // An empty tensor is done at once.
  EXPECT_EQ(FormatProgress("put e", 0, 0, absl::Seconds(1), 2), "put e [##]   0.00 of 0.00 MiB");
}

}  // namespace
}  // namespace tensorcompute::client
