#include "server/kserve/codec.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

#include "core/shape.h"
#include "proto/decoded_cost.h"
#include "proto/kserve_wire.h"

namespace tensorcompute::server::kserve {
namespace {

using core::DataType;
using inference::InferParameter;
using inference::InferTensorContents;
using inference::ModelInferRequest;

// The built-in model or table a request names.
enum class ModelKind { kGather, kGatherNd, kTable };

struct Model {
  ModelKind kind = ModelKind::kGather;
  std::shared_ptr<const core::ResidentTensor> table;
};

absl::StatusOr<Model> FindModel(absl::string_view name, absl::string_view version,
                                const core::TensorRegistry* registry) {
  Model model;
  if (name == kGatherModel) {
    model.kind = ModelKind::kGather;
  } else if (name == kGatherNdModel) {
    model.kind = ModelKind::kGatherNd;
  } else {
    if (registry != nullptr && !name.empty()) model.table = registry->Find(name);
    if (model.table == nullptr) {
      return absl::NotFoundError(
          absl::StrCat("model '", name,
                       "' not found: the models are 'gather', 'gather_nd' and every "
                       "resident tensor by its name (ListTensors lists them)"));
    }
    model.kind = ModelKind::kTable;
  }
  if (!version.empty() && version != kModelVersion) {
    return absl::NotFoundError(absl::StrCat("model '", name, "' has no version '", version,
                                            "': its only version is '1' (or leave it empty)"));
  }
  return model;
}

// An integer parameter (int64_param, or uint64_param that fits), or nullopt when absent.
absl::StatusOr<std::optional<int64_t>> IntParameter(
    const google::protobuf::Map<std::string, InferParameter>& parameters, const std::string& name) {
  const auto it = parameters.find(name);
  if (it == parameters.end()) return std::optional<int64_t>();
  const InferParameter& p = it->second;
  switch (p.parameter_choice_case()) {
    case InferParameter::kInt64Param:
      return std::optional<int64_t>(p.int64_param());
    case InferParameter::kUint64Param:
      if (p.uint64_param() <= static_cast<uint64_t>(INT64_MAX)) {
        return std::optional<int64_t>(static_cast<int64_t>(p.uint64_param()));
      }
      return absl::InvalidArgumentError(
          absl::StrCat("parameter '", name, "' = ", p.uint64_param(), " does not fit int64"));
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("parameter '", name, "' must be an integer (int64_param)"));
  }
}

// Checks that every request parameter is one this model knows. Triton's own request
// parameters (which tritonclient may send) are accepted and ignored.
absl::Status CheckParameterNames(
    const google::protobuf::Map<std::string, InferParameter>& parameters, ModelKind kind) {
  static constexpr absl::string_view kIgnored[] = {
      "priority",           "timeout", "sequence_id", "sequence_start", "sequence_end",
      "binary_data_output", "headers"};
  std::vector<absl::string_view> known;
  if (kind != ModelKind::kGatherNd) known.push_back("axis");
  known.push_back("batch_dims");
  if (kind == ModelKind::kTable) known.push_back("op");
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

// Copies `values` (typed contents) into a new tensor of `dtype`, converting each to T.
template <typename T, typename Repeated>
absl::StatusOr<std::unique_ptr<core::Tensor>> FromContents(DataType dtype, const core::Shape& shape,
                                                           const Repeated& values,
                                                           absl::string_view what) {
  // The count is checked against the shape before anything is allocated: a shape of 2^40
  // elements with three values in the message must cost nothing (found by the fuzzer).
  const std::optional<int64_t> n = core::CheckedNumElements(shape);
  if (!n.has_value() || *n != static_cast<int64_t>(values.size())) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": shape ", core::ShapeToString(shape), " has ",
                     n.has_value() ? absl::StrCat(*n) : std::string("more than int64 holds of"),
                     " elements but its contents hold ", values.size()));
  }
  absl::StatusOr<core::Tensor> tensor = core::Tensor::Allocate(dtype, shape);
  if (!tensor.ok()) return tensor.status();
  uint8_t* out = tensor->mutable_bytes().data();
  for (int64_t i = 0; i < tensor->num_elements(); ++i) {
    const auto v = values[static_cast<int>(i)];
    const T t = static_cast<T>(v);
    if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
      if (static_cast<decltype(v)>(t) != v) {
        return absl::InvalidArgumentError(absl::StrCat(what, ": contents[", i, "] = ", v,
                                                       " does not fit ",
                                                       proto::KserveDatatypeName(dtype).value()));
      }
    }
    std::memcpy(out + i * sizeof(T), &t, sizeof(T));
  }
  return std::make_unique<core::Tensor>(*std::move(tensor));
}

// The typed contents of an input of `dtype`: exactly the field that datatype uses.
absl::StatusOr<std::unique_ptr<core::Tensor>> DecodeContents(DataType dtype,
                                                             const core::Shape& shape,
                                                             const InferTensorContents& c,
                                                             absl::string_view what) {
  // Which field holds the data; every other one must be empty.
  const int sizes[] = {c.bool_contents_size(), c.int_contents_size(),    c.int64_contents_size(),
                       c.uint_contents_size(), c.uint64_contents_size(), c.fp32_contents_size(),
                       c.fp64_contents_size(), c.bytes_contents_size()};
  int field = -1;  // index into sizes
  switch (dtype) {
    case DataType::kBool:
      field = 0;
      break;
    case DataType::kInt8:
    case DataType::kInt16:
    case DataType::kInt32:
      field = 1;
      break;
    case DataType::kInt64:
      field = 2;
      break;
    case DataType::kUint8:
    case DataType::kUint16:
    case DataType::kUint32:
      field = 3;
      break;
    case DataType::kUint64:
      field = 4;
      break;
    case DataType::kFloat32:
      field = 5;
      break;
    case DataType::kFloat64:
      field = 6;
      break;
    case DataType::kString:
      field = 7;
      break;
    default:
      return absl::InvalidArgumentError(
          absl::StrCat(what, ": ", proto::KserveDatatypeName(dtype).value(),
                       " has no typed contents field; send it in raw_input_contents"));
  }
  static constexpr absl::string_view kFieldNames[] = {
      "bool_contents",   "int_contents",  "int64_contents", "uint_contents",
      "uint64_contents", "fp32_contents", "fp64_contents",  "bytes_contents"};
  for (int i = 0; i < 8; ++i) {
    if (i != field && sizes[i] > 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, ": datatype ", proto::KserveDatatypeName(dtype).value(),
                       " takes its contents in ", kFieldNames[field], ", not ", kFieldNames[i]));
    }
  }
  switch (dtype) {
    case DataType::kBool:
      return FromContents<bool>(dtype, shape, c.bool_contents(), what);
    case DataType::kInt8:
      return FromContents<int8_t>(dtype, shape, c.int_contents(), what);
    case DataType::kInt16:
      return FromContents<int16_t>(dtype, shape, c.int_contents(), what);
    case DataType::kInt32:
      return FromContents<int32_t>(dtype, shape, c.int_contents(), what);
    case DataType::kInt64:
      return FromContents<int64_t>(dtype, shape, c.int64_contents(), what);
    case DataType::kUint8:
      return FromContents<uint8_t>(dtype, shape, c.uint_contents(), what);
    case DataType::kUint16:
      return FromContents<uint16_t>(dtype, shape, c.uint_contents(), what);
    case DataType::kUint32:
      return FromContents<uint32_t>(dtype, shape, c.uint_contents(), what);
    case DataType::kUint64:
      return FromContents<uint64_t>(dtype, shape, c.uint64_contents(), what);
    case DataType::kFloat32:
      return FromContents<float>(dtype, shape, c.fp32_contents(), what);
    case DataType::kFloat64:
      return FromContents<double>(dtype, shape, c.fp64_contents(), what);
    default:
      break;
  }
  // BYTES
  const std::optional<int64_t> n = core::CheckedNumElements(shape);
  if (!n.has_value() || *n != c.bytes_contents_size()) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": shape ", core::ShapeToString(shape), " has ",
                     n.has_value() ? absl::StrCat(*n) : std::string("too many"),
                     " elements but its contents hold ", c.bytes_contents_size()));
  }
  std::vector<std::string> strings(c.bytes_contents().begin(), c.bytes_contents().end());
  absl::StatusOr<core::Tensor> tensor = core::Tensor::FromStrings(shape, std::move(strings));
  if (!tensor.ok()) return tensor.status();
  return std::make_unique<core::Tensor>(*std::move(tensor));
}

// BYTES in raw form: each element a 4-byte little-endian length and that many bytes.
absl::StatusOr<std::unique_ptr<core::Tensor>> DecodeRawBytes(const core::Shape& shape,
                                                             absl::string_view raw,
                                                             absl::string_view what) {
  const std::optional<int64_t> n = core::CheckedNumElements(shape);
  if (!n.has_value()) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": shape ", core::ShapeToString(shape),
                                                   " has more elements than int64 holds"));
  }
  // Each element takes at least its 4-byte length: a count the bytes cannot hold is refused
  // before anything is allocated for it.
  if (*n > static_cast<int64_t>(raw.size() / 4)) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": shape ", core::ShapeToString(shape), " has ", *n,
                     " BYTES elements but raw_input_contents holds ", raw.size(),
                     " bytes, less than the 4-byte length each element needs"));
  }
  std::vector<std::string> strings;
  strings.reserve(static_cast<size_t>(*n));
  size_t at = 0;
  for (int64_t i = 0; i < *n; ++i) {
    if (raw.size() - at < 4) {
      return absl::InvalidArgumentError(absl::StrCat(what, ": raw_input_contents ends at element ",
                                                     i, " of ", *n, ", before its 4-byte length"));
    }
    const uint32_t length =
        proto::ReadKserveBytesLength(reinterpret_cast<const uint8_t*>(raw.data() + at));
    at += proto::kKserveBytesLengthSize;
    if (raw.size() - at < length) {
      return absl::InvalidArgumentError(absl::StrCat(what, ": element ", i, " says it has ", length,
                                                     " bytes but only ", raw.size() - at,
                                                     " remain in raw_input_contents"));
    }
    strings.emplace_back(raw.substr(at, length));
    at += length;
  }
  if (at != raw.size()) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": raw_input_contents has ",
                                                   raw.size() - at, " bytes after its ", *n,
                                                   " BYTES elements"));
  }
  absl::StatusOr<core::Tensor> tensor = core::Tensor::FromStrings(shape, std::move(strings));
  if (!tensor.ok()) return tensor.status();
  return std::make_unique<core::Tensor>(*std::move(tensor));
}

// Decodes input `index` of `request` into a view (raw bytes in place; everything else into
// job->decoded).
absl::StatusOr<core::TensorView> DecodeInput(const ModelInferRequest& request, int index,
                                             InferJob* job) {
  const ModelInferRequest::InferInputTensor& input = request.inputs(index);
  const std::string what = absl::StrCat("input '", input.name(), "'");
  absl::StatusOr<DataType> dtype = ParseDatatype(input.datatype(), what);
  if (!dtype.ok()) return dtype.status();
  core::Shape shape(input.shape().begin(), input.shape().end());
  for (int64_t d : shape) {
    if (d < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, ": shape ", core::ShapeToString(shape), " has a negative dimension"));
    }
  }
  if (request.raw_input_contents_size() > 0) {
    const std::string& raw = request.raw_input_contents(index);
    if (*dtype == DataType::kString) {
      absl::StatusOr<std::unique_ptr<core::Tensor>> t = DecodeRawBytes(shape, raw, what);
      if (!t.ok()) return t.status();
      job->decoded.push_back(*std::move(t));
      return job->decoded.back()->view();
    }
    core::TensorView view;
    view.dtype = *dtype;
    view.shape = std::move(shape);
    view.data = absl::Span<const uint8_t>(reinterpret_cast<const uint8_t*>(raw.data()), raw.size());
    // The plan's ValidateTensor checks the byte count against the shape; say it in v2 terms.
    const std::optional<int64_t> n = core::CheckedNumElements(view.shape);
    const std::optional<int64_t> bytes =
        n.has_value() ? core::CheckedMul(*n, static_cast<int64_t>(core::ElementSize(*dtype)))
                      : std::nullopt;
    if (!bytes.has_value() || *bytes != static_cast<int64_t>(raw.size())) {
      return absl::InvalidArgumentError(absl::StrCat(
          what, ": ", input.datatype(), " shape ", core::ShapeToString(view.shape), " needs ",
          bytes.has_value() ? absl::StrCat(*bytes) : std::string("more than int64 holds of"),
          " bytes but raw_input_contents[", index, "] has ", raw.size()));
    }
    return view;
  }
  absl::StatusOr<std::unique_ptr<core::Tensor>> t =
      DecodeContents(*dtype, shape, input.contents(), what);
  if (!t.ok()) return t.status();
  job->decoded.push_back(*std::move(t));
  return job->decoded.back()->view();
}

}  // namespace

absl::StatusOr<DataType> ParseDatatype(absl::string_view datatype, absl::string_view what) {
  if (const std::optional<DataType> dtype = proto::KserveDatatypeOf(datatype)) return *dtype;
  return absl::InvalidArgumentError(absl::StrCat(
      what, ": unknown datatype '", datatype, "'; expected one of ", proto::KserveDatatypeNames()));
}

absl::Status PrepareInfer(const ModelInferRequest& request, const core::TensorRegistry* registry,
                          const core::PlanOptions& options, InferJob* job) {
  absl::StatusOr<Model> model = FindModel(request.model_name(), request.model_version(), registry);
  if (!model.ok()) return model.status();
  job->model_name = request.model_name();
  if (absl::Status names = CheckParameterNames(request.parameters(), model->kind); !names.ok()) {
    return names;
  }

  // The inputs: params and indices, or indices alone for a table.
  const bool table = model->kind == ModelKind::kTable;
  const std::vector<absl::string_view> expected =
      table ? std::vector<absl::string_view>{"indices"}
            : std::vector<absl::string_view>{"params", "indices"};
  if (request.raw_input_contents_size() > 0 &&
      request.raw_input_contents_size() != request.inputs_size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "raw_input_contents has ", request.raw_input_contents_size(), " entries for ",
        request.inputs_size(), " inputs: send every input's data there, in order, or none"));
  }
  int params_at = -1, indices_at = -1;
  for (int i = 0; i < request.inputs_size(); ++i) {
    const std::string& name = request.inputs(i).name();
    int* slot = name == "indices"              ? &indices_at
                : (!table && name == "params") ? &params_at
                                               : nullptr;
    if (slot == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat("unknown input '", name, "': model '",
                                                     request.model_name(), "' takes ",
                                                     absl::StrJoin(expected, " and ")));
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
  if (indices_at < 0 || (!table && params_at < 0)) {
    return absl::InvalidArgumentError(absl::StrCat("model '", request.model_name(), "' takes ",
                                                   absl::StrJoin(expected, " and "), "; missing ",
                                                   indices_at < 0 ? "indices" : "params"));
  }
  for (const ModelInferRequest::InferRequestedOutputTensor& output : request.outputs()) {
    if (output.name() != kOutputName) {
      return absl::InvalidArgumentError(
          absl::StrCat("unknown output '", output.name(), "': the only output is 'output'"));
    }
  }

  if (table) {
    job->table = model->table;
    const std::optional<absl::string_view> datatype =
        proto::KserveDatatypeName(job->table->tensor.dtype());
    if (!datatype.has_value()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "model '", request.model_name(), "' is a resident ",
          core::DataTypeName(job->table->tensor.dtype()),
          " tensor, which has no KServe v2 datatype; gather from it with the native API "
          "(tensorcompute.v1.TensorCompute, params_name)"));
    }
    job->params = job->table->tensor.view();
  } else {
    absl::StatusOr<core::TensorView> params = DecodeInput(request, params_at, job);
    if (!params.ok()) return params.status();
    job->params = *std::move(params);
  }
  absl::StatusOr<core::TensorView> indices = DecodeInput(request, indices_at, job);
  if (!indices.ok()) return indices.status();
  job->indices = *std::move(indices);

  // The operation and its parameters.
  bool nd = model->kind == ModelKind::kGatherNd;
  if (table) {
    const auto op = request.parameters().find("op");
    if (op != request.parameters().end()) {
      const InferParameter& p = op->second;
      if (p.parameter_choice_case() != InferParameter::kStringParam ||
          (p.string_param() != "gather" && p.string_param() != "gather_nd")) {
        return absl::InvalidArgumentError(
            "parameter 'op' must be the string \"gather\" (the default) or \"gather_nd\"");
      }
      nd = p.string_param() == "gather_nd";
    }
    if (nd && request.parameters().contains("axis")) {
      return absl::InvalidArgumentError("parameter 'axis' is for op \"gather\", not \"gather_nd\"");
    }
  }
  absl::StatusOr<std::optional<int64_t>> batch_dims =
      IntParameter(request.parameters(), "batch_dims");
  if (!batch_dims.ok()) return batch_dims.status();
  absl::StatusOr<core::GatherPlan> plan;
  if (nd) {
    plan = core::PlanGatherNd(job->params, job->indices, batch_dims->value_or(0), options);
  } else {
    absl::StatusOr<std::optional<int64_t>> axis = IntParameter(request.parameters(), "axis");
    if (!axis.ok()) return axis.status();
    // ONNX and tf.gather both default to axis 0 when batch_dims is 0; with batch_dims set,
    // tf.gather's default axis is batch_dims, which is what an unset axis means to the plan.
    plan = core::PlanGather(job->params, job->indices, *axis, batch_dims->value_or(0), options);
  }
  if (!plan.ok()) return plan.status();
  job->plan = *std::move(plan);
  return absl::OkStatus();
}

core::MutableTensorView PrepareInferOutput(InferJob* job, inference::ModelInferResponse* response) {
  const core::GatherPlan& plan = job->plan;
  core::MutableTensorView out;
  if (plan.dtype == DataType::kString) {
    job->output_strings = *core::Tensor::Allocate(DataType::kString, plan.output_shape);
    return job->output_strings.mutable_view();
  }
  std::string* raw = response->add_raw_output_contents();
  raw->resize(static_cast<size_t>(plan.output_bytes));
  out.dtype = plan.dtype;
  out.shape = plan.output_shape;
  out.data = absl::Span<uint8_t>(reinterpret_cast<uint8_t*>(raw->data()), raw->size());
  return out;
}

void CompleteInferResponse(const ModelInferRequest& request, InferJob* job,
                           inference::ModelInferResponse* response) {
  response->set_model_name(request.model_name());
  response->set_model_version(std::string(kModelVersion));
  response->set_id(request.id());
  inference::ModelInferResponse::InferOutputTensor* output = response->add_outputs();
  output->set_name(std::string(kOutputName));
  output->set_datatype(std::string(proto::KserveDatatypeName(job->plan.dtype).value_or("")));
  for (int64_t d : job->plan.output_shape) output->add_shape(d);
  if (job->plan.dtype == DataType::kString) {
    const std::vector<std::string>& strings = job->output_strings.strings();
    size_t total = 0;
    for (const std::string& s : strings) total += proto::kKserveBytesLengthSize + s.size();
    std::string* raw = response->add_raw_output_contents();
    raw->reserve(total);
    for (const std::string& s : strings) proto::AppendKserveBytesElement(s, raw);
    job->output_strings = core::Tensor();
  }
}

absl::StatusOr<inference::ModelMetadataResponse> ModelMetadata(
    absl::string_view name, absl::string_view version, const core::TensorRegistry* registry) {
  absl::StatusOr<Model> model = FindModel(name, version, registry);
  if (!model.ok()) return model.status();
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
  if (model->kind == ModelKind::kTable) {
    const core::Tensor& t = model->table->tensor;
    const std::optional<absl::string_view> datatype = proto::KserveDatatypeName(t.dtype());
    if (!datatype.has_value()) {
      return absl::InvalidArgumentError(
          absl::StrCat("model '", name, "' is a resident ", core::DataTypeName(t.dtype()),
                       " tensor, which has no KServe v2 datatype; use the native API"));
    }
    add(response.add_inputs(), "indices", "INT64", {-1});
    add(response.add_outputs(), kOutputName, *datatype, {-1});
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
  absl::StatusOr<Model> model = FindModel(name, version, registry);
  if (!model.ok()) return model.status();
  if (model->kind != ModelKind::kTable) return true;
  return proto::KserveDatatypeName(model->table->tensor.dtype()).has_value();
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

}  // namespace tensorcompute::server::kserve
