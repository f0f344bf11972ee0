// client::PutChunker: the messages of a PutTensor upload, without a server. Reassembling the
// chunks by their offsets must give back the tensor exactly, every message must respect
// chunk_bytes, and only the first message describes the tensor.

#include "client/put_chunker.h"

#include <cstdint>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

#include "core/tensor.h"

namespace tensorcompute::client {
namespace {

using ::testing::ElementsAre;

std::vector<v1::PutTensorRequest> AllMessages(const std::string& name,
                                              const core::TensorView& tensor,
                                              PutChunkerOptions options) {
  PutChunker chunker(name, tensor, options);
  std::vector<v1::PutTensorRequest> out;
  v1::PutTensorRequest message;
  while (chunker.Next(&message)) out.push_back(message);
  EXPECT_EQ(chunker.messages(), static_cast<int64_t>(out.size()));
  EXPECT_FALSE(chunker.Next(&message));  // stays finished
  return out;
}

PutChunkerOptions Chunks(int64_t chunk_bytes) {
  PutChunkerOptions options;
  options.chunk_bytes = chunk_bytes;
  return options;
}

core::Tensor Iota(int64_t rows, int64_t cols) {
  std::vector<float> values(rows * cols);
  for (size_t i = 0; i < values.size(); ++i) values[i] = static_cast<float>(i) * 0.5f;
  return core::Tensor::FromValues<float>(core::DataType::kFloat32, {rows, cols},
                                         absl::MakeConstSpan(values));
}

void ExpectDescribedOnlyFirst(const std::vector<v1::PutTensorRequest>& messages) {
  for (size_t i = 1; i < messages.size(); ++i) {
    EXPECT_TRUE(messages[i].name().empty()) << "message " << i;
    EXPECT_EQ(messages[i].dtype(), v1::DT_UNSPECIFIED) << "message " << i;
    EXPECT_EQ(messages[i].shape_size(), 0) << "message " << i;
    EXPECT_TRUE(messages[i].device().empty()) << "message " << i;
    EXPECT_FALSE(messages[i].replace()) << "message " << i;
  }
}

TEST(PutChunker, SmallTensorIsOneMessageWithDescriptionAndData) {
  const core::Tensor t = Iota(2, 3);
  const auto messages =
      AllMessages("emb", t.view(), {.device = "cpu", .replace = true, .chunk_bytes = 1 << 20});
  ASSERT_EQ(messages.size(), 1u);
  EXPECT_EQ(messages[0].name(), "emb");
  EXPECT_EQ(messages[0].dtype(), v1::DT_FLOAT32);
  EXPECT_THAT(messages[0].shape(), ElementsAre(2, 3));
  EXPECT_EQ(messages[0].device(), "cpu");
  EXPECT_TRUE(messages[0].replace());
  EXPECT_EQ(messages[0].offset(), 0);
  EXPECT_EQ(messages[0].data(),
            std::string(reinterpret_cast<const char*>(t.bytes().data()), t.bytes().size()));
}

TEST(PutChunker, ChunksHaveConsecutiveByteOffsetsAndReassembleExactly) {
  const core::Tensor t = Iota(10, 7);  // 280 bytes
  const auto messages = AllMessages("t", t.view(), Chunks(64));
  ASSERT_EQ(messages.size(), 5u);  // 64 * 4 + 24
  std::string joined;
  for (const auto& m : messages) {
    EXPECT_EQ(m.offset(), static_cast<int64_t>(joined.size()));
    EXPECT_LE(m.data().size(), 64u);
    EXPECT_TRUE(m.strings().empty());
    joined += m.data();
  }
  EXPECT_EQ(messages.back().data().size(), 24u);
  EXPECT_EQ(joined, std::string(reinterpret_cast<const char*>(t.bytes().data()), t.bytes().size()));
  ExpectDescribedOnlyFirst(messages);
}

TEST(PutChunker, ChunksHoldWholeElements) {
  const std::vector<double> values = {1, 2, 3, 4, 5};  // 8-byte elements
  const core::Tensor t =
      core::Tensor::FromValues<double>(core::DataType::kFloat64, {5}, absl::MakeConstSpan(values));
  // 20 bytes rounds down to 2 elements (16 bytes): offsets 0, 16, 32.
  auto messages = AllMessages("t", t.view(), Chunks(20));
  ASSERT_EQ(messages.size(), 3u);
  EXPECT_EQ(messages[1].offset(), 16);
  EXPECT_EQ(messages[2].offset(), 32);
  EXPECT_EQ(messages[2].data().size(), 8u);
  // A chunk smaller than one element still carries one element per message.
  messages = AllMessages("t", t.view(), Chunks(3));
  ASSERT_EQ(messages.size(), 5u);
  for (size_t i = 0; i < messages.size(); ++i) {
    EXPECT_EQ(messages[i].offset(), static_cast<int64_t>(8 * i));
    EXPECT_EQ(messages[i].data().size(), 8u);
  }
}

TEST(PutChunker, EmptyTensorIsTheDescriptionAlone) {
  auto t = core::Tensor::Allocate(core::DataType::kInt32, {0, 4});
  ASSERT_TRUE(t.ok());
  const auto messages = AllMessages("empty", t->view(), Chunks(16));
  ASSERT_EQ(messages.size(), 1u);
  EXPECT_EQ(messages[0].name(), "empty");
  EXPECT_THAT(messages[0].shape(), ElementsAre(0, 4));
  EXPECT_EQ(messages[0].offset(), 0);
  EXPECT_TRUE(messages[0].data().empty());

  auto strings = core::Tensor::FromStrings({3, 0}, {});
  ASSERT_TRUE(strings.ok());
  const auto string_messages = AllMessages("s", strings->view(), Chunks(16));
  ASSERT_EQ(string_messages.size(), 1u);
  EXPECT_EQ(string_messages[0].dtype(), v1::DT_STRING);
  EXPECT_TRUE(string_messages[0].strings().empty());
}

TEST(PutChunker, StringsAreChunkedByElementWithinTheByteBound) {
  // Wire size of a string of n < 128 bytes: n + 2 (tag and one length byte).
  std::vector<std::string> values = {"aaaa", "bbbbbbbb", "", "c", std::string(30, 'd'),
                                     "ee",   "",         "f"};
  auto t = core::Tensor::FromStrings({2, 4}, values);
  ASSERT_TRUE(t.ok());
  const auto messages = AllMessages("s", t->view(), Chunks(16));
  std::vector<std::string> joined;
  for (const auto& m : messages) {
    EXPECT_EQ(m.offset(), static_cast<int64_t>(joined.size()));
    EXPECT_TRUE(m.data().empty());
    ASSERT_GE(m.strings_size(), 1);
    int64_t wire = 0;
    for (const std::string& s : m.strings()) wire += static_cast<int64_t>(s.size()) + 2;
    // Over the bound only when one string alone is larger than it.
    if (m.strings_size() > 1) {
      EXPECT_LE(wire, 16);
    }
    joined.insert(joined.end(), m.strings().begin(), m.strings().end());
  }
  EXPECT_EQ(joined, values);
  // {aaaa:6, bbbbbbbb:10} {"":2, c:3} {d*30:32 alone} {ee:4, "":2, f:3}
  ASSERT_EQ(messages.size(), 4u);
  EXPECT_EQ(messages[1].offset(), 2);
  EXPECT_EQ(messages[2].offset(), 4);
  EXPECT_EQ(messages[2].strings_size(), 1);
  EXPECT_EQ(messages[3].offset(), 5);
  ExpectDescribedOnlyFirst(messages);
}

TEST(PutChunker, LargeTensorMessagesStayUnderTheDefaultGrpcLimit) {
  // 5 MiB of float32 (over gRPC's 4 MiB default) with the default 1 MiB chunks.
  const core::Tensor t = Iota(5 * 1024, 256);
  const auto messages = AllMessages("big", t.view(), PutChunkerOptions());
  ASSERT_EQ(messages.size(), 5u);
  int64_t total = 0;
  for (const auto& m : messages) {
    EXPECT_LT(m.ByteSizeLong(), size_t{4} << 20);
    total += static_cast<int64_t>(m.data().size());
  }
  EXPECT_EQ(total, 5 * 1024 * 256 * 4);
}

}  // namespace
}  // namespace tensorcompute::client
