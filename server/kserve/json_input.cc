#include "server/kserve/json_input.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"

#include "core/shape.h"
#include "core/status_macros.h"
#include "proto/kserve_wire.h"
#include "server/kserve/codec.h"
#include "server/kserve/json_data.h"

namespace tensorcompute::server::kserve {
namespace {

using core::DataType;

absl::Status Invalid(absl::string_view what, absl::string_view problem) {
  return absl::InvalidArgumentError(absl::StrCat(what, ": ", problem));
}

// Decodes the input's `data` (its text at data_start in `json`) as `dtype`.
void DecodeAgain(DataType dtype, absl::string_view json, JsonInput* in) {
  in->raw.clear();
  const char* cursor = nullptr;
  const size_t left = static_cast<size_t>(json.data() + json.size() - in->data_start);
  JsonDataDecoder decoder(dtype, &in->raw, &cursor, in->ReserveFor(dtype, left));
  ParseJsonValue(in->data_start, json.data() + json.size(), &cursor, &decoder, /*strict=*/false);
  in->decoded_as = dtype;
  in->count = decoder.count();
  in->bad = decoder.bad();
  in->bad_quote = decoder.bad_quote();
}

}  // namespace

std::optional<DataType> JsonInput::DecodeAtOnceAs() const {
  // Without the shape the tensor's size is unknown, and a string grown by doubling can take
  // twice its final size: such data is read again when the input ends, into a reserved buffer.
  if (datatype != JsonField::kPresent || shape != JsonField::kPresent || shape_bad ||
      binary_size != JsonField::kAbsent) {
    return std::nullopt;
  }
  return proto::KserveDatatypeOf(datatype_value);
}

size_t JsonInput::ReserveFor(DataType dtype, size_t text_left) const {
  if (dtype == DataType::kString || shape != JsonField::kPresent || shape_bad) return 0;
  for (int64_t d : dims) {
    if (d < 0) return 0;
  }
  const std::optional<int64_t> n = core::CheckedNumElements(dims);
  if (!n.has_value()) return 0;
  // Never more than the text can hold: each element takes at least two characters ("1,").
  const size_t most = text_left / 2 + 1;
  return std::min(static_cast<size_t>(*n), most) * core::ElementSize(dtype);
}

// The checks and messages of ParseInput in the document decoder
// (tests/server/kserve_json_reference.cc, the reference tested against), in its order.
absl::Status FinishJsonInput(JsonInput* input, int index, absl::string_view json,
                             absl::string_view binary, size_t* binary_at,
                             inference::ModelInferRequest* request, bool* reparsed) {
  JsonInput& in = *input;
  std::string what = absl::StrCat("inputs[", index, "]");
  if (in.name == JsonField::kWrongType) return Invalid(what, "'name' must be a string");
  if (in.name == JsonField::kAbsent) return Invalid(what, "has no 'name'");
  auto* tensor = request->add_inputs();
  tensor->set_name(in.name_value);
  what = absl::StrCat("input '", tensor->name(), "'");

  if (in.datatype == JsonField::kWrongType) return Invalid(what, "'datatype' must be a string");
  if (in.datatype == JsonField::kAbsent) return Invalid(what, "has no 'datatype'");
  tensor->set_datatype(in.datatype_value);
  TC_ASSIGN_OR_RETURN(const DataType dtype, ParseDatatype(tensor->datatype(), what));

  if (in.shape == JsonField::kWrongType) return Invalid(what, "'shape' must be an array");
  if (in.shape == JsonField::kAbsent) return Invalid(what, "has no 'shape'");
  for (int64_t d : in.dims) tensor->add_shape(d);
  if (in.shape_bad) return Invalid(what, "'shape' must be an array of integers");

  if (in.parameters == JsonField::kWrongType) {
    return Invalid(what, "'parameters' must be an object");
  }
  if (in.binary_size == JsonField::kWrongType) {
    return Invalid(what, "'binary_data_size' must be an integer");
  }
  std::string* raw = request->add_raw_input_contents();
  if (in.binary_size == JsonField::kPresent) {
    if (in.data != JsonField::kAbsent) {
      return Invalid(what, "has both 'data' and the binary_data_size parameter: one or the other");
    }
    const int64_t size = in.binary_size_value;
    if (size < 0 || static_cast<uint64_t>(size) > binary.size() - *binary_at) {
      return Invalid(
          what, absl::StrCat("binary_data_size ", size, " but only ", binary.size() - *binary_at,
                             " bytes of binary data are left after the JSON"));
    }
    raw->assign(binary.data() + *binary_at, static_cast<size_t>(size));
    *binary_at += static_cast<size_t>(size);
    return absl::OkStatus();
  }
  if (in.data == JsonField::kAbsent) {
    return Invalid(what, "has neither 'data' nor binary_data_size");
  }
  if (in.data == JsonField::kWrongType) return Invalid(what, "data must be an array");
  if (in.decoded_as != dtype) {
    DecodeAgain(dtype, json, &in);
    *reparsed = true;
  }
  if (!in.bad.ok()) {
    return Invalid(what, absl::StrCat("data element ", in.count, " (", in.bad_quote, ") ",
                                      in.bad.message(), " ", tensor->datatype()));
  }
  *raw = std::move(in.raw);
  // A shape the codec refuses (a negative dimension, too many elements) is left to it to say.
  bool negative = false;
  for (int64_t d : in.dims) negative = negative || d < 0;
  const std::optional<int64_t> n = core::CheckedNumElements(in.dims);
  if (!negative && n.has_value() && *n != in.count) {
    return Invalid(what, absl::StrCat("shape ", core::ShapeToString(in.dims), " has ", *n,
                                      " elements but 'data' holds ", in.count));
  }
  return absl::OkStatus();
}

}  // namespace tensorcompute::server::kserve
