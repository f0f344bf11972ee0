// client::PutChunker: the messages of a PutTensor upload, without a server. Reassembling the
// chunks by their offsets must give back the tensor exactly, every message must respect
// chunk_bytes, and only the first message describes the tensor.

#include "client/put_chunker.h"

#include <cstdint>
#include <cstring>
#include <random>
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

// Iota, or for no elements an empty tensor of that shape.
core::Tensor RowsOf(int64_t rows, int64_t cols) {
  if (rows * cols == 0) return *core::Tensor::Allocate(core::DataType::kFloat32, {rows, cols});
  return Iota(rows, cols);
}

// Keyed tables: every key goes once, in order; a message carries the keys of the rows its
// data completes (no key before its row's last byte, none left behind), and data and keys
// together stay within chunk_bytes (or one element, when chunk_bytes is smaller) but for one
// key.
void ExpectKeysBesideRows(const core::Tensor& rows, int64_t chunk_bytes, uint64_t seed) {
  SCOPED_TRACE(::testing::Message()
               << "rows " << core::ShapeToString(rows.shape()) << " chunk_bytes " << chunk_bytes);
  std::mt19937_64 rng(seed);
  const int64_t n = rows.shape()[0];
  std::vector<int64_t> keys(static_cast<size_t>(n));
  for (int64_t& k : keys) k = static_cast<int64_t>(rng());
  const core::Tensor key_tensor = n == 0
                                      ? *core::Tensor::Allocate(core::DataType::kInt64, {0})
                                      : core::Tensor::FromValues<int64_t>(
                                            core::DataType::kInt64, {n}, absl::MakeConstSpan(keys));
  PutChunkerOptions options = Chunks(chunk_bytes);
  options.keyed = PutKeys{.keys = key_tensor.view(),
                          .missing = core::MissingKeys::kZero,
                          .default_row = std::nullopt,
                          .capacity = n + 3};
  const auto messages = AllMessages("keyed", rows.view(), options);
  ASSERT_FALSE(messages.empty());
  ASSERT_TRUE(messages[0].has_keyed());
  EXPECT_EQ(messages[0].keyed().missing(), v1::MISSING_ZERO);
  EXPECT_EQ(messages[0].keyed().capacity(), n + 3);
  EXPECT_FALSE(messages[0].keyed().has_default_row());
  const int64_t total = static_cast<int64_t>(rows.bytes().size());
  const int64_t row_bytes = n > 0 ? total / n : 0;
  std::string sent_keys;
  int64_t data_end = 0;
  for (size_t i = 0; i < messages.size(); ++i) {
    const auto& m = messages[i];
    if (i > 0) {
      EXPECT_FALSE(m.has_keyed()) << "message " << i;
    }
    data_end += static_cast<int64_t>(m.data().size());
    sent_keys += m.keys();
    // A message holds at least one element, whatever chunk_bytes.
    EXPECT_LE(static_cast<int64_t>(m.data().size() + m.keys().size()),
              std::max<int64_t>(chunk_bytes, core::ElementSize(rows.dtype())) + 8)
        << "message " << i;
    const int64_t keys_so_far = static_cast<int64_t>(sent_keys.size() / sizeof(int64_t));
    if (row_bytes > 0) {
      EXPECT_EQ(keys_so_far, data_end / row_bytes) << "message " << i;
    }
  }
  ASSERT_EQ(sent_keys.size(), keys.size() * sizeof(int64_t));
  if (n > 0) {
    EXPECT_EQ(std::memcmp(sent_keys.data(), keys.data(), sent_keys.size()), 0);
  }
}

TEST(PutChunker, KeysTravelBesideTheRowsTheyName) {
  // Rows smaller than a chunk (whole rows and keys per message), larger than one (a key in the
  // message that ends its row), of one element, and of no bytes (keys in messages of their own).
  ExpectKeysBesideRows(RowsOf(37, 3), 100, 1);
  ExpectKeysBesideRows(RowsOf(9, 40), 64, 2);
  ExpectKeysBesideRows(RowsOf(50, 1), 8, 3);
  ExpectKeysBesideRows(RowsOf(1000, 16), 1 << 20, 4);
  ExpectKeysBesideRows(RowsOf(21, 0), 40, 5);
  ExpectKeysBesideRows(RowsOf(0, 4), 40, 6);
  std::mt19937_64 rng(7);
  for (int i = 0; i < 30; ++i) {
    // Drawn one statement at a time: the order of a call's arguments is the compiler's.
    const int64_t rows = static_cast<int64_t>(rng() % 60) + 1;
    const int64_t cols = static_cast<int64_t>(rng() % 9);
    const int64_t chunk_bytes = static_cast<int64_t>(rng() % 120) + 1;
    ExpectKeysBesideRows(RowsOf(rows, cols), chunk_bytes, rng());
  }
}

TEST(PutChunker, KeyedDescriptionCarriesTheDefaultRow) {
  const core::Tensor rows = Iota(4, 2);
  const core::Tensor keys = core::Tensor::FromValues<int64_t>(
      core::DataType::kInt64, {4}, absl::MakeConstSpan(std::vector<int64_t>{9, -9, 0, 5}));
  const core::Tensor row = Iota(1, 2);
  PutChunkerOptions options = Chunks(1 << 20);
  options.keyed =
      PutKeys{.keys = keys.view(),
              .missing = core::MissingKeys::kDefaultRow,
              .default_row = core::TensorView{core::DataType::kFloat32, {2}, row.bytes(), {}},
              .capacity = 0};
  const auto messages = AllMessages("keyed", rows.view(), options);
  ASSERT_EQ(messages.size(), 1u);
  EXPECT_EQ(messages[0].keyed().missing(), v1::MISSING_DEFAULT_ROW);
  EXPECT_EQ(messages[0].keyed().default_row().dtype(), v1::DT_FLOAT32);
  EXPECT_EQ(messages[0].keyed().default_row().shape_size(), 1);
  EXPECT_EQ(messages[0].keyed().default_row().data(),
            std::string(reinterpret_cast<const char*>(row.bytes().data()), row.bytes().size()));
  EXPECT_EQ(messages[0].keys().size(), 4 * sizeof(int64_t));
}

}  // namespace
}  // namespace tensorcompute::client
