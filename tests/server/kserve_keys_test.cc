// The KServe v2 codec's lookups by keys (server/kserve/codec.h): a keyed table's model takes
// `keys` in place of `indices`, with the parameters missing and return_found, and answers the
// output "found". Requests are written as the HTTP front end's JSON (json_request.h) and decoded
// by PrepareInfer as both front ends decode them; the keys are resolved by the step
// FillComputeRequest gives the task (as the executor runs it, under no contention here) and the
// output computed as the CPU executor computes it, then checked against a dictionary reference
// on random tables with random keys (the extremes, 0 and negative ones among them). Then the
// errors, in the native API's words, and the metadata and configuration of a keyed table.

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

#include "core/batching/batcher.h"
#include "core/embedding_bag.h"
#include "core/gather.h"
#include "core/keyed_rows.h"
#include "core/tensor_registry.h"
#include "server/kserve/codec.h"
#include "server/kserve/json_request.h"
#include "server/kserve/model_config.h"
#include "tests/testing/status_matchers.h"

namespace tensorcompute::server::kserve {
namespace {

using ::tensorcompute::testing::IsOk;
using ::tensorcompute::testing::StatusIs;
using ::testing::ElementsAre;

constexpr int64_t kDim = 3;

// A keyed float32 [n, kDim] table in a registry, and its reference: key -> row.
struct KeyedTable {
  core::TensorRegistry registry{int64_t{1} << 26};
  std::vector<int64_t> keys;
  std::vector<float> rows;         // n rows, then the zero row, then the default row
  std::map<int64_t, int64_t> row;  // key -> its row
  int64_t n = 0;

  // The row a key gives under `missing` ("zero" or "default"), and whether it was found.
  std::pair<int64_t, bool> Slot(int64_t key, absl::string_view missing) const {
    const auto it = row.find(key);
    if (it != row.end()) return {it->second, true};
    return {missing == "default" ? n + 1 : n, false};
  }
};

// Puts `name` with n rows of random floats under random unique keys (the extremes, 0 and -1
// first), capacity n + 3, policy `missing`, and a default row.
std::unique_ptr<KeyedTable> PutKeyed(std::mt19937_64& rng, const std::string& name, int64_t n,
                                     core::MissingKeys missing) {
  auto t = std::make_unique<KeyedTable>();
  t->n = n;
  t->keys = {INT64_MIN, INT64_MAX, 0, -1};
  while (static_cast<int64_t>(t->keys.size()) < n) {
    const int64_t k = static_cast<int64_t>(rng());
    if (std::find(t->keys.begin(), t->keys.end(), k) == t->keys.end()) t->keys.push_back(k);
  }
  t->keys.resize(static_cast<size_t>(n));
  std::shuffle(t->keys.begin(), t->keys.end(), rng);
  for (int64_t i = 0; i < n; ++i) t->row[t->keys[static_cast<size_t>(i)]] = i;
  std::uniform_real_distribution<float> value(-8, 8);
  const int64_t capacity = n + 3;
  absl::StatusOr<core::Tensor> stored =
      core::Tensor::Allocate(core::DataType::kFloat32, {capacity + core::kKeyedHiddenRows, kDim});
  EXPECT_THAT(stored.status(), IsOk());
  float* out = reinterpret_cast<float*>(stored->mutable_bytes().data());
  std::memset(out, 0, stored->mutable_bytes().size());
  t->rows.resize(static_cast<size_t>((n + 2) * kDim));
  for (int64_t i = 0; i < n * kDim; ++i) t->rows[i] = out[i] = value(rng);
  for (int64_t d = 0; d < kDim; ++d) {
    t->rows[(n + 1) * kDim + d] = out[(capacity + 1) * kDim + d] = value(rng);  // the default
  }
  auto keyed = core::KeyedRows::Build(name, t->keys, capacity, missing, true, nullptr);
  EXPECT_THAT(keyed.status(), IsOk());
  auto reservation = t->registry.Reserve(name, stored->bytes().size());
  EXPECT_THAT(reservation.status(), IsOk());
  auto entry =
      t->registry.Put(name, *std::move(stored), core::DeviceCopy{}, false, *std::move(reservation),
                      core::TableStorage::kAsIs, std::nullopt, *keyed);
  EXPECT_THAT(entry.status(), IsOk());
  return t;
}

// A decoded request, what PrepareInfer made of it, and its answer.
struct Answer {
  absl::Status status;
  std::vector<float> output;
  std::vector<int64_t> output_shape;
  std::vector<uint8_t> found;  // empty: no "found" output
  std::vector<int64_t> found_shape;
};

Answer Infer(const KeyedTable& table, const std::string& model, const std::string& body,
             const core::PlanOptions& options = core::PlanOptions()) {
  Answer answer;
  inference::ModelInferRequest request;
  HttpInferOptions http;
  answer.status = ParseHttpInferRequest(body, std::nullopt, &request, &http);
  if (!answer.status.ok()) return answer;
  request.set_model_name(model);
  InferJob job;
  core::EmbeddingBagOptions bag;
  bag.max_output_bytes = options.max_output_bytes;
  answer.status = PrepareInfer(request, &table.registry, options, bag, &job);
  if (!answer.status.ok()) return answer;
  ComputeRequest compute;
  FillComputeRequest(&job, &compute);
  EXPECT_TRUE(static_cast<bool>(compute.resolve));
  answer.status = std::move(compute.resolve)();
  if (!answer.status.ok()) return answer;
  inference::ModelInferResponse response;
  const core::MutableTensorView out = PrepareInferOutput(&job, &response);
  if (const auto* bag_plan = std::get_if<core::EmbeddingBagPlan>(&job.plan)) {
    answer.status =
        core::ExecuteEmbeddingBag(*bag_plan, compute.params, compute.indices,
                                  bag_plan->fixed_bags() ? nullptr : &compute.offsets,
                                  bag_plan->weighted() ? &compute.weights : nullptr, out);
  } else {
    answer.status = core::ExecuteGather(std::get<core::GatherPlan>(job.plan), compute.params,
                                        compute.indices, out);
  }
  if (!answer.status.ok()) return answer;
  CompleteInferResponse(request, &job, &response);
  EXPECT_EQ(response.outputs_size(), response.raw_output_contents_size());
  EXPECT_EQ(response.outputs(0).name(), "output");
  const std::string& raw = response.raw_output_contents(0);
  answer.output.resize(raw.size() / sizeof(float));
  if (!raw.empty()) std::memcpy(answer.output.data(), raw.data(), raw.size());
  answer.output_shape.assign(response.outputs(0).shape().begin(),
                             response.outputs(0).shape().end());
  if (response.outputs_size() > 1) {
    EXPECT_EQ(response.outputs(1).name(), "found");
    EXPECT_EQ(response.outputs(1).datatype(), "BOOL");
    answer.found.assign(response.raw_output_contents(1).begin(),
                        response.raw_output_contents(1).end());
    answer.found_shape.assign(response.outputs(1).shape().begin(),
                              response.outputs(1).shape().end());
  }
  return answer;
}

std::string KeysInput(const std::vector<int64_t>& keys, const std::vector<int64_t>& shape) {
  return absl::StrCat(R"({"name":"keys","datatype":"INT64","shape":[)", absl::StrJoin(shape, ","),
                      R"(],"data":[)", absl::StrJoin(keys, ","), "]}");
}

// Random lookup keys: present ones and, with probability 1/3 each, keys the table lacks.
std::vector<int64_t> LookupKeys(std::mt19937_64& rng, const KeyedTable& table, int64_t count) {
  std::vector<int64_t> out;
  for (int64_t i = 0; i < count; ++i) {
    if (rng() % 3 == 0) {
      int64_t k = static_cast<int64_t>(rng());
      while (table.row.contains(k)) k = static_cast<int64_t>(rng());
      out.push_back(k);
    } else {
      out.push_back(table.keys[rng() % table.keys.size()]);
    }
  }
  return out;
}

TEST(KserveKeys, GatherByKeysIsTheGatherOfTheirRows) {
  std::mt19937_64 rng(4242);
  const std::unique_ptr<KeyedTable> table = PutKeyed(rng, "users", 40, core::MissingKeys::kZero);
  for (int trial = 0; trial < 40; ++trial) {
    const int64_t rows = static_cast<int64_t>(rng() % 4), cols = static_cast<int64_t>(rng() % 5);
    const std::vector<int64_t> shape =
        trial % 3 == 0 ? std::vector<int64_t>{rows * cols} : std::vector<int64_t>{rows, cols};
    const std::vector<int64_t> keys = LookupKeys(rng, *table, rows * cols);
    const char* missing = trial % 2 == 0 ? "zero" : "default";
    const bool by_output = trial % 4 < 2;
    const std::string body = absl::StrCat(
        R"({"inputs":[)", KeysInput(keys, shape), R"(],"parameters":{"missing":")", missing,
        by_output ? R"("},"outputs":[{"name":"output"},{"name":"found"}]})"
                  : R"(","return_found":true}})");
    const Answer answer = Infer(*table, "users", body);
    ASSERT_THAT(answer.status, IsOk()) << body;
    std::vector<int64_t> want_shape = shape;
    want_shape.push_back(kDim);
    EXPECT_EQ(answer.output_shape, want_shape);
    EXPECT_EQ(answer.found_shape, shape);
    ASSERT_EQ(answer.output.size(), keys.size() * kDim);
    ASSERT_EQ(answer.found.size(), keys.size());
    for (size_t i = 0; i < keys.size(); ++i) {
      const auto [slot, found] = table->Slot(keys[i], missing);
      EXPECT_EQ(answer.found[i], found ? 1 : 0) << keys[i];
      for (int64_t d = 0; d < kDim; ++d) {
        EXPECT_EQ(answer.output[i * kDim + d], table->rows[slot * kDim + d]) << keys[i];
      }
    }
  }
}

TEST(KserveKeys, EmbeddingBagSkipsMissingKeysAsPaddingRows) {
  std::mt19937_64 rng(4243);
  const std::unique_ptr<KeyedTable> table = PutKeyed(rng, "bags", 30, core::MissingKeys::kError);
  for (int trial = 0; trial < 30; ++trial) {
    const int64_t bags = static_cast<int64_t>(rng() % 4) + 1, per = static_cast<int64_t>(rng() % 4);
    const std::vector<int64_t> keys = LookupKeys(rng, *table, bags * per);
    const std::string body =
        absl::StrCat(R"({"inputs":[)", KeysInput(keys, {bags, per}),
                     R"(],"parameters":{"op":"embedding_bag","mode":"sum","missing":"SKIP"}})");
    const Answer answer = Infer(*table, "bags", body);
    ASSERT_THAT(answer.status, IsOk()) << body;
    EXPECT_THAT(answer.output_shape, ElementsAre(bags, kDim));
    EXPECT_TRUE(answer.found.empty());
    for (int64_t b = 0; b < bags; ++b) {
      for (int64_t d = 0; d < kDim; ++d) {
        float sum = 0;  // in key order from +0, as the server sums
        for (int64_t j = 0; j < per; ++j) {
          const auto [slot, found] = table->Slot(keys[b * per + j], "zero");
          if (found) sum += table->rows[slot * kDim + d];
        }
        EXPECT_EQ(answer.output[b * kDim + d], sum) << body;
      }
    }
  }
}

TEST(KserveKeys, ErrorsAreTheNativeApis) {
  std::mt19937_64 rng(4244);
  const std::unique_ptr<KeyedTable> table = PutKeyed(rng, "users", 8, core::MissingKeys::kError);
  int64_t absent = 90210;
  while (table->row.contains(absent)) ++absent;
  const std::string key0 = absl::StrCat(table->keys[0]);
  auto infer = [&](const std::string& inputs, const std::string& parameters) {
    return Infer(*table, "users",
                 absl::StrCat(R"({"inputs":[)", inputs, R"(],"parameters":{)", parameters, "}}"))
        .status;
  };
  const std::string keys = KeysInput({table->keys[0], absent}, {2, 1});
  EXPECT_THAT(infer(keys, ""),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       absl::StrCat("keys[1,0] = ", absent, " is not a key of table 'users'")));
  EXPECT_THAT(
      infer(absl::StrCat(keys, R"(,{"name":"indices","datatype":"INT64","shape":[1],"data":[0]})"),
            ""),
      StatusIs(absl::StatusCode::kInvalidArgument, "set either indices or keys, not both"));
  EXPECT_THAT(infer(keys, R"("op":"gather_nd")"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "op \"gather_nd\" does not take keys: a key names a whole row, which is "
                       "op \"gather\" along axis 0"));
  EXPECT_THAT(infer(keys, R"("missing":"skip")"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "missing=SKIP is for EmbeddingBag: a Gather answers a row for every key"));
  EXPECT_THAT(infer(keys, R"("batch_dims":1)"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "a Gather by keys is along axis 0 without batch_dims (a key names a "
                       "whole row)"));
  EXPECT_THAT(infer(R"({"name":"indices","datatype":"INT64","shape":[1],"data":[0]})",
                    R"("return_found":true)"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "missing and return_found are for lookups by keys; the request sends "
                       "indices"));
  EXPECT_THAT(infer(KeysInput({1}, {1}), R"("missing":1)"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       ::testing::HasSubstr("parameter 'missing' must be the string")));
  EXPECT_THAT(infer(KeysInput({1}, {1}), R"("return_found":"yes")"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "parameter 'return_found' must be a boolean (bool_param)"));
  EXPECT_THAT(infer(R"({"name":"keys","datatype":"INT32","shape":[1],"data":[1]})", ""),
              StatusIs(absl::StatusCode::kInvalidArgument, "keys: keys are int64, got int32 [1]"));
  // The server's bounds hold before the keys are resolved (no slot written, no found mask):
  // keys of rank 3 under max_rank 2, and an output past max_output_bytes, for both ops.
  core::PlanOptions small;
  small.max_rank = 2;
  EXPECT_THAT(
      Infer(*table, "users", absl::StrCat(R"({"inputs":[)", KeysInput({1}, {1, 1, 1}), "]}"), small)
          .status,
      StatusIs(absl::StatusCode::kInvalidArgument, ::testing::StartsWith("keys: ")));
  small = core::PlanOptions();
  small.max_output_bytes = 5 * kDim * sizeof(float) - 1;
  const std::vector<int64_t> five(5, table->keys[0]);
  for (const std::string& body : {absl::StrCat(R"({"inputs":[)", KeysInput(five, {5}),
                                               R"(],"parameters":{"return_found":true}})"),
                                  absl::StrCat(R"({"inputs":[)", KeysInput(five, {5, 1}),
                                               R"(],"parameters":{"op":"embedding_bag"}})")}) {
    EXPECT_THAT(Infer(*table, "users", body, small).status,
                StatusIs(absl::StatusCode::kResourceExhausted))
        << body;
  }

  // A table without keys: named, in the native API's words.
  core::TensorRegistry& registry = table->registry;
  absl::StatusOr<core::Tensor> plain = core::Tensor::Allocate(core::DataType::kFloat32, {2, 2});
  ASSERT_THAT(plain.status(), IsOk());
  auto reservation = registry.Reserve("plain", 16);
  ASSERT_THAT(reservation.status(), IsOk());
  ASSERT_THAT(
      registry.Put("plain", *std::move(plain), core::DeviceCopy{}, false, *std::move(reservation))
          .status(),
      IsOk());
  EXPECT_THAT(Infer(*table, "plain", absl::StrCat(R"({"inputs":[)", keys, "]}")).status,
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "table 'plain' has no keys (put it with keys); look it up by indices"));
  EXPECT_THAT(Infer(*table, "plain",
                    R"({"inputs":[{"name":"indices","datatype":"INT64","shape":[1],"data":[0]}],
                        "outputs":[{"name":"found"}]})")
                  .status,
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "output 'found' is for lookups by keys; the request sends indices"));
}

TEST(KserveKeys, KeyedLookupBytesCountsTheKeysSentUpToTheShape) {
  inference::ModelInferRequest request;
  EXPECT_EQ(KeyedLookupBytes(request).bytes, 0);
  auto* keys = request.add_inputs();
  keys->set_name("keys");
  keys->set_datatype("INT64");
  keys->add_shape(1000000000);  // claimed; 5 sent
  for (int64_t k = 0; k < 5; ++k) keys->mutable_contents()->add_int64_contents(k);
  EXPECT_EQ(KeyedLookupBytes(request).keys, 5);
  EXPECT_EQ(KeyedLookupBytes(request).bytes, 40);
  (*request.mutable_parameters())["return_found"].set_bool_param(true);
  EXPECT_EQ(KeyedLookupBytes(request).bytes, 45);
  request.mutable_parameters()->clear();
  request.add_outputs()->set_name("found");
  EXPECT_EQ(KeyedLookupBytes(request).bytes, 45);
  // Raw: the bytes sent, up to the shape's count.
  keys->clear_contents();
  keys->clear_shape();
  keys->add_shape(3);
  request.add_raw_input_contents(std::string(8 * 4, '\0'));
  EXPECT_EQ(KeyedLookupBytes(request).keys, 3);
  keys->set_datatype("INT32");  // refused before it has slots
  EXPECT_EQ(KeyedLookupBytes(request).bytes, 0);
}

TEST(KserveKeys, MetadataAndConfigListKeysAndFound) {
  std::mt19937_64 rng(4245);
  const std::unique_ptr<KeyedTable> table = PutKeyed(rng, "users", 6, core::MissingKeys::kZero);
  absl::StatusOr<inference::ModelMetadataResponse> metadata =
      ModelMetadata("users", "", &table->registry);
  ASSERT_THAT(metadata.status(), IsOk());
  std::vector<std::string> inputs, outputs;
  for (const auto& input : metadata->inputs()) {
    inputs.push_back(absl::StrCat(input.name(), ":", input.datatype()));
  }
  for (const auto& output : metadata->outputs()) {
    outputs.push_back(absl::StrCat(output.name(), ":", output.datatype()));
  }
  EXPECT_THAT(inputs, ElementsAre("indices:INT64", "keys:INT64"));
  EXPECT_THAT(outputs, ElementsAre("output:FP32", "found:BOOL"));

  absl::StatusOr<inference::ModelConfigResponse> config =
      ModelConfig("users", "", &table->registry, batching::BatcherOptions());
  ASSERT_THAT(config.status(), IsOk());
  ASSERT_EQ(config->config().input_size(), 2);
  EXPECT_EQ(config->config().input(1).name(), "keys");
  EXPECT_EQ(config->config().input(1).data_type(), inference::TYPE_INT64);
  EXPECT_TRUE(config->config().input(0).optional());
  EXPECT_TRUE(config->config().input(1).optional());
  ASSERT_EQ(config->config().output_size(), 2);
  EXPECT_EQ(config->config().output(1).data_type(), inference::TYPE_BOOL);
  const auto& parameters = config->config().parameters();
  EXPECT_EQ(parameters.at("keyed").string_value(), "true");
  EXPECT_EQ(parameters.at("missing").string_value(), "zero");
  EXPECT_EQ(parameters.at("default_row").string_value(), "true");
  EXPECT_EQ(parameters.at("capacity").string_value(), "9");
  EXPECT_EQ(parameters.at("keys").string_value(), "6");
}

}  // namespace
}  // namespace tensorcompute::server::kserve
