// Compact resident tables (issue 24) through the C++ client and a real in-process server: each
// storage kind uploaded in many chunks (row boundaries falling mid-message), listed with its
// kind, logical dtype and shape and the bytes it holds; Gather (axis 0) and EmbeddingBag by
// name equal to the same calls on the float32 table the stored values mean, inline, byte for
// byte; a prequantized upload of the same bytes answering as the server-quantized one; the
// refusals (GatherNd, other axes, a value a kind cannot hold) and the resident-byte cap
// counting held bytes.

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

#include "client/client.h"
#include "core/compact_row.h"
#include "core/half_float.h"
#include "core/table_storage.h"
#include "core/tensor.h"
#include "server/server.h"
#include "tests/client/test_client.h"
#include "tests/server/test_server.h"
#include "tests/testing/random_embedding_bag.h"
#include "tests/testing/random_tensor.h"
#include "tests/testing/status_matchers.h"

namespace tensorcompute::client {
namespace {

using core::DataType;
using core::TableStorage;
using ::tensorcompute::server::Server;
using ::tensorcompute::server::ServerOptions;
using ::tensorcompute::server::test_support::StartServer;
using ::tensorcompute::server::test_support::TestOptions;
using ::tensorcompute::testing::IsOk;
using ::tensorcompute::testing::StatusIs;
using ::testing::HasSubstr;

std::unique_ptr<Client> MakeClient(const Server& server) {
  return test_support::MakeClient(test_support::TestClientOptions(server.port()));
}

// A float32 [rows, dim] table of values in [-100, 100] with some -0.
core::Tensor RandomTable(int64_t rows, int64_t dim, testing::Rng& rng) {
  std::vector<float> values(static_cast<size_t>(rows * dim));
  for (float& v : values) {
    v = testing::Chance(rng, 0.05) ? -0.0f
                                   : static_cast<float>(testing::UniformInt(rng, -800, 800)) / 8.f;
  }
  return testing::MakeTensor<float>({rows, dim}, values);
}

// `table` in `storage`'s stored form, made by core's encoder (checked against the formulas in
// tests/core/table_storage_test.cc and against NumPy in compact_tables_test.py).
core::Tensor Stored(const core::Tensor& table, TableStorage storage) {
  const core::TableLayout layout =
      *core::PlanTableLayout("t", storage, DataType::kFloat32, table.shape());
  core::Tensor out = *core::Tensor::Allocate(layout.stored_dtype, layout.stored_shape);
  core::TableEncoder encoder("t", layout, out.mutable_bytes().data());
  EXPECT_THAT(encoder.Append(table.view().data), IsOk());
  return out;
}

// The float32 table that stored rows mean: each element read as the formula says.
core::Tensor Meaning(const core::Tensor& stored, core::TableEncoding encoding) {
  const int64_t rows = stored.shape()[0];
  const int64_t dim =
      encoding == core::TableEncoding::kRowwise8 ? stored.shape()[1] - 8 : stored.shape()[1];
  std::vector<float> values;
  const uint8_t* p = stored.view().data.data();
  for (int64_t r = 0; r < rows; ++r) {
    const uint8_t* row = p + r * core::StoredRowBytes(encoding, dim, 0);
    for (int64_t d = 0; d < dim; ++d) {
      if (encoding == core::TableEncoding::kFloat16) {
        uint16_t h;
        std::memcpy(&h, row + 2 * d, 2);
        values.push_back(core::HalfToFloat(h));
      } else {
        float scale, bias;
        std::memcpy(&scale, row + dim, 4);
        std::memcpy(&bias, row + dim + 4, 4);
        const float product = static_cast<float>(row[d]) * scale;
        values.push_back(product + bias);
      }
    }
  }
  return testing::MakeTensor<float>({rows, dim}, values);
}

std::string Bytes(const core::Tensor& t) {
  return std::string(reinterpret_cast<const char*>(t.view().data.data()), t.view().data.size());
}

// Gathers and pooled lookups by name on `name` equal the inline calls on `meaning`.
void ExpectLookupsMatch(Client& client, const std::string& name, const core::Tensor& meaning,
                        testing::Rng& rng) {
  const int64_t rows = meaning.shape()[0];
  for (const core::Shape& shape : {core::Shape{7}, core::Shape{3, 4}, core::Shape{}}) {
    const core::Tensor indices = testing::RandomIndices(DataType::kInt64, shape, {rows}, rng);
    absl::StatusOr<core::Tensor> by_name = client.GatherByName(name, indices.view());
    ASSERT_THAT(by_name.status(), IsOk());
    absl::StatusOr<core::Tensor> inline_result = client.Gather(meaning.view(), indices.view(), 0);
    ASSERT_THAT(inline_result.status(), IsOk());
    EXPECT_EQ(by_name->dtype(), DataType::kFloat32);
    EXPECT_EQ(by_name->shape(), inline_result->shape());
    EXPECT_EQ(Bytes(*by_name), Bytes(*inline_result)) << name;
  }
  for (core::EmbeddingBagMode mode :
       {core::EmbeddingBagMode::kSum, core::EmbeddingBagMode::kMean, core::EmbeddingBagMode::kMax,
        core::EmbeddingBagMode::kSqrtn}) {
    testing::RandomBagOptions o;
    o.mode = mode;
    o.weighted = mode != core::EmbeddingBagMode::kMax && testing::Chance(rng, 0.5);
    o.bags = 20;
    o.params = &meaning;
    const testing::EmbeddingBagCase c = testing::RandomEmbeddingBagCase(o, rng);
    const core::TensorView offsets = c.offsets_view(), weights = c.weights_view();
    EmbeddingBagArgs args;
    args.mode = mode;
    args.offsets = c.offsets ? &offsets : nullptr;
    args.per_sample_weights = c.weights ? &weights : nullptr;
    args.include_last_offset = c.options.include_last_offset;
    args.padding_idx = c.options.padding_idx;
    absl::StatusOr<core::Tensor> by_name = client.EmbeddingBagByName(name, c.indices.view(), args);
    ASSERT_THAT(by_name.status(), IsOk()) << c.DebugString();
    absl::StatusOr<core::Tensor> want = c.Expected();
    ASSERT_THAT(want.status(), IsOk());
    EXPECT_EQ(Bytes(*by_name), Bytes(*want)) << name << " " << c.DebugString();
    absl::StatusOr<core::Tensor> inline_result =
        client.EmbeddingBag(meaning.view(), c.indices.view(), args);
    ASSERT_THAT(inline_result.status(), IsOk());
    EXPECT_EQ(Bytes(*by_name), Bytes(*inline_result));
  }
}

TEST(CompactTables, EveryKindListsGathersAndPoolsAsItsFloat32Meaning) {
  auto server = StartServer();
  ASSERT_NE(server, nullptr);
  auto client = MakeClient(*server);
  testing::Rng rng(2410);
  const int64_t rows = 300, dim = 24;
  const core::Tensor table = RandomTable(rows, dim, rng);
  const core::Tensor quantized = Stored(table, TableStorage::kInt8Rowwise);
  PutOptions put;
  put.chunk_bytes = 1000;  // 96-byte rows: most rows arrive split across two messages
  struct Kind {
    std::string name;
    TableStorage storage;
    const core::Tensor* sent;
    int64_t held;
  };
  for (const Kind& k :
       {Kind{"f16", TableStorage::kFloat16, &table, rows * dim * 2},
        Kind{"q8", TableStorage::kInt8Rowwise, &table, rows * (dim + 8)},
        Kind{"pre", TableStorage::kInt8RowwisePrequantized, &quantized, rows * (dim + 8)}}) {
    SCOPED_TRACE(k.name);
    put.storage = k.storage;
    absl::StatusOr<TensorInfo> info = client->PutTensor(k.name, k.sent->view(), put);
    ASSERT_THAT(info.status(), IsOk());
    EXPECT_EQ(info->storage, k.storage);
    EXPECT_EQ(info->dtype, DataType::kFloat32);
    EXPECT_EQ(info->shape, (core::Shape{rows, dim}));
    EXPECT_EQ(info->bytes, k.held);
    const core::Tensor half = Stored(table, TableStorage::kFloat16);
    const core::Tensor meaning = Meaning(k.storage == TableStorage::kFloat16 ? half : quantized,
                                         core::EncodingOf(k.storage));
    ExpectLookupsMatch(*client, k.name, meaning, rng);
  }
  absl::StatusOr<std::vector<TensorInfo>> list = client->ListTensors();
  ASSERT_THAT(list.status(), IsOk());
  ASSERT_EQ(list->size(), 3u);
  for (const TensorInfo& t : *list) {
    EXPECT_EQ(t.dtype, DataType::kFloat32);
    EXPECT_EQ(t.shape, (core::Shape{rows, dim}));
    EXPECT_NE(t.storage, TableStorage::kAsIs);
  }
  // The prequantized upload of the server's own quantization answers alike.
  const core::Tensor all = testing::RandomIndices(DataType::kInt32, {rows}, {rows}, rng);
  EXPECT_EQ(Bytes(*client->GatherByName("q8", all.view())),
            Bytes(*client->GatherByName("pre", all.view())));
}

TEST(CompactTables, RefusalsSayWhy) {
  auto server = StartServer();
  ASSERT_NE(server, nullptr);
  auto client = MakeClient(*server);
  testing::Rng rng(2411);
  const core::Tensor table = RandomTable(10, 4, rng);
  PutOptions put;
  put.storage = TableStorage::kInt8Rowwise;
  ASSERT_THAT(client->PutTensor("q8", table.view(), put).status(), IsOk());
  const core::Tensor pairs = testing::MakeIndices(DataType::kInt64, {1, 2}, {1, 2});
  EXPECT_THAT(client->GatherNdByName("q8", pairs.view()),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "tensor 'q8' is stored INT8_ROWWISE: GatherNd is not served on compact "
                       "tables; use Gather (axis 0) or EmbeddingBag"));
  EXPECT_THAT(client->GatherByName("q8", pairs.view(), 1),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("axis must be 0")));
  EXPECT_THAT(client->GatherByName("q8", pairs.view(), 0, 1),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("batch_dims must be 0")));
  const core::Tensor bad = testing::MakeIndices(DataType::kInt64, {3}, {0, 10, 1});
  EXPECT_THAT(client->GatherByName("q8", bad.view()),
              StatusIs(absl::StatusCode::kInvalidArgument, "indices[1] = 10 is not in [-10, 10)"));

  // What a kind cannot take or hold; nothing is stored.
  const core::Tensor ints = testing::MakeTensor<int32_t>({2, 2}, {1, 2, 3, 4});
  put.storage = TableStorage::kFloat16;
  EXPECT_THAT(client->PutTensor("x", ints.view(), put),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "tensor 'x': FLOAT16 storage takes a float32 table [rows, dim], got "
                       "int32 [2,2]"));
  const core::Tensor huge = testing::MakeTensor<float>({2, 2}, {1, 2, 3, 1e5f});
  put.chunk_bytes = 4;
  EXPECT_THAT(client->PutTensor("x", huge.view(), put),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("tensor 'x': element [1, 1] = 100000 is beyond float16's range")));
  put.storage = TableStorage::kInt8Rowwise;
  const core::Tensor nan = testing::MakeTensor<float>({1, 2}, {1, std::nanf("")});
  EXPECT_THAT(client->PutTensor("x", nan.view(), put),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("is not finite")));
  put.storage = TableStorage::kInt8RowwisePrequantized;
  EXPECT_THAT(client->PutTensor("x", table.view(), put),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("INT8_ROWWISE_PREQUANTIZED storage takes uint8")));
  absl::StatusOr<std::vector<TensorInfo>> list = client->ListTensors();
  ASSERT_THAT(list.status(), IsOk());
  EXPECT_EQ(list->size(), 1u);
}

TEST(CompactTables, TheResidentCapCountsHeldBytes) {
  testing::Rng rng(2412);
  const core::Tensor table = RandomTable(100, 64, rng);  // 25600 bytes as float32
  ServerOptions options = TestOptions();
  options.max_resident_bytes = 100 * 72 + 100 * 64 * 2;  // the 8-bit and float16 forms
  auto server = StartServer(options);
  ASSERT_NE(server, nullptr);
  auto client = MakeClient(*server);
  PutOptions put;
  put.chunk_bytes = 4096;
  EXPECT_THAT(client->PutTensor("f32", table.view(), put),
              StatusIs(absl::StatusCode::kResourceExhausted));
  put.storage = TableStorage::kInt8Rowwise;
  ASSERT_THAT(client->PutTensor("q8", table.view(), put).status(), IsOk());
  put.storage = TableStorage::kFloat16;
  ASSERT_THAT(client->PutTensor("f16", table.view(), put).status(), IsOk());
  EXPECT_THAT(client->PutTensor("more", table.view(), put),
              StatusIs(absl::StatusCode::kResourceExhausted));
}

}  // namespace
}  // namespace tensorcompute::client
