// client::UpdateChunker: the messages of an UpdateRows stream, without a server. Every
// message must carry whole rows with their indices, stay within chunk_bytes (at least one
// row), only the first names the table, and the messages together must give back every
// (index, row) pair in order.

#include "client/update_chunker.h"

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

#include "core/tensor.h"

namespace tensorcompute::client {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

std::vector<v1::UpdateRowsRequest> AllMessages(const core::TensorView& indices,
                                               const core::TensorView& values,
                                               int64_t chunk_bytes) {
  EXPECT_TRUE(CheckUpdateRows(indices, SourceOf(values)).ok());
  UpdateChunker chunker("emb", indices, SourceOf(values), chunk_bytes);
  std::vector<v1::UpdateRowsRequest> out;
  v1::UpdateRowsRequest message;
  while (chunker.Next(&message)) out.push_back(message);
  EXPECT_TRUE(chunker.status().ok());
  EXPECT_EQ(chunker.messages(), static_cast<int64_t>(out.size()));
  EXPECT_EQ(chunker.rows_sent(), chunker.total_rows());
  EXPECT_EQ(chunker.bytes_sent(), chunker.total_bytes());
  EXPECT_FALSE(chunker.Next(&message));  // stays finished
  return out;
}

core::Tensor Rows(int64_t rows, int64_t cols) {
  std::vector<float> values(rows * cols);
  for (size_t i = 0; i < values.size(); ++i) values[i] = static_cast<float>(i) + 0.25f;
  return core::Tensor::FromValues<float>(core::DataType::kFloat32, {rows, cols},
                                         absl::MakeConstSpan(values));
}

template <typename T>
core::Tensor Indices(core::DataType dtype, std::vector<T> v) {
  return core::Tensor::FromValues<T>(dtype, {static_cast<int64_t>(v.size())},
                                     absl::MakeConstSpan(v));
}

std::string Bytes(const core::Tensor& t) {
  return std::string(reinterpret_cast<const char*>(t.bytes().data()), t.bytes().size());
}

TEST(UpdateChunker, FewRowsAreOneMessageNamingTheTable) {
  const core::Tensor indices = Indices<int64_t>(core::DataType::kInt64, {5, -1, 0});
  const core::Tensor values = Rows(3, 4);
  const auto messages = AllMessages(indices.view(), values.view(), 1 << 20);
  ASSERT_EQ(messages.size(), 1u);
  EXPECT_EQ(messages[0].name(), "emb");
  EXPECT_EQ(messages[0].indices().dtype(), v1::DT_INT64);
  EXPECT_THAT(messages[0].indices().shape(), ElementsAre(3));
  EXPECT_EQ(messages[0].indices().data(), Bytes(indices));
  EXPECT_EQ(messages[0].values().dtype(), v1::DT_FLOAT32);
  EXPECT_THAT(messages[0].values().shape(), ElementsAre(3, 4));
  EXPECT_EQ(messages[0].values().data(), Bytes(values));
}

TEST(UpdateChunker, MessagesHoldWholeRowsWithinTheBoundAndReassembleInOrder) {
  std::vector<int32_t> ids(10);
  for (int i = 0; i < 10; ++i) ids[i] = 9 - i;
  const core::Tensor indices = Indices<int32_t>(core::DataType::kInt32, ids);
  const core::Tensor values = Rows(10, 7);  // 28 bytes a row, 32 with its index
  // 100 bytes: 3 rows (96 bytes) per message, so 3 + 3 + 3 + 1.
  const auto messages = AllMessages(indices.view(), values.view(), 100);
  ASSERT_EQ(messages.size(), 4u);
  std::string all_indices, all_values;
  for (size_t i = 0; i < messages.size(); ++i) {
    const auto& m = messages[i];
    EXPECT_EQ(m.name().empty(), i > 0) << "message " << i;
    const int64_t n = i < 3 ? 3 : 1;
    EXPECT_THAT(m.indices().shape(), ElementsAre(n)) << "message " << i;
    EXPECT_THAT(m.values().shape(), ElementsAre(n, 7)) << "message " << i;
    EXPECT_EQ(m.indices().dtype(), v1::DT_INT32);
    EXPECT_EQ(m.indices().data().size(), static_cast<size_t>(n) * 4);
    EXPECT_EQ(m.values().data().size(), static_cast<size_t>(n) * 28);
    EXPECT_LE(m.indices().data().size() + m.values().data().size(), 100u);
    all_indices += m.indices().data();
    all_values += m.values().data();
  }
  EXPECT_EQ(all_indices, Bytes(indices));
  EXPECT_EQ(all_values, Bytes(values));
}

TEST(UpdateChunker, ARowLargerThanTheBoundTravelsAlone) {
  const core::Tensor indices = Indices<int64_t>(core::DataType::kInt64, {0, 1, 2});
  const core::Tensor values = Rows(3, 64);  // 256 bytes a row
  const auto messages = AllMessages(indices.view(), values.view(), 16);
  ASSERT_EQ(messages.size(), 3u);
  for (const auto& m : messages) EXPECT_THAT(m.values().shape(), ElementsAre(1, 64));
}

TEST(UpdateChunker, ZeroRowsIsOneMessageWithTheNameAndEmptyTensors) {
  const core::Tensor indices = Indices<int64_t>(core::DataType::kInt64, {});
  const core::Tensor values = Rows(0, 4);
  const auto messages = AllMessages(indices.view(), values.view(), 1 << 20);
  ASSERT_EQ(messages.size(), 1u);
  EXPECT_EQ(messages[0].name(), "emb");
  EXPECT_THAT(messages[0].indices().shape(), ElementsAre(0));
  EXPECT_THAT(messages[0].values().shape(), ElementsAre(0, 4));
}

TEST(UpdateChunker, DefaultBoundKeepsMessagesUnderOneMebibyte) {
  const int64_t rows = 10000;  // 256-byte rows: 2.5 MB of values
  std::vector<int64_t> ids(rows);
  for (int64_t i = 0; i < rows; ++i) ids[i] = i;
  const core::Tensor indices = Indices<int64_t>(core::DataType::kInt64, ids);
  const core::Tensor values = Rows(rows, 64);
  const auto messages = AllMessages(indices.view(), values.view(), int64_t{1} << 20);
  ASSERT_EQ(messages.size(), 3u);  // 3971 rows of 264 bytes per message
  for (const auto& m : messages) EXPECT_LT(m.ByteSizeLong(), (size_t{1} << 20) + 256);
  EXPECT_EQ(UpdateRowsPerMessage(int64_t{1} << 20, 256, 8), 3971);
}

TEST(UpdateChunker, ARowThatCannotBeReadEndsTheMessages) {
  const core::Tensor indices = Indices<int64_t>(core::DataType::kInt64, {0, 1, 2, 3});
  TensorSource broken{core::DataType::kFloat32, {4, 2}, [](int64_t offset, absl::Span<uint8_t>) {
                        return offset == 0 ? absl::OkStatus() : absl::DataLossError("bad disk");
                      }};
  UpdateChunker chunker("emb", indices.view(), broken, 32);  // 2 rows (8 + 8 bytes each)
  v1::UpdateRowsRequest message;
  EXPECT_TRUE(chunker.Next(&message));
  EXPECT_FALSE(chunker.Next(&message));
  EXPECT_EQ(chunker.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(chunker.rows_sent(), 2);
}

TEST(CheckUpdateRows, RejectsWhatCanNeverBeSent) {
  const core::Tensor values = Rows(3, 2);
  const core::Tensor ids3 = Indices<int64_t>(core::DataType::kInt64, {0, 1, 2});
  const core::Tensor ids4 = Indices<int64_t>(core::DataType::kInt64, {0, 1, 2, 3});
  const core::Tensor float_ids = Rows(3, 1);
  EXPECT_TRUE(CheckUpdateRows(ids3.view(), SourceOf(values.view())).ok());
  const absl::Status rows = CheckUpdateRows(ids4.view(), SourceOf(values.view()));
  EXPECT_EQ(rows.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(rows.message(), HasSubstr("values has 3 rows but indices has 4 entries"));
  const absl::Status dtype = CheckUpdateRows(float_ids.view(), SourceOf(values.view()));
  EXPECT_EQ(dtype.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(dtype.message(), HasSubstr("indices must be int32 or int64 of rank 1"));
  TensorSource scalar{core::DataType::kFloat32, {}, nullptr};
  EXPECT_EQ(CheckUpdateRows(ids3.view(), scalar).code(), absl::StatusCode::kInvalidArgument);
}

// A keyed table's update (issue 42): the keys travel in `keys`, never in `indices`, and must be
// int64.
TEST(UpdateChunker, ByKeysTheKeysTravelInKeys) {
  const core::Tensor keys = Indices<int64_t>(core::DataType::kInt64, {-9, 1LL << 62, 0});
  const core::Tensor values = Rows(3, 2);
  ASSERT_TRUE(CheckUpdateRows(keys.view(), SourceOf(values.view()), /*by_keys=*/true).ok());
  UpdateChunker chunker("emb", keys.view(), SourceOf(values.view()), 32, /*by_keys=*/true);
  v1::UpdateRowsRequest message;
  std::string sent_keys, sent_values;
  while (chunker.Next(&message)) {
    EXPECT_FALSE(message.has_indices());
    EXPECT_EQ(message.keys().dtype(), v1::DT_INT64);
    sent_keys += message.keys().data();
    sent_values += message.values().data();
  }
  EXPECT_EQ(chunker.messages(), 2);  // 32 bytes: two rows of 8 + 8 bytes a message
  EXPECT_EQ(sent_keys, Bytes(keys));
  EXPECT_EQ(sent_values, Bytes(values));
  const core::Tensor int32_keys = Indices<int32_t>(core::DataType::kInt32, {1, 2, 3});
  EXPECT_EQ(CheckUpdateRows(int32_keys.view(), SourceOf(values.view()), true).message(),
            "keys must be int64 of rank 1; got int32 [3]");
}

}  // namespace
}  // namespace tensorcompute::client
