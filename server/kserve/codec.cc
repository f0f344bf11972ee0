#include "server/kserve/codec.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

#include "core/shape.h"
#include "core/status_macros.h"
#include "proto/decoded_cost.h"
#include "proto/kserve_wire.h"
#include "server/compute/table_plans.h"
#include "server/kserve/infer_input.h"
#include "server/kserve/infer_parameters.h"

namespace tensorcompute::server::kserve {
namespace {

using core::DataType;
using inference::InferParameter;
using inference::ModelInferRequest;

// What a request computes: the built-in model's operation, or a table's `op`, named as the
// built-in model of that operation.
using Op = BuiltinModel;

absl::string_view OpName(Op op) { return BuiltinModelName(op); }

// The parameters of the operations, and which operations take each.
struct OpParameter {
  absl::string_view name;
  Op ops[2];
  int num_ops;
  bool table_only;  // a lookup by keys' (only a keyed table's model takes it)
};
constexpr OpParameter kOpParameters[] = {
    {"axis", {Op::kGather}, 1, false},
    {"batch_dims", {Op::kGather, Op::kGatherNd}, 2, false},
    {"mode", {Op::kEmbeddingBag}, 1, false},
    {"include_last_offset", {Op::kEmbeddingBag}, 1, false},
    {"padding_idx", {Op::kEmbeddingBag}, 1, false},
    {"missing", {Op::kGather, Op::kEmbeddingBag}, 2, true},
    {"return_found", {Op::kGather, Op::kEmbeddingBag}, 2, true},
};

bool Takes(const OpParameter& parameter, Op op) {
  for (int i = 0; i < parameter.num_ops; ++i) {
    if (parameter.ops[i] == op) return true;
  }
  return false;
}

}  // namespace

absl::StatusOr<Model> FindModel(absl::string_view name, absl::string_view version,
                                const core::TensorRegistry* registry) {
  Model model;
  if (name == kGatherModel) {
    model.kind = ModelKind::kGather;
  } else if (name == kGatherNdModel) {
    model.kind = ModelKind::kGatherNd;
  } else if (name == kEmbeddingBagModel) {
    model.kind = ModelKind::kEmbeddingBag;
  } else {
    if (registry != nullptr && !name.empty()) model.table = registry->Find(name);
    if (model.table == nullptr) {
      return absl::NotFoundError(
          absl::StrCat("model '", name,
                       "' not found: the models are 'gather', 'gather_nd', 'embedding_bag' and "
                       "every resident tensor by its name (ListTensors lists them)"));
    }
    model.kind = ModelKind::kTable;
  }
  if (!version.empty() && version != kModelVersion) {
    return absl::NotFoundError(absl::StrCat("model '", name, "' has no version '", version,
                                            "': its only version is '1' (or leave it empty)"));
  }
  return model;
}

namespace {

// Checks that every request parameter is one this model knows: a built-in model's operation's
// parameters; for a table, `op` and those of every operation (a lookup by keys' only for a keyed
// table). Triton's own request parameters (which tritonclient may send) are accepted and ignored.
absl::Status CheckParameterNames(const InferParameters& parameters, const Model& model) {
  const ModelKind kind = model.kind;
  const bool keyed = model.table != nullptr && model.table->keyed != nullptr;
  static constexpr absl::string_view kIgnored[] = {
      "priority",           "timeout", "sequence_id", "sequence_start", "sequence_end",
      "binary_data_output", "headers"};
  std::vector<absl::string_view> known;
  if (kind == ModelKind::kTable) known.push_back("op");
  for (const OpParameter& p : kOpParameters) {
    if (p.table_only && !keyed) continue;
    if (kind == ModelKind::kTable || (kind == ModelKind::kGather && Takes(p, Op::kGather)) ||
        (kind == ModelKind::kGatherNd && Takes(p, Op::kGatherNd)) ||
        (kind == ModelKind::kEmbeddingBag && Takes(p, Op::kEmbeddingBag))) {
      known.push_back(p.name);
    }
  }
  for (const auto& [name, value] : parameters) {
    bool ok = false;
    for (absl::string_view k : known) ok = ok || name == k;
    for (absl::string_view k : kIgnored) ok = ok || name == k;
    if (!ok) {
      return absl::InvalidArgumentError(absl::StrCat(
          "unknown parameter '", name, "': this model takes ", absl::StrJoin(known, ", ")));
    }
  }
  return absl::OkStatus();
}

// The operation a request asks for. A table's is its `op` parameter, and it may then have only
// that operation's parameters ("parameter 'axis' is for op \"gather\", not \"gather_nd\"").
absl::StatusOr<Op> FindOp(const InferParameters& parameters, ModelKind kind) {
  switch (kind) {
    case ModelKind::kGather:
      return Op::kGather;
    case ModelKind::kGatherNd:
      return Op::kGatherNd;
    case ModelKind::kEmbeddingBag:
      return Op::kEmbeddingBag;
    case ModelKind::kTable:
      break;
  }
  Op op = Op::kGather;
  if (const auto it = parameters.find("op"); it != parameters.end()) {
    const InferParameter& p = it->second;
    const absl::string_view name = p.parameter_choice_case() == InferParameter::kStringParam
                                       ? absl::string_view(p.string_param())
                                       : absl::string_view();
    if (name == OpName(Op::kGatherNd)) {
      op = Op::kGatherNd;
    } else if (name == OpName(Op::kEmbeddingBag)) {
      op = Op::kEmbeddingBag;
    } else if (name != OpName(Op::kGather)) {
      return absl::InvalidArgumentError(
          "parameter 'op' must be the string \"gather\" (the default), \"gather_nd\" or "
          "\"embedding_bag\"");
    }
  }
  for (const OpParameter& p : kOpParameters) {
    if (Takes(p, op) || !parameters.contains(std::string(p.name))) continue;
    std::vector<std::string> owners;
    for (int i = 0; i < p.num_ops; ++i)
      owners.push_back(absl::StrCat("\"", OpName(p.ops[i]), "\""));
    return absl::InvalidArgumentError(absl::StrCat("parameter '", p.name, "' is for op ",
                                                   absl::StrJoin(owners, " or "), ", not \"",
                                                   OpName(op), "\""));
  }
  return op;
}

// Where each input is in the request (-1: absent).
struct InputSlots {
  int params = -1;
  int indices = -1;
  int keys = -1;
  int offsets = -1;
  int weights = -1;
};

// Finds the inputs `op` takes (params only when it does not come from a table, keys only on a
// table's model) and checks that no other is there and none is missing. The messages say what
// the model takes: "model 'emb' takes indices", "model 'users' takes indices or keys",
// "model 'embedding_bag' takes params and indices, and optionally offsets and
// per_sample_weights". Whether the table has keys is the keyed lookup's check
// (server/compute/keyed_lookup.h), made with the native API's words.
absl::StatusOr<InputSlots> FindInputs(const ModelInferRequest& request,
                                      const core::ResidentTensor* table, Op op) {
  const bool bag = op == Op::kEmbeddingBag;
  const bool keyed = table != nullptr && table->keyed != nullptr && op != Op::kGatherNd;
  const std::vector<absl::string_view> required =
      table != nullptr ? std::vector<absl::string_view>{keyed ? "indices or keys" : "indices"}
                       : std::vector<absl::string_view>{"params", "indices"};
  std::string takes = absl::StrJoin(required, " and ");
  if (bag) absl::StrAppend(&takes, ", and optionally offsets and per_sample_weights");
  InputSlots slots;
  for (int i = 0; i < request.inputs_size(); ++i) {
    const std::string& name = request.inputs(i).name();
    if (name == "keys" && table != nullptr && op == Op::kGatherNd) {
      return absl::InvalidArgumentError(
          "op \"gather_nd\" does not take keys: a key names a whole row, which is op "
          "\"gather\" along axis 0");
    }
    int* slot = name == "indices"                        ? &slots.indices
                : (table != nullptr && name == "keys")   ? &slots.keys
                : (table == nullptr && name == "params") ? &slots.params
                : (bag && name == "offsets")             ? &slots.offsets
                : (bag && name == "per_sample_weights")  ? &slots.weights
                                                         : nullptr;
    if (slot == nullptr) {
      const bool bag_input = name == "offsets" || name == "per_sample_weights";
      std::string why;
      if (table != nullptr && bag_input) {
        why =
            absl::StrCat(" with op \"", OpName(op), "\" (", name, " is for op \"embedding_bag\")");
      } else if (table == nullptr && name == "keys") {
        why = " (keys are for a resident table put with keys: use the table's model)";
      }
      return absl::InvalidArgumentError(absl::StrCat("unknown input '", name, "': model '",
                                                     request.model_name(), "' takes ", takes, why));
    }
    if (*slot >= 0) {
      return absl::InvalidArgumentError(absl::StrCat("input '", name, "' is given twice"));
    }
    *slot = i;
    if (request.raw_input_contents_size() > 0 && request.inputs(i).has_contents()) {
      return absl::InvalidArgumentError(
          absl::StrCat("input '", name,
                       "' has contents while raw_input_contents is used: use one or the "
                       "other for all inputs"));
    }
  }
  if (slots.indices >= 0 && slots.keys >= 0) {
    return absl::InvalidArgumentError("set either indices or keys, not both");
  }
  if ((slots.indices < 0 && slots.keys < 0) || (table == nullptr && slots.params < 0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("model '", request.model_name(), "' takes ", takes, "; missing ",
                     slots.indices < 0 && slots.keys < 0 ? required.back() : "params"));
  }
  return slots;
}

// A lookup by keys' parameters: `missing` (core::ParseMissingKeys's spellings, those of the
// Python client and the CLI: "table", "error", "zero", "default", "skip", in any case) and
// `return_found`. With indices, either one (but missing "table" and return_found false) is the
// native API's INVALID_ARGUMENT.
struct KeyParameters {
  core::MissingKeys missing = core::MissingKeys::kTable;
  bool return_found = false;
};

absl::StatusOr<KeyParameters> KeyParametersOf(const InferParameters& parameters, bool by_keys) {
  KeyParameters keys;
  if (const auto it = parameters.find("missing"); it != parameters.end()) {
    const InferParameter& p = it->second;
    const std::optional<core::MissingKeys> missing =
        p.parameter_choice_case() == InferParameter::kStringParam
            ? core::ParseMissingKeys(p.string_param())
            : std::nullopt;
    if (!missing.has_value()) {
      return absl::InvalidArgumentError(
          "parameter 'missing' must be the string \"table\" (the default: the table's policy), "
          "\"error\", \"zero\", \"default\" or \"skip\" (embedding_bag only)");
    }
    keys.missing = *missing;
  }
  TC_ASSIGN_OR_RETURN(const std::optional<bool> found, BoolParameter(parameters, "return_found"));
  keys.return_found = found.value_or(false);
  if (!by_keys && (keys.missing != core::MissingKeys::kTable || keys.return_found)) {
    return absl::InvalidArgumentError(
        "missing and return_found are for lookups by keys; the request sends indices");
  }
  return keys;
}

}  // namespace

absl::StatusOr<DataType> ParseDatatype(absl::string_view datatype, absl::string_view what) {
  if (const std::optional<DataType> dtype = proto::KserveDatatypeOf(datatype)) return *dtype;
  return absl::InvalidArgumentError(absl::StrCat(
      what, ": unknown datatype '", datatype, "'; expected one of ", proto::KserveDatatypeNames()));
}

absl::Status PrepareInfer(const ModelInferRequest& request, const core::TensorRegistry* registry,
                          const core::PlanOptions& options,
                          const core::EmbeddingBagOptions& bag_options, InferJob* job,
                          core::ThreadPool* key_pool) {
  TC_ASSIGN_OR_RETURN(const Model model,
                      FindModel(request.model_name(), request.model_version(), registry));
  job->model_name = request.model_name();
  const InferParameters& parameters = request.parameters();
  TC_RETURN_IF_ERROR(CheckParameterNames(parameters, model));
  TC_ASSIGN_OR_RETURN(const Op op, FindOp(parameters, model.kind));
  job->op = op;

  // The inputs: params (or a table's tensor) and indices, and a lookup's optional ones.
  const bool table = model.kind == ModelKind::kTable;
  if (request.raw_input_contents_size() > 0 &&
      request.raw_input_contents_size() != request.inputs_size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "raw_input_contents has ", request.raw_input_contents_size(), " entries for ",
        request.inputs_size(), " inputs: send every input's data there, in order, or none"));
  }
  TC_ASSIGN_OR_RETURN(const InputSlots slots,
                      FindInputs(request, table ? model.table.get() : nullptr, op));
  const bool by_keys = slots.keys >= 0;
  const bool keyed_table = table && model.table->keyed != nullptr;
  bool found_output = false;
  for (const ModelInferRequest::InferRequestedOutputTensor& output : request.outputs()) {
    if (table && output.name() == kFoundName) {
      found_output = true;  // a table without keys is told below that found is for keys
    } else if (output.name() != kOutputName) {
      return absl::InvalidArgumentError(absl::StrCat(
          "unknown output '", output.name(), "': the only output is 'output'",
          keyed_table ? " (and 'found', for a lookup by keys with return_found)" : ""));
    }
  }
  // A lookup's parameters, read before any input is decoded.
  core::EmbeddingBagOptions bag = bag_options;
  if (op == Op::kEmbeddingBag) {
    TC_ASSIGN_OR_RETURN(bag, EmbeddingBagParameters(parameters, bag));
  }
  TC_ASSIGN_OR_RETURN(const KeyParameters key_parameters, KeyParametersOf(parameters, by_keys));
  if (found_output && !by_keys) {
    return absl::InvalidArgumentError(
        "output 'found' is for lookups by keys; the request sends indices");
  }
  job->by_keys = by_keys;
  job->return_found = key_parameters.return_found || found_output;
  if (by_keys) {
    TC_ASSIGN_OR_RETURN(const std::optional<int64_t> axis, IntParameter(parameters, "axis"));
    TC_ASSIGN_OR_RETURN(const std::optional<int64_t> batch_dims,
                        IntParameter(parameters, "batch_dims"));
    if (axis.value_or(0) != 0 || batch_dims.value_or(0) != 0) {
      return absl::InvalidArgumentError(
          "a Gather by keys is along axis 0 without batch_dims (a key names a whole row)");
    }
    if (op == Op::kEmbeddingBag && bag.padding_idx.has_value()) {
      return absl::InvalidArgumentError(
          "padding_idx is for indices; with keys, missing=SKIP leaves out the keys a table "
          "lacks");
    }
  }

  if (table) {
    job->table = model.table;
    const std::optional<absl::string_view> datatype =
        proto::KserveDatatypeName(job->table->logical_dtype());
    if (!datatype.has_value()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "model '", request.model_name(), "' is a resident ",
          core::DataTypeName(job->table->logical_dtype()),
          " tensor, which has no KServe v2 datatype; gather from it with the native API "
          "(tensorcompute.v1.TensorCompute, params_name)"));
    }
    job->params = job->table->plan_view();
  }
  struct Wanted {
    int at;
    core::TensorView* view;
  };
  core::TensorView keys;
  for (const Wanted& w : {Wanted{slots.params, &job->params}, Wanted{slots.indices, &job->indices},
                          Wanted{slots.keys, &keys}, Wanted{slots.offsets, &job->offsets},
                          Wanted{slots.weights, &job->weights}}) {
    if (w.at < 0) continue;
    TC_ASSIGN_OR_RETURN(*w.view, DecodeInferInput(request, w.at, &job->decoded));
  }
  if (by_keys) {
    // Planned on the table's keyed view with the keys' slots in place of indices, as the
    // native API plans (server/native/compute_rpcs.cc): the answer is byte for byte its own.
    TC_RETURN_IF_ERROR(job->keyed.Prepare(job->table.get(), keys, key_parameters.missing,
                                          op == Op::kEmbeddingBag, options.max_rank, key_pool));
    job->params = job->table->keyed_view();
    job->indices = job->keyed.slots();
    if (op == Op::kEmbeddingBag && job->keyed.policy() == core::MissingKeys::kSkip) {
      bag.padding_idx = job->keyed.zero_slot();
    }
  }

  // The plan (a lookup by keys' in the keys' words).
  if (op == Op::kEmbeddingBag) {
    absl::StatusOr<core::EmbeddingBagPlan> plan = PlanEmbeddingBagOn(
        job->table.get(), job->params, job->indices, slots.offsets >= 0 ? &job->offsets : nullptr,
        slots.weights >= 0 ? &job->weights : nullptr, bag);
    if (!plan.ok()) return by_keys ? KeyedLookup::InKeysWords(plan.status()) : plan.status();
    job->plan = *std::move(plan);
    return absl::OkStatus();
  }
  TC_ASSIGN_OR_RETURN(const std::optional<int64_t> batch_dims,
                      IntParameter(parameters, "batch_dims"));
  absl::StatusOr<batching::TaskPlan> plan;
  if (op == Op::kGatherNd) {
    plan = PlanGatherNdOn(job->table.get(), job->params, job->indices, batch_dims.value_or(0),
                          options);
  } else {
    TC_ASSIGN_OR_RETURN(const std::optional<int64_t> axis, IntParameter(parameters, "axis"));
    // ONNX and tf.gather both default to axis 0 when batch_dims is 0; with batch_dims set,
    // tf.gather's default axis is batch_dims, which is what an unset axis means to the plan.
    plan =
        PlanGatherOn(job->table.get(), job->params, job->indices,
                     by_keys ? std::optional<int64_t>(0) : axis, batch_dims.value_or(0), options);
  }
  if (!plan.ok()) return by_keys ? KeyedLookup::InKeysWords(plan.status()) : plan.status();
  job->plan = *std::move(plan);
  return absl::OkStatus();
}

void FillComputeRequest(InferJob* job, ComputeRequest* request) {
  request->plan = job->plan;
  request->params = job->params;
  request->indices = job->indices;
  request->offsets = job->offsets;
  request->weights = job->weights;
  request->table = job->table;
  request->builtin = job->op;
  if (job->by_keys) {
    // The found mask, one byte a key, is made here, as the native API makes it before the
    // request is submitted; under the batch's read lease the keys become slots and the mask is
    // written.
    uint8_t* found = nullptr;
    if (job->return_found) {
      job->found.assign(job->indices.data.size() / sizeof(int64_t), '\0');
      found = reinterpret_cast<uint8_t*>(job->found.data());
    }
    request->resolve = [job, found] { return job->keyed.Resolve(found); };
    request->keyed = &job->keyed;  // how a table sharded by key routes it
    request->found = found;
  }
}

core::MutableTensorView PrepareInferOutput(InferJob* job, inference::ModelInferResponse* response) {
  const DataType dtype = batching::OutputDataType(job->plan);
  const core::Shape& shape = batching::OutputShape(job->plan);
  core::MutableTensorView out;
  if (dtype == DataType::kString) {
    job->output_strings = *core::Tensor::Allocate(DataType::kString, shape);
    return job->output_strings.mutable_view();
  }
  std::string* raw = response->add_raw_output_contents();
  raw->resize(static_cast<size_t>(batching::OutputBytes(job->plan)));
  out.dtype = dtype;
  out.shape = shape;
  out.data = absl::Span<uint8_t>(reinterpret_cast<uint8_t*>(raw->data()), raw->size());
  return out;
}

void CompleteInferResponse(const ModelInferRequest& request, InferJob* job,
                           inference::ModelInferResponse* response) {
  const DataType dtype = batching::OutputDataType(job->plan);
  response->set_model_name(request.model_name());
  response->set_model_version(std::string(kModelVersion));
  response->set_id(request.id());
  inference::ModelInferResponse::InferOutputTensor* output = response->add_outputs();
  output->set_name(std::string(kOutputName));
  output->set_datatype(std::string(proto::KserveDatatypeName(dtype).value_or("")));
  for (int64_t d : batching::OutputShape(job->plan)) output->add_shape(d);
  if (dtype == DataType::kString) {
    const std::vector<std::string>& strings = job->output_strings.strings();
    size_t total = 0;
    for (const std::string& s : strings) total += proto::kKserveBytesLengthSize + s.size();
    std::string* raw = response->add_raw_output_contents();
    raw->reserve(total);
    for (const std::string& s : strings) proto::AppendKserveBytesElement(s, raw);
    job->output_strings = core::Tensor();
  }
  if (job->return_found) {
    // An empty output that no executor slotted still has its entry, so that found's is second.
    if (response->raw_output_contents_size() == 0) response->add_raw_output_contents();
    // BOOL of the keys' shape, one byte a key, as Resolve wrote it (moved, not copied).
    inference::ModelInferResponse::InferOutputTensor* found = response->add_outputs();
    found->set_name(std::string(kFoundName));
    found->set_datatype("BOOL");
    for (int64_t d : job->indices.shape) found->add_shape(d);
    job->found.resize(job->indices.data.size() / sizeof(int64_t));
    *response->add_raw_output_contents() = std::move(job->found);
    job->found = std::string();
  }
}

absl::StatusOr<inference::ModelMetadataResponse> ModelMetadata(
    absl::string_view name, absl::string_view version, const core::TensorRegistry* registry) {
  TC_ASSIGN_OR_RETURN(const Model model, FindModel(name, version, registry));
  inference::ModelMetadataResponse response;
  response.set_name(std::string(name));
  response.add_versions(std::string(kModelVersion));
  response.set_platform("tensorcompute");
  auto add = [](auto* tensor, absl::string_view tensor_name, absl::string_view datatype,
                std::vector<int64_t> shape) {
    tensor->set_name(std::string(tensor_name));
    tensor->set_datatype(std::string(datatype));
    for (int64_t d : shape) tensor->add_shape(d);
  };
  // Variable rank is shown as one variable dimension ([-1]), as Triton does for
  // shape-polymorphic inputs; the real shapes come with each request.
  if (model.kind == ModelKind::kTable) {
    const core::DataType dtype = model.table->logical_dtype();
    const std::optional<absl::string_view> datatype = proto::KserveDatatypeName(dtype);
    if (!datatype.has_value()) {
      return absl::InvalidArgumentError(
          absl::StrCat("model '", name, "' is a resident ", core::DataTypeName(dtype),
                       " tensor, which has no KServe v2 datatype; use the native API"));
    }
    add(response.add_inputs(), "indices", "INT64", {-1});
    add(response.add_outputs(), kOutputName, *datatype, {-1});
    if (model.table->keyed != nullptr) {
      // A keyed table is also looked up by keys, in place of indices, and answers the found
      // mask when asked (return_found).
      add(response.add_inputs(), "keys", "INT64", {-1});
      add(response.add_outputs(), kFoundName, "BOOL", {-1});
    }
  } else if (model.kind == ModelKind::kEmbeddingBag) {
    // params and the output are rank 2, [rows, dim] and [bags, dim]; their datatype is one of
    // FP16, BF16, FP32 and FP64 (empty: it varies), and so is per_sample_weights'. indices has
    // rank 1 (with offsets) or 2 (fixed bags); offsets is optional, and so are the weights.
    add(response.add_inputs(), "params", "", {-1, -1});
    add(response.add_inputs(), "indices", "INT64", {-1});
    add(response.add_inputs(), "offsets", "INT64", {-1});
    add(response.add_inputs(), "per_sample_weights", "", {-1});
    add(response.add_outputs(), kOutputName, "", {-1, -1});
  } else {
    // "params" takes every datatype: BYTES stands for "any" is not in the protocol, so the
    // datatype is left empty, as Triton does for a model whose input datatype varies.
    add(response.add_inputs(), "params", "", {-1});
    add(response.add_inputs(), "indices", "INT64", {-1});
    add(response.add_outputs(), kOutputName, "", {-1});
  }
  return response;
}

absl::StatusOr<bool> ModelReady(absl::string_view name, absl::string_view version,
                                const core::TensorRegistry* registry) {
  TC_ASSIGN_OR_RETURN(const Model model, FindModel(name, version, registry));
  if (model.kind != ModelKind::kTable) return true;
  return proto::KserveDatatypeName(model.table->logical_dtype()).has_value();
}

inference::ServerMetadataResponse ServerMetadata() {
  inference::ServerMetadataResponse response;
  response.set_name("tensorcompute");
  response.set_version(TC_VERSION);
  response.add_extensions("binary_tensor_data");
  return response;
}

int64_t BytesInputsConversion(const inference::ModelInferRequest& request) {
  int64_t bytes = 0;
  const int n = std::min(request.inputs_size(), request.raw_input_contents_size());
  for (int i = 0; i < n; ++i) {
    const inference::ModelInferRequest::InferInputTensor& input = request.inputs(i);
    if (proto::KserveDatatypeOf(input.datatype()) != core::DataType::kString) continue;
    const core::Shape shape(input.shape().begin(), input.shape().end());
    const int64_t elements = core::CheckedNumElements(shape).value_or(0);
    const std::string& raw = request.raw_input_contents(i);
    size_t at = 0;
    for (int64_t k = 0; k < elements && raw.size() - at >= proto::kKserveBytesLengthSize; ++k) {
      const uint32_t length =
          proto::ReadKserveBytesLength(reinterpret_cast<const uint8_t*>(raw.data() + at));
      at += proto::kKserveBytesLengthSize;
      if (raw.size() - at < length) break;
      at += length;
      bytes += proto::kConvertedString + proto::StringHeap(length);
    }
  }
  return bytes;
}

KeyedLookupCost KeyedLookupBytes(const inference::ModelInferRequest& request) {
  KeyedLookupCost cost;
  for (int i = 0; i < request.inputs_size(); ++i) {
    const inference::ModelInferRequest::InferInputTensor& input = request.inputs(i);
    if (input.name() != "keys" || input.datatype() != "INT64") continue;
    const core::Shape shape(input.shape().begin(), input.shape().end());
    const int64_t claimed = core::CheckedNumElements(shape).value_or(0);
    const int64_t sent =
        i < request.raw_input_contents_size()
            ? static_cast<int64_t>(request.raw_input_contents(i).size() / sizeof(int64_t))
            : input.contents().int64_contents_size();
    cost.keys = std::max<int64_t>(0, std::min(claimed, sent));
    break;
  }
  if (cost.keys == 0) return cost;
  bool found = false;
  if (const auto it = request.parameters().find("return_found"); it != request.parameters().end()) {
    found =
        it->second.parameter_choice_case() == InferParameter::kBoolParam && it->second.bool_param();
  }
  for (const auto& output : request.outputs()) found = found || output.name() == kFoundName;
  cost.bytes = cost.keys * static_cast<int64_t>(sizeof(int64_t) + (found ? 1 : 0));
  return cost;
}

}  // namespace tensorcompute::server::kserve
