// The document-building decoder ParseHttpInferRequest replaced (server/kserve/json.cc before the
// SAX decoder), kept verbatim as the slow reference the new one must match: same request, same
// options, same status for every input with one fault.

#include "tests/server/kserve_json_reference.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"

#include "core/dtype.h"
#include "core/half_float.h"
#include "core/shape.h"
#include "proto/kserve_wire.h"
#include "server/kserve/codec.h"

namespace tensorcompute::server::kserve {
namespace {

using core::DataType;
using Json = nlohmann::json;

absl::Status Invalid(absl::string_view what, absl::string_view problem) {
  return absl::InvalidArgumentError(absl::StrCat(what, ": ", problem));
}

// A client's value, shortened for an error message.
std::string Quote(const Json& value) {
  std::string s = value.dump(-1, ' ', false, Json::error_handler_t::replace);
  if (s.size() > 40) s = s.substr(0, 37) + "...";
  return s;
}

template <typename T>
void Append(T value, std::string* out) {
  char bytes[sizeof(T)];
  std::memcpy(bytes, &value, sizeof(T));  // little-endian hosts only, as the raw wire form
  out->append(bytes, sizeof(T));
}

// Appends integer `leaf` as T, or says why it cannot be one.
template <typename T>
absl::Status AppendInteger(const Json& leaf, std::string* out) {
  if (leaf.is_number_unsigned()) {
    const auto v = leaf.get<uint64_t>();
    if (v > static_cast<uint64_t>(std::numeric_limits<T>::max())) {
      return absl::OutOfRangeError("does not fit");
    }
    Append(static_cast<T>(v), out);
    return absl::OkStatus();
  }
  if (leaf.is_number_integer()) {
    const auto v = leaf.get<int64_t>();
    if constexpr (std::is_signed_v<T>) {
      if (v < std::numeric_limits<T>::min() || v > std::numeric_limits<T>::max()) {
        return absl::OutOfRangeError("does not fit");
      }
    } else {
      if (v < 0 || static_cast<uint64_t>(v) > std::numeric_limits<T>::max()) {
        return absl::OutOfRangeError("does not fit");
      }
    }
    Append(static_cast<T>(v), out);
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError("is not an integer for");
}

// Appends one data element of `dtype` in the raw wire form.
absl::Status AppendElement(DataType dtype, const Json& leaf, std::string* out) {
  switch (dtype) {
    case DataType::kBool:
      if (!leaf.is_boolean()) return absl::InvalidArgumentError("is not true or false for");
      out->push_back(leaf.get<bool>() ? 1 : 0);
      return absl::OkStatus();
    case DataType::kInt8:
      return AppendInteger<int8_t>(leaf, out);
    case DataType::kInt16:
      return AppendInteger<int16_t>(leaf, out);
    case DataType::kInt32:
      return AppendInteger<int32_t>(leaf, out);
    case DataType::kInt64:
      return AppendInteger<int64_t>(leaf, out);
    case DataType::kUint8:
      return AppendInteger<uint8_t>(leaf, out);
    case DataType::kUint16:
      return AppendInteger<uint16_t>(leaf, out);
    case DataType::kUint32:
      return AppendInteger<uint32_t>(leaf, out);
    case DataType::kUint64:
      return AppendInteger<uint64_t>(leaf, out);
    case DataType::kString: {
      if (!leaf.is_string()) return absl::InvalidArgumentError("is not a string for");
      const std::string& s = leaf.get_ref<const std::string&>();
      proto::AppendKserveBytesElement(s, out);
      return absl::OkStatus();
    }
    default:
      break;
  }
  if (!leaf.is_number()) return absl::InvalidArgumentError("is not a number for");
  const double v = leaf.get<double>();
  switch (dtype) {
    case DataType::kFloat16:
      Append(core::FloatToHalf(core::DoubleToFloat(v)), out);
      return absl::OkStatus();
    case DataType::kBfloat16:
      Append(core::FloatToBFloat16(core::DoubleToFloat(v)), out);
      return absl::OkStatus();
    case DataType::kFloat32:
      Append(core::DoubleToFloat(v), out);
      return absl::OkStatus();
    case DataType::kFloat64:
      Append(v, out);
      return absl::OkStatus();
    default:
      return absl::InvalidArgumentError("cannot be given as JSON for");
  }
}

// The raw bytes of an input's JSON `data` (a flat or nested array), and its element count.
// Iterative, so that deep nesting cannot exhaust the stack.
absl::Status DataToRaw(const Json& data, DataType dtype, absl::string_view datatype,
                       absl::string_view what, std::string* raw, int64_t* count) {
  if (!data.is_array()) return Invalid(what, "data must be an array");
  std::vector<std::pair<const Json*, size_t>> stack = {{&data, 0}};
  *count = 0;
  while (!stack.empty()) {
    auto& [array, next] = stack.back();
    if (next == array->size()) {
      stack.pop_back();
      continue;
    }
    const Json& element = (*array)[next++];
    if (element.is_array()) {
      stack.emplace_back(&element, 0);
      continue;
    }
    if (absl::Status added = AppendElement(dtype, element, raw); !added.ok()) {
      return Invalid(what, absl::StrCat("data element ", *count, " (", Quote(element), ") ",
                                        added.message(), " ", datatype));
    }
    ++*count;
  }
  return absl::OkStatus();
}

// A JSON parameter as an InferParameter: booleans, integers, other numbers and strings.
absl::Status ToParameter(const std::string& name, const Json& value, inference::InferParameter* p) {
  if (value.is_boolean()) {
    p->set_bool_param(value.get<bool>());
  } else if (value.is_number_unsigned() && value.get<uint64_t>() > uint64_t{INT64_MAX}) {
    p->set_uint64_param(value.get<uint64_t>());
  } else if (value.is_number_integer()) {
    p->set_int64_param(value.get<int64_t>());
  } else if (value.is_number_float()) {
    p->set_double_param(value.get<double>());
  } else if (value.is_string()) {
    p->set_string_param(value.get<std::string>());
  } else {
    return absl::InvalidArgumentError(absl::StrCat(
        "parameter '", name, "' must be a boolean, a number or a string, not ", Quote(value)));
  }
  return absl::OkStatus();
}

// An optional member of `object` of the type `check` accepts; null when absent.
template <typename Check>
absl::StatusOr<const Json*> Member(const Json& object, const char* key, absl::string_view what,
                                   Check check, absl::string_view type) {
  const auto it = object.find(key);
  if (it == object.end()) return nullptr;
  if (!check(*it)) return Invalid(what, absl::StrCat("'", key, "' must be ", type));
  return &*it;
}

bool IsObject(const Json& j) { return j.is_object(); }
bool IsArray(const Json& j) { return j.is_array(); }
bool IsString(const Json& j) { return j.is_string(); }
bool IsBool(const Json& j) { return j.is_boolean(); }
bool IsInteger(const Json& j) { return j.is_number_integer(); }

absl::Status ParseInput(const Json& input, int index, absl::string_view binary, size_t* binary_at,
                        inference::ModelInferRequest* request) {
  std::string what = absl::StrCat("inputs[", index, "]");
  if (!input.is_object()) return Invalid(what, "must be an object");
  absl::StatusOr<const Json*> name = Member(input, "name", what, IsString, "a string");
  if (!name.ok()) return name.status();
  if (*name == nullptr) return Invalid(what, "has no 'name'");
  auto* tensor = request->add_inputs();
  tensor->set_name((*name)->get<std::string>());
  what = absl::StrCat("input '", tensor->name(), "'");

  absl::StatusOr<const Json*> datatype = Member(input, "datatype", what, IsString, "a string");
  if (!datatype.ok()) return datatype.status();
  if (*datatype == nullptr) return Invalid(what, "has no 'datatype'");
  tensor->set_datatype((*datatype)->get<std::string>());
  absl::StatusOr<DataType> dtype = ParseDatatype(tensor->datatype(), what);
  if (!dtype.ok()) return dtype.status();

  absl::StatusOr<const Json*> shape = Member(input, "shape", what, IsArray, "an array");
  if (!shape.ok()) return shape.status();
  if (*shape == nullptr) return Invalid(what, "has no 'shape'");
  for (const Json& d : **shape) {
    if (!d.is_number_integer()) return Invalid(what, "'shape' must be an array of integers");
    tensor->add_shape(d.get<int64_t>());
  }

  std::optional<int64_t> binary_size;
  absl::StatusOr<const Json*> parameters = Member(input, "parameters", what, IsObject, "an object");
  if (!parameters.ok()) return parameters.status();
  if (*parameters != nullptr) {
    absl::StatusOr<const Json*> size =
        Member(**parameters, "binary_data_size", what, IsInteger, "an integer");
    if (!size.ok()) return size.status();
    if (*size != nullptr) binary_size = (*size)->get<int64_t>();
  }
  std::string* raw = request->add_raw_input_contents();
  const auto data = input.find("data");
  if (binary_size.has_value()) {
    if (data != input.end()) {
      return Invalid(what, "has both 'data' and the binary_data_size parameter: one or the other");
    }
    if (*binary_size < 0 || static_cast<uint64_t>(*binary_size) > binary.size() - *binary_at) {
      return Invalid(what, absl::StrCat("binary_data_size ", *binary_size, " but only ",
                                        binary.size() - *binary_at,
                                        " bytes of binary data are left after the JSON"));
    }
    raw->assign(binary.data() + *binary_at, static_cast<size_t>(*binary_size));
    *binary_at += static_cast<size_t>(*binary_size);
    return absl::OkStatus();
  }
  if (data == input.end()) return Invalid(what, "has neither 'data' nor binary_data_size");
  int64_t count = 0;
  if (absl::Status converted = DataToRaw(*data, *dtype, tensor->datatype(), what, raw, &count);
      !converted.ok()) {
    return converted;
  }
  // A shape the codec refuses (a negative dimension, too many elements) is left to it to say.
  const core::Shape dims(tensor->shape().begin(), tensor->shape().end());
  bool negative = false;
  for (int64_t d : dims) negative = negative || d < 0;
  const std::optional<int64_t> n = core::CheckedNumElements(dims);
  if (!negative && n.has_value() && *n != count) {
    return Invalid(what, absl::StrCat("shape ", core::ShapeToString(dims), " has ", *n,
                                      " elements but 'data' holds ", count));
  }
  return absl::OkStatus();
}

absl::Status ParseJson(const Json& root, absl::string_view binary,
                       inference::ModelInferRequest* request, HttpInferOptions* options) {
  constexpr absl::string_view kRequest = "the request";
  if (!root.is_object()) return Invalid(kRequest, "must be a JSON object");
  absl::StatusOr<const Json*> id = Member(root, "id", kRequest, IsString, "a string");
  if (!id.ok()) return id.status();
  if (*id != nullptr) request->set_id((*id)->get<std::string>());

  absl::StatusOr<const Json*> parameters =
      Member(root, "parameters", kRequest, IsObject, "an object");
  if (!parameters.ok()) return parameters.status();
  if (*parameters != nullptr) {
    for (const auto& [name, value] : (*parameters)->items()) {
      inference::InferParameter& p = (*request->mutable_parameters())[name];
      if (absl::Status converted = ToParameter(name, value, &p); !converted.ok()) {
        return converted;
      }
    }
    const auto& params = request->parameters();
    if (const auto it = params.find("binary_data_output"); it != params.end()) {
      options->binary_output = it->second.bool_param();
    }
    if (const auto it = params.find("timeout");
        it != params.end() && it->second.int64_param() > 0) {
      options->timeout_us = it->second.int64_param();
    }
  }

  absl::StatusOr<const Json*> inputs = Member(root, "inputs", kRequest, IsArray, "an array");
  if (!inputs.ok()) return inputs.status();
  if (*inputs == nullptr) return Invalid(kRequest, "has no 'inputs'");
  size_t binary_at = 0;
  for (size_t i = 0; i < (*inputs)->size(); ++i) {
    if (absl::Status parsed =
            ParseInput((**inputs)[i], static_cast<int>(i), binary, &binary_at, request);
        !parsed.ok()) {
      return parsed;
    }
  }
  if (binary_at != binary.size()) {
    return Invalid(kRequest, absl::StrCat(binary.size() - binary_at,
                                          " bytes of binary data follow the JSON that no input's "
                                          "binary_data_size accounts for"));
  }

  absl::StatusOr<const Json*> outputs = Member(root, "outputs", kRequest, IsArray, "an array");
  if (!outputs.ok()) return outputs.status();
  if (*outputs == nullptr) return absl::OkStatus();
  bool binary_set = false;
  for (size_t i = 0; i < (*outputs)->size(); ++i) {
    const Json& output = (**outputs)[i];
    const std::string what = absl::StrCat("outputs[", i, "]");
    if (!output.is_object()) return Invalid(what, "must be an object");
    absl::StatusOr<const Json*> name = Member(output, "name", what, IsString, "a string");
    if (!name.ok()) return name.status();
    if (*name == nullptr) return Invalid(what, "has no 'name'");
    request->add_outputs()->set_name((*name)->get<std::string>());
    absl::StatusOr<const Json*> output_parameters =
        Member(output, "parameters", what, IsObject, "an object");
    if (!output_parameters.ok()) return output_parameters.status();
    if (*output_parameters == nullptr) continue;
    absl::StatusOr<const Json*> binary_data =
        Member(**output_parameters, "binary_data", what, IsBool, "a boolean");
    if (!binary_data.ok()) return binary_data.status();
    if (*binary_data != nullptr && !binary_set) {
      options->binary_output = (*binary_data)->get<bool>();
      binary_set = true;
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ReferenceParseHttpInferRequest(absl::string_view body,
                                            std::optional<int64_t> header_length,
                                            inference::ModelInferRequest* request,
                                            HttpInferOptions* options) {
  absl::string_view json_text = body;
  absl::string_view binary;
  if (header_length.has_value()) {
    if (*header_length < 0 || static_cast<uint64_t>(*header_length) > body.size()) {
      return absl::InvalidArgumentError(absl::StrCat("Inference-Header-Content-Length is ",
                                                     *header_length, " but the request body has ",
                                                     body.size(), " bytes"));
    }
    json_text = body.substr(0, static_cast<size_t>(*header_length));
    binary = body.substr(static_cast<size_t>(*header_length));
  }
  Json root;
  try {
    root = Json::parse(json_text.begin(), json_text.end());
  } catch (const Json::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat("the request is not valid JSON: ", e.what()));
  }
  return ParseJson(root, binary, request, options);
}

}  // namespace tensorcompute::server::kserve
