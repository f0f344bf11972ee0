// The KServe v2 codec's embedding_bag (server/kserve/codec.h): the model, a table's
// op = "embedding_bag", their parameters and errors. Requests are written as the HTTP front
// end's JSON (server/kserve/json_request.h) and decoded by PrepareInfer as both front ends decode
// them; the outputs are compared with core::EmbeddingBag on the same tensors.

#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

#include "core/embedding_bag.h"
#include "core/tensor_registry.h"
#include "server/kserve/codec.h"
#include "server/kserve/json_request.h"
#include "tests/testing/status_matchers.h"

namespace tensorcompute::server::kserve {
namespace {

using ::tensorcompute::testing::IsOk;
using ::tensorcompute::testing::StatusIs;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

// The limits the server plans with (ComputeEntry::plan_options, embedding_bag_options).
core::EmbeddingBagOptions BagOptions(int64_t max_output_bytes = int64_t{1} << 30) {
  core::EmbeddingBagOptions options;
  options.max_output_bytes = max_output_bytes;
  return options;
}

// A decoded request and what PrepareInfer made of it.
struct Prepared {
  inference::ModelInferRequest request;
  InferJob job;
  absl::Status status;
};

std::unique_ptr<Prepared> Prepare(const std::string& model, const std::string& body,
                                  const core::TensorRegistry* registry = nullptr,
                                  const core::EmbeddingBagOptions& bag = BagOptions()) {
  auto p = std::make_unique<Prepared>();
  HttpInferOptions options;
  p->status = ParseHttpInferRequest(body, std::nullopt, &p->request, &options);
  if (!p->status.ok()) return p;
  p->request.set_model_name(model);
  p->status = PrepareInfer(p->request, registry, core::PlanOptions(), bag, &p->job);
  return p;
}

// The output PrepareInferOutput slots, computed as the CPU executor computes a lookup.
std::vector<float> Compute(Prepared* p) {
  const auto& plan = std::get<core::EmbeddingBagPlan>(p->job.plan);
  inference::ModelInferResponse response;
  const core::MutableTensorView out = PrepareInferOutput(&p->job, &response);
  EXPECT_THAT(core::ExecuteEmbeddingBag(plan, p->job.params, p->job.indices,
                                        plan.fixed_bags() ? nullptr : &p->job.offsets,
                                        plan.weighted() ? &p->job.weights : nullptr, out),
              IsOk());
  CompleteInferResponse(p->request, &p->job, &response);
  EXPECT_EQ(response.outputs(0).name(), "output");
  EXPECT_EQ(response.outputs(0).datatype(), "FP32");
  std::vector<float> values(out.data.size() / sizeof(float));
  std::memcpy(values.data(), response.raw_output_contents(0).data(), out.data.size());
  return values;
}

// core::EmbeddingBag's answer for float32 tensors given as vectors.
std::vector<float> Expected(std::vector<float> params, core::Shape params_shape,
                            std::vector<int64_t> indices, core::Shape indices_shape,
                            std::vector<int32_t> offsets, std::vector<float> weights,
                            const core::EmbeddingBagOptions& options) {
  auto view = [](core::DataType dtype, core::Shape shape, const void* data, size_t bytes) {
    core::TensorView v;
    v.dtype = dtype;
    v.shape = std::move(shape);
    v.data = absl::Span<const uint8_t>(static_cast<const uint8_t*>(data), bytes);
    return v;
  };
  const core::TensorView p =
      view(core::DataType::kFloat32, params_shape, params.data(), params.size() * sizeof(float));
  const core::TensorView i =
      view(core::DataType::kInt64, indices_shape, indices.data(), indices.size() * sizeof(int64_t));
  const core::TensorView o = view(core::DataType::kInt32, {static_cast<int64_t>(offsets.size())},
                                  offsets.data(), offsets.size() * sizeof(int32_t));
  const core::TensorView w =
      view(core::DataType::kFloat32, indices_shape, weights.data(), weights.size() * sizeof(float));
  absl::StatusOr<core::Tensor> t = core::EmbeddingBag(p, i, offsets.empty() ? nullptr : &o,
                                                      weights.empty() ? nullptr : &w, options);
  EXPECT_THAT(t.status(), IsOk());
  if (!t.ok()) return {};
  std::vector<float> values(t->view().data.size() / sizeof(float));
  std::memcpy(values.data(), t->view().data.data(), t->view().data.size());
  return values;
}

constexpr char kParams[] =
    R"({"name":"params","datatype":"FP32","shape":[4,2],"data":[1,2,3,4,5,6,7,8]})";

TEST(KserveEmbeddingBag, OffsetsModeAndIncludeLastOffset) {
  std::unique_ptr<Prepared> p = Prepare("embedding_bag", std::string(R"({"inputs":[)") + kParams +
                                                             R"(,
      {"name":"indices","datatype":"INT64","shape":[5],"data":[0,1,-1,3,1]},
      {"name":"offsets","datatype":"INT32","shape":[3],"data":[0,2,5]}],
      "parameters":{"mode":"MeAn","include_last_offset":true}})");
  ASSERT_THAT(p->status, IsOk());
  const auto* plan = std::get_if<core::EmbeddingBagPlan>(&p->job.plan);
  ASSERT_NE(plan, nullptr);
  EXPECT_EQ(plan->mode, core::EmbeddingBagMode::kMean);
  EXPECT_EQ(plan->bags, 2);
  EXPECT_THAT(plan->output_shape, ElementsAre(2, 2));
  core::EmbeddingBagOptions options;
  options.mode = core::EmbeddingBagMode::kMean;
  options.include_last_offset = true;
  EXPECT_EQ(Compute(p.get()), Expected({1, 2, 3, 4, 5, 6, 7, 8}, {4, 2}, {0, 1, -1, 3, 1}, {5},
                                       {0, 2, 5}, {}, options));
  EXPECT_EQ(Compute(p.get()), (std::vector<float>{2, 3, 17.0f / 3, 20.0f / 3}));
}

TEST(KserveEmbeddingBag, FixedBagsWithWeightsAndPadding) {
  std::unique_ptr<Prepared> p = Prepare("embedding_bag", std::string(R"({"inputs":[)") + kParams +
                                                             R"(,
      {"name":"indices","datatype":"INT64","shape":[2,3],"data":[[0,3,1],[2,-1,3]]},
      {"name":"per_sample_weights","datatype":"FP32","shape":[2,3],"data":[[0.5,2,-1],[3,4,5]]}],
      "parameters":{"mode":"sqrtn","padding_idx":-1}})");
  ASSERT_THAT(p->status, IsOk());
  core::EmbeddingBagOptions options;
  options.mode = core::EmbeddingBagMode::kSqrtn;
  options.padding_idx = -1;
  const std::vector<float> got = Compute(p.get());
  EXPECT_EQ(got, Expected({1, 2, 3, 4, 5, 6, 7, 8}, {4, 2}, {0, 3, 1, 2, -1, 3}, {2, 3}, {},
                          {0.5f, 2, -1, 3, 4, 5}, options));
  // Bag 1 is row 2 alone (rows 3 are padding): 3 * [5, 6] / sqrt(9).
  EXPECT_THAT(std::vector<float>(got.begin() + 2, got.end()), ElementsAre(5.0f, 6.0f));
}

TEST(KserveEmbeddingBag, ATableTakesOpEmbeddingBag) {
  core::TensorRegistry registry(1 << 20);
  const std::vector<float> values = {1, 2, 3, 4, 5, 6, 7, 8};
  absl::StatusOr<core::Tensor> table = core::Tensor::FromBytes(
      core::DataType::kFloat32, {4, 2},
      absl::Span<const uint8_t>(reinterpret_cast<const uint8_t*>(values.data()), 32));
  ASSERT_THAT(table.status(), IsOk());
  absl::StatusOr<core::TensorRegistry::Reservation> reservation = registry.Reserve("emb", 32);
  ASSERT_THAT(reservation.status(), IsOk());
  ASSERT_THAT(
      registry.Put("emb", *std::move(table), core::DeviceCopy{}, false, *std::move(reservation))
          .status(),
      IsOk());

  std::unique_ptr<Prepared> p = Prepare("emb", R"({"inputs":[
      {"name":"indices","datatype":"INT32","shape":[2,2],"data":[[3,0],[1,1]]}],
      "parameters":{"op":"embedding_bag","mode":"max"}})",
                                        &registry);
  ASSERT_THAT(p->status, IsOk());
  EXPECT_NE(p->job.table, nullptr);
  EXPECT_EQ(Compute(p.get()), (std::vector<float>{7, 8, 3, 4}));

  // The default op is still the gather.
  p = Prepare("emb", R"({"inputs":[{"name":"indices","datatype":"INT32","shape":[1],"data":[2]}]})",
              &registry);
  ASSERT_THAT(p->status, IsOk());
  EXPECT_TRUE(std::holds_alternative<core::GatherPlan>(p->job.plan));

  struct Case {
    std::string body;
    std::string message;
  };
  const std::string indices = R"({"name":"indices","datatype":"INT32","shape":[1],"data":[2]})";
  const std::string offsets = R"({"name":"offsets","datatype":"INT32","shape":[1],"data":[0]})";
  const Case cases[] = {
      {R"({"inputs":[)" + indices + R"(],"parameters":{"op":"pool"}})",
       "parameter 'op' must be the string \"gather\" (the default), \"gather_nd\" or "
       "\"embedding_bag\""},
      {R"({"inputs":[)" + indices + R"(],"parameters":{"op":"embedding_bag","axis":0}})",
       "parameter 'axis' is for op \"gather\", not \"embedding_bag\""},
      {R"({"inputs":[)" + indices + R"(],"parameters":{"op":"embedding_bag","batch_dims":0}})",
       "parameter 'batch_dims' is for op \"gather\" or \"gather_nd\", not \"embedding_bag\""},
      {R"({"inputs":[)" + indices + R"(],"parameters":{"mode":"sum"}})",
       "parameter 'mode' is for op \"embedding_bag\", not \"gather\""},
      {R"({"inputs":[)" + indices + R"(],"parameters":{"op":"gather_nd","axis":0}})",
       "parameter 'axis' is for op \"gather\", not \"gather_nd\""},
      {R"({"inputs":[)" + indices + "," + offsets + "]}",
       "unknown input 'offsets': model 'emb' takes indices with op \"gather\" (offsets is for op "
       "\"embedding_bag\")"},
      {R"({"inputs":[)" + std::string(kParams) + "," + indices + R"(],
          "parameters":{"op":"embedding_bag"}})",
       "unknown input 'params': model 'emb' takes indices, and optionally offsets and "
       "per_sample_weights"},
      {R"({"inputs":[)" + indices + R"(],"parameters":{"op":"embedding_bag","pad":1}})",
       "unknown parameter 'pad': this model takes op, axis, batch_dims, mode, "
       "include_last_offset, padding_idx"},
  };
  for (const Case& c : cases) {
    EXPECT_THAT(Prepare("emb", c.body, &registry)->status,
                StatusIs(absl::StatusCode::kInvalidArgument, c.message))
        << c.body;
  }
}

TEST(KserveEmbeddingBag, ErrorsNameTheParameterOrInput) {
  const std::string params = kParams;
  const std::string indices = R"({"name":"indices","datatype":"INT64","shape":[2],"data":[0,1]})";
  const std::string offsets = R"({"name":"offsets","datatype":"INT64","shape":[1],"data":[0]})";
  const std::string both = R"({"inputs":[)" + params + "," + indices + "," + offsets + "]";
  struct Case {
    std::string body;
    std::string message;
  };
  const Case cases[] = {
      {both + R"(,"parameters":{"mode":"median"}})",
       "parameter 'mode' must be the string \"sum\" (the default), \"mean\", \"max\" or "
       "\"sqrtn\" (in any case), not \"median\""},
      {both + R"(,"parameters":{"mode":3}})", "(in any case) (string_param)"},
      {both + R"(,"parameters":{"mode":"\u0001x"}})", R"(not "\x01x")"},
      {both + R"(,"parameters":{"mode":")" + std::string(100, 'a') + R"("}})",
       "not \"" + std::string(64, 'a') + "...\""},
      {both + R"(,"parameters":{"include_last_offset":1}})",
       "parameter 'include_last_offset' must be a boolean (bool_param)"},
      {both + R"(,"parameters":{"padding_idx":"0"}})",
       "parameter 'padding_idx' must be an integer (int64_param)"},
      {both + R"(,"parameters":{"axis":0}})",
       "unknown parameter 'axis': this model takes mode, include_last_offset, padding_idx"},
      {R"({"inputs":[)" + indices + "," + offsets + "]}",
       "model 'embedding_bag' takes params and indices, and optionally offsets and "
       "per_sample_weights; missing params"},
      {R"({"inputs":[)" + params + "," + offsets + "]}",
       "model 'embedding_bag' takes params and indices, and optionally offsets and "
       "per_sample_weights; missing indices"},
      {R"({"inputs":[)" + params + "," + indices + "," + offsets +
           R"(,{"name":"weights","datatype":"FP32","shape":[2],"data":[1,1]}]})",
       "unknown input 'weights': model 'embedding_bag' takes params and indices, and optionally "
       "offsets and per_sample_weights"},
      {R"({"inputs":[)" + params + "," + offsets + "," + offsets + "]}",
       "input 'offsets' is given twice"},
      // core's own messages, passed through.
      {R"({"inputs":[)" + params + "," + indices + "]}", "indices of rank 1 need offsets"},
      {both + R"(,"parameters":{"padding_idx":4}})", "padding_idx"},
      {R"({"inputs":[)" + params + "," + indices + "," + offsets +
           R"(,{"name":"per_sample_weights","datatype":"FP32","shape":[2],"data":[1,1]}],
           "parameters":{"mode":"max"}})",
       "not supported with mode MAX"},
  };
  for (const Case& c : cases) {
    EXPECT_THAT(Prepare("embedding_bag", c.body)->status,
                StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr(c.message)))
        << c.body;
  }
  // An out-of-range index is found as the lookup runs, as for the native call.
  std::unique_ptr<Prepared> p = Prepare("embedding_bag", R"({"inputs":[)" + params + R"(,
          {"name":"indices","datatype":"INT64","shape":[1,2],"data":[[0,9]]}]})");
  ASSERT_THAT(p->status, IsOk());
  const auto& plan = std::get<core::EmbeddingBagPlan>(p->job.plan);
  inference::ModelInferResponse response;
  EXPECT_THAT(core::ExecuteEmbeddingBag(plan, p->job.params, p->job.indices, nullptr, nullptr,
                                        PrepareInferOutput(&p->job, &response)),
              StatusIs(absl::StatusCode::kInvalidArgument, "indices[0,1] = 9 is not in [-4, 4)"));
  // The server's output limit applies.
  EXPECT_THAT(Prepare("embedding_bag", both + "}", nullptr, BagOptions(7))->status,
              StatusIs(absl::StatusCode::kResourceExhausted));
}

TEST(KserveEmbeddingBag, MetadataListsItsInputsAndItIsReady) {
  absl::StatusOr<inference::ModelMetadataResponse> metadata =
      ModelMetadata("embedding_bag", "", nullptr);
  ASSERT_THAT(metadata.status(), IsOk());
  std::vector<std::string> inputs;
  for (const auto& input : metadata->inputs()) inputs.push_back(input.name());
  EXPECT_THAT(inputs, ElementsAre("params", "indices", "offsets", "per_sample_weights"));
  EXPECT_THAT(metadata->inputs(0).shape(), ElementsAre(-1, -1));
  ASSERT_EQ(metadata->outputs_size(), 1);
  EXPECT_EQ(metadata->outputs(0).name(), "output");
  EXPECT_THAT(metadata->outputs(0).shape(), ElementsAre(-1, -1));
  const absl::StatusOr<bool> ready = ModelReady("embedding_bag", "1", nullptr);
  ASSERT_THAT(ready.status(), IsOk());
  EXPECT_TRUE(*ready);
  EXPECT_THAT(ModelReady("embedding_bag", "2", nullptr).status(),
              StatusIs(absl::StatusCode::kNotFound));
}

}  // namespace
}  // namespace tensorcompute::server::kserve
