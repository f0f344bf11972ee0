#include "client/json_format.h"

#include <algorithm>
#include <bit>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <system_error>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "nlohmann/json.hpp"

#include "core/half_float.h"
#include "core/status_macros.h"
#include "core/utf8.h"

namespace tensorcompute::client {
namespace {

using core::BFloat16ToFloat;
using core::DataType;
using core::DoubleToFloat;
using core::FloatToBFloat16;
using core::FloatToHalf;
using core::HalfToFloat;
using core::Shape;

absl::Status Invalid(absl::string_view what) { return absl::InvalidArgumentError(what); }

using Json = nlohmann::json;

uint32_t FloatBits(float f) { return std::bit_cast<uint32_t>(f); }

// ---- JSON values ----

// Values nested deeper than this are refused (the parse of `values` recurses per level).
constexpr size_t kMaxJsonDepth = 64;

std::string Brief(const Json& v) {
  std::string s = v.dump(-1, ' ', false, Json::error_handler_t::replace);
  if (s.size() > 40) s = absl::StrCat(s.substr(0, 37), "...");
  return s;
}

// A complex value is a list of numbers, so for complex dtypes the leaves are such lists.
bool IsLeaf(const Json& v, bool complex) {
  if (!v.is_array()) return true;
  return complex && !v.empty() && !v.front().is_array();
}

// "[1][2]": the nested-list path of flat position `flat` in `shape`.
std::string LeafPath(int64_t flat, const Shape& shape) {
  std::string suffix;
  for (size_t k = shape.size(); k-- > 0;) {
    suffix.insert(0, absl::StrCat("[", flat % shape[k], "]"));
    flat /= shape[k];
  }
  return absl::StrCat("values", suffix);
}

// Checks that `v` is a regular nest of lists of `shape` and collects its leaves, row-major.
absl::Status Flatten(const Json& v, const Shape& shape, bool complex, size_t depth,
                     std::string* path, std::vector<const Json*>* leaves) {
  if (depth == shape.size()) {
    if (!IsLeaf(v, complex)) {
      return Invalid(absl::StrCat(*path, ": ragged nested lists: expected a value, got a list"));
    }
    leaves->push_back(&v);
    return absl::OkStatus();
  }
  if (IsLeaf(v, complex) || static_cast<int64_t>(v.size()) != shape[depth]) {
    return Invalid(absl::StrCat(*path, ": ragged nested lists: expected a list of ", shape[depth],
                                " elements (the shape so far is ", core::ShapeToString(shape),
                                "), got ", Brief(v)));
  }
  for (size_t i = 0; i < v.size(); ++i) {
    const size_t mark = path->size();
    absl::StrAppend(path, "[", i, "]");
    TC_RETURN_IF_ERROR(Flatten(v[i], shape, complex, depth + 1, path, leaves));
    path->resize(mark);
  }
  return absl::OkStatus();
}

// Calls f(T{}) with the C++ type T of an integer dtype; returns false for other dtypes.
template <typename T, DataType kDtype>
struct IntegerType {
  using type = T;
  static constexpr DataType dtype = kDtype;
};
template <typename... I, typename F>
bool VisitIntegerTypes(DataType dtype, F& f) {
  return ((dtype == I::dtype ? (f(typename I::type{}), true) : false) || ...);
}
template <typename F>
bool VisitInteger(DataType dtype, F f) {
  return VisitIntegerTypes<
      IntegerType<int8_t, DataType::kInt8>, IntegerType<int16_t, DataType::kInt16>,
      IntegerType<int32_t, DataType::kInt32>, IntegerType<int64_t, DataType::kInt64>,
      IntegerType<uint8_t, DataType::kUint8>, IntegerType<uint16_t, DataType::kUint16>,
      IntegerType<uint32_t, DataType::kUint32>, IntegerType<uint64_t, DataType::kUint64>>(dtype, f);
}

template <typename T>
absl::Status ToInteger(const Json& v, DataType dtype, T* out) {
  const auto does_not_fit = [&] {
    return Invalid(absl::StrCat(Brief(v), " does not fit ", core::DataTypeName(dtype)));
  };
  using Limits = std::numeric_limits<T>;
  // nlohmann::json keeps every integer literal without a minus sign as unsigned, so the
  // signed branch below sees only literals written with one.
  if (v.is_number_unsigned()) {
    const auto u = v.get<uint64_t>();
    if (u > static_cast<uint64_t>(Limits::max())) return does_not_fit();
    *out = static_cast<T>(u);
  } else if (v.is_number_integer()) {  // negative
    const auto s = v.get<int64_t>();
    if (s < static_cast<int64_t>(Limits::min())) return does_not_fit();
    *out = static_cast<T>(s);
  } else if (v.is_number_float()) {
    const auto d = v.get<double>();
    if (!std::isfinite(d) || d != std::trunc(d)) {
      return Invalid(
          absl::StrCat(Brief(v), " is not an integer, as ", core::DataTypeName(dtype), " needs"));
    }
    // 2^digits is exact as a double, unlike max() for 64-bit types.
    if (d < static_cast<double>(Limits::min()) || d >= std::ldexp(1.0, Limits::digits)) {
      return does_not_fit();
    }
    *out = static_cast<T>(d);
  } else {
    return Invalid(
        absl::StrCat("expected an integer for ", core::DataTypeName(dtype), ", got ", Brief(v)));
  }
  return absl::OkStatus();
}

absl::StatusOr<double> ToDouble(const Json& v, DataType dtype) {
  if (v.is_number()) return v.get<double>();
  if (v.is_string()) {
    const std::string s = absl::AsciiStrToLower(v.get<std::string>());
    if (s == "nan" || s == "+nan") return std::numeric_limits<double>::quiet_NaN();
    if (s == "-nan") return -std::numeric_limits<double>::quiet_NaN();
    if (s == "inf" || s == "+inf" || s == "infinity") {
      return std::numeric_limits<double>::infinity();
    }
    if (s == "-inf" || s == "-infinity") return -std::numeric_limits<double>::infinity();
  }
  return Invalid(absl::StrCat("expected a number, \"nan\", \"inf\" or \"-inf\" for ",
                              core::DataTypeName(dtype), ", got ", Brief(v)));
}

// Writes leaf `v` as element `i` of `t`.
absl::Status StoreValue(const Json& v, int64_t i, core::Tensor* t) {
  const DataType dtype = t->dtype();
  uint8_t* dst = t->mutable_bytes().data() + i * core::ElementSize(dtype);
  auto store = [dst](auto value, size_t offset = 0) {
    std::memcpy(dst + offset, &value, sizeof(value));
  };
  absl::Status status;
  if (VisitInteger(dtype, [&](auto zero) {
        status = ToInteger(v, dtype, &zero);
        if (status.ok()) store(zero);
      })) {
    return status;
  }
  if (dtype == DataType::kBool) {
    if (v.is_boolean()) {
      *dst = v.get<bool>() ? 1 : 0;
    } else if (v.is_number_unsigned() && v.get<uint64_t>() <= 1) {
      *dst = static_cast<uint8_t>(v.get<uint64_t>());
    } else {
      return Invalid(absl::StrCat("expected true, false, 0 or 1 for bool, got ", Brief(v)));
    }
    return absl::OkStatus();
  }
  if (dtype == DataType::kComplex64 || dtype == DataType::kComplex128) {
    if (!v.is_array() || v.size() != 2) {
      return Invalid(absl::StrCat("expected [real, imag] for ", core::DataTypeName(dtype), ", got ",
                                  Brief(v)));
    }
    TC_ASSIGN_OR_RETURN(const double re, ToDouble(v[0], dtype));
    TC_ASSIGN_OR_RETURN(const double im, ToDouble(v[1], dtype));
    if (dtype == DataType::kComplex128) {
      store(re);
      store(im, 8);
    } else {
      store(DoubleToFloat(re));
      store(DoubleToFloat(im), 4);
    }
    return absl::OkStatus();
  }
  TC_ASSIGN_OR_RETURN(const double d, ToDouble(v, dtype));
  // double -> float -> half rounds correctly: a float has more than 2 x 11 + 2 bits.
  if (dtype == DataType::kFloat16) store(FloatToHalf(DoubleToFloat(d)));
  if (dtype == DataType::kBfloat16) store(FloatToBFloat16(DoubleToFloat(d)));
  if (dtype == DataType::kFloat32) store(DoubleToFloat(d));
  if (dtype == DataType::kFloat64) store(d);
  return absl::OkStatus();
}

absl::Status StoreString(const Json& v, std::string* out) {
  if (v.is_string()) {
    *out = v.get<std::string>();
    return absl::OkStatus();
  }
  if (v.is_object() && v.size() == 1 && v.contains("base64") && v["base64"].is_string()) {
    if (absl::Base64Unescape(v["base64"].get<std::string>(), out)) return absl::OkStatus();
    return Invalid(absl::StrCat("invalid base64 in ", Brief(v)));
  }
  return Invalid(absl::StrCat("expected a string or {\"base64\": \"...\"}, got ", Brief(v)));
}

absl::StatusOr<Shape> ParseShapeField(const Json& j) {
  if (!j.is_array()) return Invalid(absl::StrCat("shape: expected a list of ints, got ", Brief(j)));
  Shape shape;
  for (size_t i = 0; i < j.size(); ++i) {
    if (!j[i].is_number_unsigned()) {
      return Invalid(absl::StrCat("shape[", i, "]: expected an int >= 0, got ", Brief(j[i])));
    }
    const auto d = j[i].get<uint64_t>();
    if (d > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      return Invalid(absl::StrCat("shape[", i, "]: ", d, " is too large"));
    }
    shape.push_back(static_cast<int64_t>(d));
  }
  return shape;
}

absl::StatusOr<core::Tensor> ParseJsonDocument(const Json& doc) {
  if (!doc.is_object()) {
    return Invalid(absl::StrCat(
        "expected a JSON object {\"dtype\": ..., \"shape\": ..., \"values\": ...}, got ",
        Brief(doc)));
  }
  for (const auto& item : doc.items()) {
    const std::string& key = item.key();
    if (key != "dtype" && key != "shape" && key != "values") {
      return Invalid(
          absl::StrCat("unexpected key \"", key, "\"; expected \"dtype\", \"shape\", \"values\""));
    }
  }
  if (!doc.contains("dtype") || !doc["dtype"].is_string()) {
    return Invalid("\"dtype\": missing or not a string; expected a name such as \"float32\"");
  }
  const std::optional<DataType> dtype = core::DataTypeFromName(doc["dtype"].get<std::string>());
  if (!dtype) {
    std::vector<std::string> names;
    for (DataType d : core::kAllDataTypes) names.push_back(core::DataTypeName(d));
    return Invalid(absl::StrCat("\"dtype\": unknown dtype ", Brief(doc["dtype"]),
                                "; expected one of ", absl::StrJoin(names, ", ")));
  }
  if (!doc.contains("values")) return Invalid("\"values\" is missing");
  const Json& values = doc["values"];
  const bool complex = *dtype == DataType::kComplex64 || *dtype == DataType::kComplex128;

  Shape nested;  // the shape that the nesting of `values` gives, along its first elements
  for (const Json* v = &values; !IsLeaf(*v, complex); v = &v->front()) {
    nested.push_back(static_cast<int64_t>(v->size()));
    if (nested.size() > kMaxJsonDepth) {
      return Invalid(absl::StrCat("values: nested deeper than ", kMaxJsonDepth, " levels"));
    }
    if (v->empty()) break;
  }
  // The loop above read the shape off the first elements only; Flatten checks every list
  // against it.
  std::vector<const Json*> leaves;
  std::string path = "values";
  TC_RETURN_IF_ERROR(Flatten(values, nested, complex, 0, &path, &leaves));

  Shape shape = nested;
  if (doc.contains("shape")) {
    TC_ASSIGN_OR_RETURN(shape, ParseShapeField(doc["shape"]));
    const std::optional<int64_t> n = core::CheckedNumElements(shape);
    if (!n) return Invalid(absl::StrCat("shape ", core::ShapeToString(shape), " is too large"));
    // Flat values may take any shape of their element count; nested ones must match it.
    if (shape != nested && (nested.size() > 1 || static_cast<size_t>(*n) != leaves.size())) {
      return Invalid(absl::StrCat("values has shape ", core::ShapeToString(nested), " (",
                                  leaves.size(), " elements) but \"shape\" is ",
                                  core::ShapeToString(shape), " (", *n, " elements)"));
    }
  }
  TC_ASSIGN_OR_RETURN(core::Tensor t, core::Tensor::Allocate(*dtype, shape));
  const core::MutableTensorView view = t.mutable_view();
  for (size_t i = 0; i < leaves.size(); ++i) {
    const absl::Status s = *dtype == DataType::kString
                               ? StoreString(*leaves[i], view.strings[i])
                               : StoreValue(*leaves[i], static_cast<int64_t>(i), &t);
    if (!s.ok()) {
      // Positions as the file wrote them (`nested`), even when "shape" reshapes flat values.
      return Invalid(absl::StrCat(LeafPath(static_cast<int64_t>(i), nested), ": ", s.message()));
    }
  }
  return t;
}

// ---- JSON output ----

std::string NonFinite(double d) {
  if (std::isnan(d)) return "\"nan\"";
  return d > 0 ? "\"inf\"" : "\"-inf\"";
}

// Whether `text` reads back as `bits`: parsed as a double, then rounded by `round` as
// ParseJson rounds it.
bool ReadsBackAs(absl::string_view text, uint32_t (*round)(double), uint32_t bits) {
  double d = 0;
  const auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), d);
  return ec == std::errc() && round(d) == bits;
}

// Prints `f`, whose bits in its own dtype are `bits`, in the fewest digits that read back to
// those bits: for float16 and bfloat16 (digits > 0) an integer as such, else 1 to `digits`
// significant digits; then the shortest float form. Each is checked because ParseJson reads
// through a double, and a shortest float form can in rare cases fail to survive that; the
// last resort, the shortest form of the exact double, always does.
std::string FormatFloat(float f, uint32_t bits, uint32_t (*round)(double), int digits) {
  if (!std::isfinite(f)) return NonFinite(f);
  if (f == 0) return std::signbit(f) ? "-0.0" : "0";  // "-0" would read back as the int 0
  if (digits > 0 && f == std::trunc(f) && std::fabs(f) < 0x1p24f) {
    return absl::StrCat(static_cast<int32_t>(f));  // 65504, not 6.55e+04
  }
  // `digits` (5 for float16, 4 for bfloat16) is the precision that suffices for the format,
  // ceil(1 + significand bits * log10(2)) with 11 and 8 bits; shorter forms are tried first.
  char buf[64];
  for (int p = 1; p <= digits + 1; ++p) {
    const auto r = p <= digits
                       ? std::to_chars(buf, buf + sizeof(buf), f, std::chars_format::general, p)
                       : std::to_chars(buf, buf + sizeof(buf), f);
    const absl::string_view text(buf, r.ptr - buf);
    if (ReadsBackAs(text, round, bits)) return std::string(text);
  }
  const auto r = std::to_chars(buf, buf + sizeof(buf), static_cast<double>(f));
  return std::string(buf, r.ptr - buf);
}

std::string FormatDouble(double d) {
  if (!std::isfinite(d)) return NonFinite(d);
  if (d == 0) return std::signbit(d) ? "-0.0" : "0";
  char buf[64];
  const auto r = std::to_chars(buf, buf + sizeof(buf), d);
  return std::string(buf, r.ptr - buf);
}

uint32_t RoundFloat32(double d) { return FloatBits(DoubleToFloat(d)); }
uint32_t RoundHalf(double d) { return FloatToHalf(DoubleToFloat(d)); }
uint32_t RoundBFloat16(double d) { return FloatToBFloat16(DoubleToFloat(d)); }

// JSON requires escaping only '"', '\\' and control characters below 0x20; other bytes,
// UTF-8 sequences included, are copied (callers pass valid UTF-8 only).
std::string QuoteJson(absl::string_view s) {
  std::string out = "\"";
  for (char c : s) {
    const auto u = static_cast<unsigned char>(c);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (c == '\n') {
      out += "\\n";
    } else if (u < 0x20) {
      absl::StrAppend(&out, "\\u00", absl::Hex(unsigned{u}, absl::kZeroPad2));
    } else {
      out += c;
    }
  }
  out += '"';
  return out;
}

void AppendJsonElement(const core::TensorView& t, size_t i, std::string* out) {
  if (t.dtype == DataType::kString) {
    const std::string& s = *t.strings[i];
    out->append(core::IsValidUtf8(s)
                    ? QuoteJson(s)
                    : absl::StrCat("{\"base64\": \"", absl::Base64Escape(s), "\"}"));
    return;
  }
  const uint8_t* p = t.data.data() + i * core::ElementSize(t.dtype);
  auto load = [p](auto zero, size_t offset = 0) {
    std::memcpy(&zero, p + offset, sizeof(zero));
    return zero;
  };
  if (VisitInteger(t.dtype, [&](auto zero) { absl::StrAppend(out, load(zero)); })) return;
  auto f32 = [&](float f) { return FormatFloat(f, FloatBits(f), RoundFloat32, 0); };
  if (t.dtype == DataType::kBool) {
    out->append(*p ? "true" : "false");
  } else if (t.dtype == DataType::kFloat16) {
    const uint16_t h = load(uint16_t{0});
    out->append(FormatFloat(HalfToFloat(h), h, RoundHalf, 5));
  } else if (t.dtype == DataType::kBfloat16) {
    const uint16_t b = load(uint16_t{0});
    out->append(FormatFloat(BFloat16ToFloat(b), b, RoundBFloat16, 4));
  } else if (t.dtype == DataType::kFloat32) {
    out->append(f32(load(0.0f)));
  } else if (t.dtype == DataType::kFloat64) {
    out->append(FormatDouble(load(0.0)));
  } else if (t.dtype == DataType::kComplex64) {
    absl::StrAppend(out, "[", f32(load(0.0f)), ", ", f32(load(0.0f, 4)), "]");
  } else if (t.dtype == DataType::kComplex128) {
    absl::StrAppend(out, "[", FormatDouble(load(0.0)), ", ", FormatDouble(load(0.0, 8)), "]");
  }
}

}  // namespace

absl::StatusOr<core::Tensor> ParseJson(absl::string_view text) {
  // nlohmann::json reports errors by exception; none may leave this function (errors are
  // absl::Status across the codebase).
  try {
    return ParseJsonDocument(Json::parse(text.begin(), text.end()));
  } catch (const Json::exception& e) {
    return Invalid(absl::StrCat("invalid JSON: ", e.what()));
  }
}

std::string SerializeJson(const core::TensorView& t) {
  std::string out = absl::StrCat("{\"dtype\": \"", core::DataTypeName(t.dtype), "\", \"shape\": [",
                                 absl::StrJoin(t.shape, ", "), "], \"values\": [");
  const size_t elem = core::ElementSize(t.dtype);
  // ElementSize is 0 for kUnspecified as well as for strings: no division by 0.
  const size_t n = t.dtype == DataType::kString ? t.strings.size()
                   : elem == 0                  ? 0
                                                : t.data.size() / elem;
  for (size_t i = 0; i < n; ++i) {
    if (i > 0) out += ", ";
    AppendJsonElement(t, i, &out);
  }
  out += "]}";
  return out;
}

}  // namespace tensorcompute::client
