// Keyed tables through the C++ client (issue 42), against a real in-process server: a table
// put with random keys (extreme int64 values among them) in many messages, looked up with
// GatherByKeys under every missing-key policy and compared byte for byte to a map of the rows
// (rows, zeros, the default row; the found mask), EmbeddingBagByKeys equal to the same call by
// the rows' indices (missing keys skipped as a padding row would be), puts from a TensorSource,
// the keyed description that PutTensor and ListTensors return, and the errors: the client's
// own checks before any call, and the server's passed through.

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

#include "client/client.h"
#include "client/tensor_source.h"
#include "core/keyed_rows.h"
#include "core/tensor.h"
#include "server/server.h"
#include "tests/client/test_client.h"
#include "tests/server/test_server.h"
#include "tests/testing/random_tensor.h"
#include "tests/testing/status_matchers.h"

namespace tensorcompute::client {
namespace {

using ::tensorcompute::server::Server;
using ::tensorcompute::server::test_support::StartServer;
using ::tensorcompute::testing::IsOk;
using ::tensorcompute::testing::StatusIs;
using ::testing::HasSubstr;

std::unique_ptr<Client> MakeClient(const Server& server) {
  return test_support::MakeClient(test_support::TestClientOptions(server.port()));
}

// `n` unique keys: the int64 extremes, 0 and -1 among random ones.
std::vector<int64_t> RandomKeys(int64_t n, testing::Rng& rng) {
  std::vector<int64_t> keys;
  absl::flat_hash_set<int64_t> seen;
  for (int64_t k : {INT64_MIN, INT64_MAX, int64_t{0}, int64_t{-1}}) {
    if (static_cast<int64_t>(keys.size()) < n && seen.insert(k).second) keys.push_back(k);
  }
  while (static_cast<int64_t>(keys.size()) < n) {
    const int64_t k = testing::UniformInt(rng, INT64_MIN, INT64_MAX);
    if (seen.insert(k).second) keys.push_back(k);
  }
  std::shuffle(keys.begin(), keys.end(), rng);
  return keys;
}

// A key none of `keys` is.
int64_t AbsentKey(const std::vector<int64_t>& keys, testing::Rng& rng) {
  const absl::flat_hash_set<int64_t> present(keys.begin(), keys.end());
  for (;;) {
    const int64_t k = testing::UniformInt(rng, INT64_MIN, INT64_MAX);
    if (!present.contains(k)) return k;
  }
}

// A float32 [rows, dim] table of small integers (sums and means of them are exact and alike
// whatever the order).
core::Tensor IntegerTable(int64_t rows, int64_t dim, testing::Rng& rng) {
  std::vector<float> values(static_cast<size_t>(rows * dim));
  for (float& v : values) v = static_cast<float>(testing::UniformInt(rng, -8, 8));
  return testing::MakeTensor<float>({rows, dim}, values);
}

// A keyed table and the map the lookups are checked against.
struct KeyedTable {
  core::Tensor rows;          // float32 [n, dim]
  std::vector<int64_t> keys;  // row i's key keys[i]
  core::Tensor keys_tensor;   // int64 [n]
  core::Tensor default_row;   // float32 [dim]
  absl::flat_hash_map<int64_t, int64_t> row_of;

  KeyedTable(core::Tensor rows_in, std::vector<int64_t> keys_in, core::Tensor default_in)
      : rows(std::move(rows_in)),
        keys(std::move(keys_in)),
        keys_tensor(testing::MakeTensor<int64_t>({static_cast<int64_t>(keys.size())}, keys)),
        default_row(std::move(default_in)) {
    for (size_t i = 0; i < keys.size(); ++i) row_of[keys[i]] = static_cast<int64_t>(i);
  }
  size_t row_bytes() const { return rows.bytes().size() / static_cast<size_t>(rows.shape()[0]); }

  // What a gather of `request` (int64 keys) gives under `policy` (kZero or kDefaultRow for a
  // missing key), and the found mask.
  void Expect(const core::Tensor& request, core::MissingKeys policy, std::vector<uint8_t>* out,
              std::vector<uint8_t>* found) const {
    const size_t n = request.bytes().size() / sizeof(int64_t);
    out->assign(n * row_bytes(), 0);
    found->assign(n, 0);
    for (size_t i = 0; i < n; ++i) {
      int64_t key;
      std::memcpy(&key, request.bytes().data() + i * sizeof(int64_t), sizeof(key));
      const auto it = row_of.find(key);
      const uint8_t* from = nullptr;
      if (it != row_of.end()) {
        (*found)[i] = 1;
        from = rows.bytes().data() + static_cast<size_t>(it->second) * row_bytes();
      } else if (policy == core::MissingKeys::kDefaultRow) {
        from = default_row.bytes().data();
      }
      if (from != nullptr) std::memcpy(out->data() + i * row_bytes(), from, row_bytes());
    }
  }
};

KeyedTable RandomKeyedTable(int64_t rows, int64_t dim, testing::Rng& rng) {
  core::Tensor table = IntegerTable(rows, dim, rng);
  std::vector<int64_t> keys = RandomKeys(rows, rng);
  std::vector<float> fallback(static_cast<size_t>(dim));
  for (float& v : fallback) v = static_cast<float>(testing::UniformInt(rng, 9, 99)) + 0.5f;
  return KeyedTable(std::move(table), std::move(keys), testing::MakeTensor<float>({dim}, fallback));
}

// `shape` keys, each present with probability 1/2 (then a random row's key) or absent.
core::Tensor RequestKeys(const KeyedTable& table, const core::Shape& shape, testing::Rng& rng,
                         double present = 0.5) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  std::vector<int64_t> keys(static_cast<size_t>(n));
  for (int64_t& k : keys) {
    k = testing::Chance(rng, present) ? table.keys[static_cast<size_t>(testing::UniformInt(
                                            rng, 0, static_cast<int64_t>(table.keys.size()) - 1))]
                                      : AbsentKey(table.keys, rng);
  }
  return testing::MakeTensor<int64_t>(shape, keys);
}

PutOptions KeyedPut(const KeyedTable& table, core::MissingKeys missing, int64_t capacity) {
  PutOptions options;
  options.chunk_bytes = 100;  // many messages, rows and keys split across them
  options.keys = table.keys_tensor.view();
  options.missing = missing;
  options.default_row = table.default_row.view();
  options.capacity = capacity;
  return options;
}

std::vector<uint8_t> Bytes(const core::Tensor& t) {
  return std::vector<uint8_t>(t.bytes().begin(), t.bytes().end());
}

TEST(KeyedTables, GatherByKeysUnderEveryPolicyMatchesTheMap) {
  auto server = StartServer();
  auto client = MakeClient(*server);
  testing::Rng rng(4201);
  const KeyedTable table = RandomKeyedTable(150, 6, rng);
  auto info =
      client->PutTensor("users", table.rows.view(), KeyedPut(table, core::MissingKeys::kZero, 200));
  ASSERT_THAT(info.status(), IsOk());
  ASSERT_TRUE(info->keyed.has_value());
  EXPECT_EQ(info->keyed->keys, 150);
  EXPECT_EQ(info->keyed->capacity, 200);
  EXPECT_EQ(info->keyed->missing, core::MissingKeys::kZero);
  EXPECT_TRUE(info->keyed->has_default_row);

  for (int round = 0; round < 4; ++round) {
    const core::Tensor request = RequestKeys(table, {3, 7}, rng);
    // kTable is the table's kZero.
    for (core::MissingKeys policy :
         {core::MissingKeys::kTable, core::MissingKeys::kZero, core::MissingKeys::kDefaultRow}) {
      SCOPED_TRACE(core::MissingKeysName(policy));
      auto got = client->GatherByKeys("users", request.view(), {policy, /*return_found=*/true});
      ASSERT_THAT(got.status(), IsOk());
      std::vector<uint8_t> want, found;
      table.Expect(request, policy == core::MissingKeys::kTable ? core::MissingKeys::kZero : policy,
                   &want, &found);
      EXPECT_EQ(got->output.shape(), (core::Shape{3, 7, 6}));
      EXPECT_EQ(Bytes(got->output), want);
      ASSERT_TRUE(got->found.has_value());
      EXPECT_EQ(got->found->dtype(), core::DataType::kBool);
      EXPECT_EQ(got->found->shape(), (core::Shape{3, 7}));
      EXPECT_EQ(Bytes(*got->found), found);
    }
  }
  // Without return_found there is no mask.
  const core::Tensor request = RequestKeys(table, {5}, rng);
  auto no_mask = client->GatherByKeys("users", request.view());
  ASSERT_THAT(no_mask.status(), IsOk());
  EXPECT_FALSE(no_mask->found.has_value());
}

TEST(KeyedTables, ErrorPolicyNamesTheKeyAndPresentKeysMatchGatherByIndices) {
  auto server = StartServer();
  auto client = MakeClient(*server);
  testing::Rng rng(4202);
  const KeyedTable table = RandomKeyedTable(64, 4, rng);
  PutOptions options = KeyedPut(table, core::MissingKeys::kTable, 0);
  options.default_row.reset();
  ASSERT_THAT(client->PutTensor("items", table.rows.view(), options).status(), IsOk());

  const core::Tensor present = RequestKeys(table, {2, 9}, rng, /*present=*/1.0);
  auto by_keys = client->GatherByKeys("items", present.view());
  ASSERT_THAT(by_keys.status(), IsOk());
  std::vector<int64_t> indices;
  for (size_t i = 0; i < 18; ++i) {
    int64_t key;
    std::memcpy(&key, present.bytes().data() + i * sizeof(key), sizeof(key));
    indices.push_back(table.row_of.at(key));
  }
  auto by_indices =
      client->GatherByName("items", testing::MakeTensor<int64_t>({2, 9}, indices).view());
  ASSERT_THAT(by_indices.status(), IsOk());
  EXPECT_TRUE(core::IdenticalTensors(by_keys->output.view(), by_indices->view()));

  const int64_t absent = AbsentKey(table.keys, rng);
  const core::Tensor bad = testing::MakeTensor<int64_t>({2}, {table.keys[0], absent});
  EXPECT_THAT(
      client->GatherByKeys("items", bad.view()).status(),
      StatusIs(absl::StatusCode::kInvalidArgument,
               HasSubstr(absl::StrCat("keys[1] = ", absent, " is not a key of table 'items'"))));
  // The table has no default row; skip is for bags.
  EXPECT_THAT(client->GatherByKeys("items", bad.view(), {core::MissingKeys::kDefaultRow}).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("no default row")));
  EXPECT_THAT(client->GatherByKeys("items", bad.view(), {core::MissingKeys::kSkip}).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("SKIP")));
  // A lookup by keys on a table without keys, and on no table.
  ASSERT_THAT(client->PutTensor("plain", table.rows.view()).status(), IsOk());
  EXPECT_THAT(client->GatherByKeys("plain", bad.view()).status(),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(client->GatherByKeys("nothing", bad.view()).status(),
              StatusIs(absl::StatusCode::kNotFound));
}

TEST(KeyedTables, EmbeddingBagByKeysEqualsTheBagsByIndices) {
  auto server = StartServer();
  auto client = MakeClient(*server);
  testing::Rng rng(4203);
  const KeyedTable table = RandomKeyedTable(80, 5, rng);
  ASSERT_THAT(
      client->PutTensor("emb", table.rows.view(), KeyedPut(table, core::MissingKeys::kError, 0))
          .status(),
      IsOk());
  for (int round = 0; round < 6; ++round) {
    // Keys from the first 60 rows only, so row 79 is free to stand for the missing ones.
    std::vector<int64_t> keys, indices;
    const int64_t n = testing::UniformInt(rng, 1, 20);
    for (int64_t i = 0; i < n; ++i) {
      if (testing::Chance(rng, 0.3)) {
        keys.push_back(AbsentKey(table.keys, rng));
        indices.push_back(79);
      } else {
        const int64_t row = testing::UniformInt(rng, 0, 59);
        keys.push_back(table.keys[static_cast<size_t>(row)]);
        indices.push_back(row);
      }
    }
    std::vector<int64_t> starts = {0};
    for (int64_t i = 1; i < n; ++i) {
      if (testing::Chance(rng, 0.3)) starts.push_back(i);
    }
    const core::Tensor offsets =
        testing::MakeTensor<int64_t>({static_cast<int64_t>(starts.size())}, starts);
    const core::TensorView offsets_view = offsets.view();
    const core::Tensor key_tensor = testing::MakeTensor<int64_t>({n}, keys);
    const core::Tensor index_tensor = testing::MakeTensor<int64_t>({n}, indices);
    for (core::EmbeddingBagMode mode : {core::EmbeddingBagMode::kSum, core::EmbeddingBagMode::kMean,
                                        core::EmbeddingBagMode::kMax}) {
      SCOPED_TRACE(absl::StrCat("round ", round, " mode ", core::EmbeddingBagModeName(mode)));
      EmbeddingBagArgs args;
      args.mode = mode;
      args.offsets = &offsets_view;
      auto by_keys = client->EmbeddingBagByKeys("emb", key_tensor.view(), args,
                                                {core::MissingKeys::kSkip, true});
      ASSERT_THAT(by_keys.status(), IsOk());
      args.padding_idx = 79;  // what skip does: the missing keys add nothing and do not count
      auto by_indices = client->EmbeddingBagByName("emb", index_tensor.view(), args);
      ASSERT_THAT(by_indices.status(), IsOk());
      EXPECT_TRUE(core::IdenticalTensors(by_keys->output.view(), by_indices->view()));
      ASSERT_TRUE(by_keys->found.has_value());
      std::vector<uint8_t> found;
      for (int64_t index : indices) found.push_back(index == 79 ? 0 : 1);
      EXPECT_EQ(Bytes(*by_keys->found), found);
    }
  }
  // padding_idx is for indices.
  EmbeddingBagArgs padded;
  padded.padding_idx = 0;
  const core::Tensor fixed = RequestKeys(table, {2, 3}, rng, 1.0);
  EXPECT_THAT(client->EmbeddingBagByKeys("emb", fixed.view(), padded).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("padding_idx")));
  // The table's policy (error) applies unless the call says otherwise.
  const core::Tensor with_absent =
      testing::MakeTensor<int64_t>({1, 2}, {table.keys[3], AbsentKey(table.keys, rng)});
  EXPECT_THAT(client->EmbeddingBagByKeys("emb", with_absent.view()).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("is not a key of table")));
}

TEST(KeyedTables, PutFromASourceAndListDescribeTheKeys) {
  auto server = StartServer();
  auto client = MakeClient(*server);
  testing::Rng rng(4204);
  const KeyedTable table = RandomKeyedTable(300, 3, rng);
  PutOptions options = KeyedPut(table, core::MissingKeys::kDefaultRow, 0);
  options.chunk_bytes = 40;  // fewer bytes than a row and its key: one key per message at most
  ASSERT_THAT(client->PutTensor("src", SourceOf(table.rows.view()), options).status(), IsOk());
  auto list = client->ListTensors();
  ASSERT_THAT(list.status(), IsOk());
  ASSERT_EQ(list->size(), 1u);
  ASSERT_TRUE((*list)[0].keyed.has_value());
  EXPECT_EQ((*list)[0].keyed->keys, 300);
  EXPECT_EQ((*list)[0].keyed->capacity, 300);
  EXPECT_EQ((*list)[0].keyed->missing, core::MissingKeys::kDefaultRow);

  const core::Tensor request = RequestKeys(table, {40}, rng);
  auto got = client->GatherByKeys("src", request.view());
  ASSERT_THAT(got.status(), IsOk());
  std::vector<uint8_t> want, found;
  table.Expect(request, core::MissingKeys::kDefaultRow, &want, &found);
  EXPECT_EQ(Bytes(got->output), want);

  ASSERT_THAT(client->PutTensor("plain", table.rows.view()).status(), IsOk());
  list = client->ListTensors();
  ASSERT_THAT(list.status(), IsOk());
  for (const TensorInfo& t : *list) EXPECT_EQ(t.keyed.has_value(), t.name == "src") << t.name;
}

TEST(KeyedTables, BadKeysAreRefusedByTheClientOrTheServer) {
  auto server = StartServer();
  auto client = MakeClient(*server);
  testing::Rng rng(4205);
  const KeyedTable table = RandomKeyedTable(10, 2, rng);
  PutOptions options;

  // The client's own checks, before any call.
  const core::Tensor int32_keys = testing::MakeTensor<int32_t>({10}, std::vector<int32_t>(10, 1));
  options.keys = int32_keys.view();
  EXPECT_THAT(client->PutTensor("t", table.rows.view(), options).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("expected int64 [rows]")));
  const core::Tensor short_keys = testing::MakeTensor<int64_t>({9}, std::vector<int64_t>(9, 1));
  options.keys = short_keys.view();
  EXPECT_THAT(client->PutTensor("t", table.rows.view(), options).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("9 keys for 10 rows")));
  PutOptions unkeyed;
  unkeyed.capacity = 20;
  EXPECT_THAT(client->PutTensor("t", table.rows.view(), unkeyed).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("set keys too")));
  unkeyed.capacity = 0;
  unkeyed.missing = core::MissingKeys::kZero;
  EXPECT_THAT(client->PutTensor("t", SourceOf(table.rows.view()), unkeyed).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("set keys too")));

  // The server's: a duplicate key names both positions; a capacity below the rows; a default
  // row of the wrong shape. Nothing is stored.
  std::vector<int64_t> duplicated = table.keys;
  duplicated[7] = duplicated[3];
  const core::Tensor dup = testing::MakeTensor<int64_t>({10}, duplicated);
  options.keys = dup.view();
  options.chunk_bytes = 24;
  EXPECT_THAT(client->PutTensor("t", table.rows.view(), options).status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr(absl::StrCat("keys[7] = ", duplicated[3], " repeats keys[3]"))));
  options = KeyedPut(table, core::MissingKeys::kZero, 5);
  EXPECT_THAT(client->PutTensor("t", table.rows.view(), options).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("capacity 5")));
  const core::Tensor wide = testing::MakeTensor<float>({3}, {1, 2, 3});
  options = KeyedPut(table, core::MissingKeys::kDefaultRow, 0);
  options.default_row = wide.view();
  EXPECT_THAT(client->PutTensor("t", table.rows.view(), options).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("default_row")));
  auto list = client->ListTensors();
  ASSERT_THAT(list.status(), IsOk());
  EXPECT_TRUE(list->empty());
}

}  // namespace
}  // namespace tensorcompute::client
