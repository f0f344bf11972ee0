#include "core/npy_format.h"

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

#include "core/status_macros.h"
#include "core/utf8.h"

namespace tensorcompute::core {
namespace {

absl::Status Invalid(absl::string_view what) { return absl::InvalidArgumentError(what); }

// ---- .npy ----

constexpr absl::string_view kNpyMagic("\x93NUMPY", 6);

struct NpyHeader {
  std::string descr;
  bool fortran_order = false;
  Shape shape;
};

// A parser for the header's dict literal, e.g. {'descr': '<f4', 'fortran_order': False,
// 'shape': (2, 3), }: Python's repr() of a dict of a string, a bool and a tuple of ints.
class NpyHeaderParser {
 public:
  explicit NpyHeaderParser(absl::string_view text) : text_(text) {}

  absl::StatusOr<NpyHeader> Parse() {
    NpyHeader h;
    bool seen_descr = false, seen_order = false, seen_shape = false;
    if (!Consume('{')) return Error("expected '{'");
    while (!Consume('}')) {
      std::string key;
      TC_RETURN_IF_ERROR(ParseString(&key));
      if (!Consume(':')) return Error(absl::StrCat("expected ':' after '", key, "'"));
      if (key == "descr" && !seen_descr) {
        SkipSpace();
        if (pos_ < text_.size() && text_[pos_] == '[') {
          return Invalid(
              "unsupported .npy dtype: structured dtypes (a list descr) are not supported");
        }
        TC_RETURN_IF_ERROR(ParseString(&h.descr));
        seen_descr = true;
      } else if (key == "fortran_order" && !seen_order) {
        if (ConsumeWord("True")) {
          h.fortran_order = true;
        } else if (!ConsumeWord("False")) {
          return Error("expected True or False for 'fortran_order'");
        }
        seen_order = true;
      } else if (key == "shape" && !seen_shape) {
        TC_RETURN_IF_ERROR(ParseShape(&h.shape));
        seen_shape = true;
      } else {
        return Error(absl::StrCat("unexpected or repeated key '", key,
                                  "'; expected 'descr', 'fortran_order' and 'shape' once each"));
      }
      if (!Consume(',')) {
        if (!Consume('}')) return Error("expected ',' or '}'");
        break;
      }
    }
    SkipSpace();
    if (pos_ != text_.size()) return Error("unexpected text after the closing '}'");
    if (!seen_descr || !seen_order || !seen_shape) {
      return Error("missing key; expected 'descr', 'fortran_order' and 'shape'");
    }
    return h;
  }

 private:
  absl::Status Error(absl::string_view what) const {
    return Invalid(absl::StrCat("malformed .npy header at byte ", pos_, ": ", what, " in \"",
                                absl::CHexEscape(text_.substr(0, 200)), "\""));
  }
  void SkipSpace() {
    while (pos_ < text_.size() && absl::ascii_isspace(static_cast<unsigned char>(text_[pos_]))) {
      ++pos_;
    }
  }
  bool Consume(char c) {
    SkipSpace();
    if (pos_ >= text_.size() || text_[pos_] != c) return false;
    ++pos_;
    return true;
  }
  bool ConsumeWord(absl::string_view word) {
    SkipSpace();
    if (!absl::StartsWith(text_.substr(pos_), word)) return false;
    pos_ += word.size();
    return true;
  }
  absl::Status ParseString(std::string* out) {
    SkipSpace();
    if (pos_ >= text_.size() || (text_[pos_] != '\'' && text_[pos_] != '"')) {
      return Error("expected a quoted string");
    }
    const char quote = text_[pos_++];
    const size_t end = text_.find(quote, pos_);
    if (end == absl::string_view::npos) return Error("unterminated string");
    *out = std::string(text_.substr(pos_, end - pos_));
    if (absl::StrContains(*out, '\\')) return Error("escapes in strings are not supported");
    pos_ = end + 1;
    return absl::OkStatus();
  }
  absl::Status ParseShape(Shape* shape) {
    if (!Consume('(')) return Error("expected '(' to open 'shape'");
    while (!Consume(')')) {
      SkipSpace();
      int64_t dim = 0;
      const char* begin = text_.data() + pos_;
      const auto [ptr, ec] = std::from_chars(begin, text_.data() + text_.size(), dim);
      if (ec != std::errc() || dim < 0) return Error("expected a dimension (an int >= 0)");
      pos_ += ptr - begin;
      if (pos_ < text_.size() && text_[pos_] == 'L') ++pos_;  // Python 2 long
      shape->push_back(dim);
      if (!Consume(',')) {
        if (!Consume(')')) return Error("expected ',' or ')' in 'shape'");
        break;
      }
    }
    return absl::OkStatus();
  }

  absl::string_view text_;
  size_t pos_ = 0;
};

// The NumPy type codes of the fixed-size dtypes (all but bfloat16).
struct NpyCode {
  char kind;
  size_t size;
  DataType dtype;
};
constexpr NpyCode kNpyCodes[] = {
    {'b', 1, DataType::kBool},      {'i', 1, DataType::kInt8},        {'i', 2, DataType::kInt16},
    {'i', 4, DataType::kInt32},     {'i', 8, DataType::kInt64},       {'u', 1, DataType::kUint8},
    {'u', 2, DataType::kUint16},    {'u', 4, DataType::kUint32},      {'u', 8, DataType::kUint64},
    {'f', 2, DataType::kFloat16},   {'f', 4, DataType::kFloat32},     {'f', 8, DataType::kFloat64},
    {'c', 8, DataType::kComplex64}, {'c', 16, DataType::kComplex128},
};

// What a descr such as '<f4', '>c16' or '|S7' means here.
struct NpyType {
  DataType dtype;
  size_t itemsize;  // bytes per element in the file
  char kind;        // 'S' or 'U' for strings, else 0
  bool swap;        // big-endian file data
};

absl::StatusOr<NpyType> ParseDescr(absl::string_view descr) {
  auto unsupported = [&](absl::string_view why) {
    return Invalid(absl::StrCat("unsupported .npy dtype '", descr, "': ", why));
  };
  absl::string_view rest = descr;
  char order = '=';
  if (!rest.empty() && absl::StrContains("<>|=", rest[0])) {
    order = rest[0];
    rest.remove_prefix(1);
  }
  if (rest.empty()) return unsupported("no type code");
  const char kind = rest[0];
  rest.remove_prefix(1);
  size_t size = 0;
  const auto [ptr, ec] = std::from_chars(rest.data(), rest.data() + rest.size(), size);
  const bool sized = ec == std::errc() && ptr == rest.data() + rest.size();
  if (kind == 'O') return unsupported("object arrays (pickled Python objects) cannot be read");
  if (kind == 'V') return unsupported("structured/void dtypes are not supported");
  if (kind == 'M' || kind == 'm') return unsupported("datetime/timedelta is not supported");
  const bool swap = order == '>';
  if ((kind == 'S' || kind == 'U') && sized && size > 0) {
    if (kind == 'U' && size > std::numeric_limits<size_t>::max() / 4) {
      return unsupported("too wide");
    }
    return NpyType{DataType::kString, kind == 'U' ? size * 4 : size, kind, swap};
  }
  for (const NpyCode& c : kNpyCodes) {
    if (sized && c.kind == kind && c.size == size) return NpyType{c.dtype, size, 0, swap};
  }
  return unsupported("expected b1, i1/i2/i4/i8, u1/u2/u4/u8, f2/f4/f8, c8/c16, S<n> or U<n>");
}

// Reverses each `width`-byte group of `data` in place.
void SwapBytes(uint8_t* data, size_t bytes, size_t width) {
  for (size_t i = 0; i + width <= bytes; i += width) std::reverse(data + i, data + i + width);
}

// Returns the elements of Fortran-ordered `data` in row-major order.
std::string FortranToC(absl::string_view data, const Shape& shape, size_t itemsize, int64_t n) {
  std::string out(data.size(), '\0');
  const size_t rank = shape.size();
  std::vector<int64_t> stride(rank), index(rank, 0);  // strides in elements
  for (size_t k = 0, s = 1; k < rank; s *= shape[k], ++k) stride[k] = static_cast<int64_t>(s);
  int64_t src = 0;
  for (int64_t dst = 0; dst < n; ++dst) {
    std::memcpy(&out[dst * itemsize], &data[src * itemsize], itemsize);
    for (size_t k = rank; k-- > 0;) {  // row-major increment of `index`
      src += stride[k];
      if (++index[k] < shape[k]) break;
      src -= stride[k] * shape[k];
      index[k] = 0;
    }
  }
  return out;
}

absl::StatusOr<core::Tensor> NpyStrings(absl::string_view data, const NpyType& type,
                                        const Shape& shape, int64_t n) {
  std::vector<std::string> strings(n);
  for (int64_t i = 0; i < n; ++i) {
    absl::string_view item = data.substr(i * type.itemsize, type.itemsize);
    std::string& s = strings[i];
    if (type.kind == 'S') {
      s = std::string(item.substr(0, item.find_last_not_of('\0') + 1));  // npos + 1 == 0
      continue;
    }
    std::vector<char32_t> units(type.itemsize / 4);
    std::memcpy(units.data(), item.data(), item.size());
    if (type.swap) SwapBytes(reinterpret_cast<uint8_t*>(units.data()), item.size(), 4);
    while (!units.empty() && units.back() == 0) units.pop_back();
    for (char32_t cp : units) {
      if (cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) {
        return Invalid(absl::StrCat(".npy element ", i, " has code unit 0x",
                                    absl::Hex(static_cast<uint32_t>(cp)),
                                    ", which is not a Unicode scalar value"));
      }
      AppendUtf8(cp, &s);
    }
  }
  return core::Tensor::FromStrings(shape, std::move(strings));
}

// '<f4', '|u1', '<U7', '|S3'. REQUIRES: dtype is not bfloat16.
std::string NpyDescr(DataType dtype, char kind, size_t width) {
  for (const NpyCode& c : kNpyCodes) {
    if (c.dtype == dtype) {
      return absl::StrCat(c.size == 1 ? "|" : "<", std::string(1, c.kind), c.size);
    }
  }
  return absl::StrCat(kind == 'U' ? "<U" : "|S", width);
}

// The file's bytes of fixed-size elements of `type`, made the tensor's: big-endian swapped,
// bools normalized.
void ConvertInPlace(const NpyType& type, absl::Span<uint8_t> out) {
  const bool complex = type.dtype == DataType::kComplex64 || type.dtype == DataType::kComplex128;
  if (type.swap) SwapBytes(out.data(), out.size(), complex ? type.itemsize / 2 : type.itemsize);
  if (type.dtype == DataType::kBool) {
    for (uint8_t& b : out) b = b != 0;  // NumPy reads any nonzero byte as True
  }
}

// The tensor of `type` and C-order `shape` whose elements are `data` (exactly its bytes).
absl::StatusOr<core::Tensor> FromNpyData(const NpyType& type, const Shape& shape, int64_t n,
                                         absl::string_view data) {
  if (type.dtype == DataType::kString) return NpyStrings(data, type, shape, n);
  TC_ASSIGN_OR_RETURN(core::Tensor t, core::Tensor::Allocate(type.dtype, shape));
  absl::Span<uint8_t> out = t.mutable_bytes();
  if (!out.empty()) std::memcpy(out.data(), data.data(), out.size());
  ConvertInPlace(type, out);
  return t;
}

}  // namespace

absl::StatusOr<int64_t> NpyHeaderBytes(absl::string_view preamble) {
  if (!absl::StartsWith(preamble, kNpyMagic)) {
    return Invalid(absl::StrCat("not a .npy file: it starts with \"",
                                absl::CHexEscape(preamble.substr(0, 6)), "\", expected \"",
                                absl::CHexEscape(kNpyMagic), "\""));
  }
  if (preamble.size() < 10) return Invalid("truncated .npy file: it ends inside the preamble");
  const auto major = static_cast<uint8_t>(preamble[6]), minor = static_cast<uint8_t>(preamble[7]);
  if (major < 1 || major > 3) {
    return Invalid(absl::StrCat("unsupported .npy format version ", major, ".", minor,
                                "; expected 1.0, 2.0 or 3.0"));
  }
  const size_t prefix = major == 1 ? 10 : 12;
  if (preamble.size() < prefix) return Invalid("truncated .npy file: it ends inside the preamble");
  uint32_t header_len = 0;
  for (size_t k = prefix; k-- > 8;) {
    header_len = header_len << 8 | static_cast<uint8_t>(preamble[k]);
  }
  return static_cast<int64_t>(prefix) + header_len;
}

absl::StatusOr<NpyLayout> ParseNpyLayout(absl::string_view head) {
  TC_ASSIGN_OR_RETURN(const int64_t header_end, NpyHeaderBytes(head));
  const size_t prefix = static_cast<uint8_t>(head[6]) == 1 ? 10 : 12;
  if (static_cast<int64_t>(head.size()) < header_end) {
    return Invalid(absl::StrCat("truncated .npy header: it is ", header_end - prefix,
                                " bytes but only ", head.size() - prefix, " follow"));
  }
  TC_ASSIGN_OR_RETURN(
      const NpyHeader header,
      NpyHeaderParser(head.substr(prefix, static_cast<size_t>(header_end) - prefix)).Parse());
  TC_ASSIGN_OR_RETURN(const NpyType type, ParseDescr(header.descr));
  const std::optional<int64_t> n = core::CheckedNumElements(header.shape);
  const std::optional<int64_t> size =
      n ? core::CheckedMul(*n, static_cast<int64_t>(type.itemsize)) : std::nullopt;
  if (!size) {
    return Invalid(absl::StrCat(".npy shape ", core::ShapeToString(header.shape), " is too large"));
  }
  NpyLayout layout;
  layout.descr = header.descr;
  layout.dtype = type.dtype;
  layout.shape = header.shape;
  layout.fortran_order = header.fortran_order && header.shape.size() > 1;
  layout.data_offset = header_end;
  layout.data_bytes = *size;
  layout.item_bytes = static_cast<int64_t>(type.itemsize);
  return layout;
}

absl::Status CheckNpyDataBytes(const NpyLayout& layout, int64_t data_bytes) {
  if (data_bytes == layout.data_bytes) return absl::OkStatus();
  return Invalid(absl::StrCat(
      ".npy data is ", data_bytes, " bytes but shape ", core::ShapeToString(layout.shape), " of '",
      layout.descr, "' needs ", layout.data_bytes, " bytes",
      data_bytes < layout.data_bytes ? " (truncated file?)" : " (trailing bytes)"));
}

bool NpyRowsReadInPlace(const NpyLayout& layout) {
  const bool fortran = layout.fortran_order && layout.shape.size() > 1;
  return !fortran && layout.dtype != DataType::kString && layout.dtype != DataType::kUnspecified;
}

absl::StatusOr<core::Tensor> AllocateNpyRows(const NpyLayout& layout, int64_t rows) {
  if (!NpyRowsReadInPlace(layout)) {
    return Invalid(absl::StrCat("'", layout.descr, "'",
                                layout.fortran_order ? " in Fortran order" : "",
                                " cannot be read in place"));
  }
  Shape shape = layout.shape;
  if (!shape.empty()) shape[0] = rows;
  return core::Tensor::Allocate(layout.dtype, std::move(shape));
}

absl::Status ConvertNpyRowsInPlace(const NpyLayout& layout, absl::Span<uint8_t> data) {
  TC_ASSIGN_OR_RETURN(const NpyType type, ParseDescr(layout.descr));
  if (type.dtype == DataType::kString || data.size() % type.itemsize != 0) {
    return Invalid(absl::StrCat(data.size(), " bytes are not whole '", layout.descr, "' elements"));
  }
  ConvertInPlace(type, data);
  return absl::OkStatus();
}

absl::StatusOr<core::Tensor> ParseNpy(absl::string_view bytes) {
  TC_ASSIGN_OR_RETURN(const NpyLayout layout, ParseNpyLayout(bytes));
  absl::string_view data = bytes.substr(static_cast<size_t>(layout.data_offset));
  TC_RETURN_IF_ERROR(CheckNpyDataBytes(layout, static_cast<int64_t>(data.size())));
  TC_ASSIGN_OR_RETURN(const NpyType type, ParseDescr(layout.descr));
  const int64_t n = layout.data_bytes / static_cast<int64_t>(type.itemsize);
  std::string transposed;
  if (layout.fortran_order) {
    transposed = FortranToC(data, layout.shape, type.itemsize, n);
    data = transposed;
  }
  return FromNpyData(type, layout.shape, n, data);
}

absl::StatusOr<std::string> SerializeNpy(const core::TensorView& t) {
  TC_RETURN_IF_ERROR(core::ValidateTensor(t, "tensor", std::numeric_limits<int64_t>::max()));
  if (t.dtype == DataType::kBfloat16) {
    return Invalid("NumPy has no bfloat16 dtype; write bfloat16 tensors as JSON");
  }
  std::string data;
  char kind = 0;
  size_t width = 1;  // characters per string element; NumPy has no zero-width strings
  if (t.dtype == DataType::kString) {
    std::vector<std::vector<char32_t>> decoded(t.strings.size());
    kind = 'U';
    for (size_t i = 0; i < t.strings.size() && kind == 'U'; ++i) {
      if (!DecodeUtf8(*t.strings[i], &decoded[i]) ||
          std::find(decoded[i].begin(), decoded[i].end(), 0) != decoded[i].end()) {
        kind = 'S';
      }
    }
    for (size_t i = 0; i < t.strings.size(); ++i) {
      width = std::max(width, kind == 'U' ? decoded[i].size() : t.strings[i]->size());
    }
    const size_t itemsize = kind == 'U' ? 4 * width : width;
    data.assign(itemsize * t.strings.size(), '\0');
    for (size_t i = 0; i < t.strings.size(); ++i) {
      if (kind == 'U' && !decoded[i].empty()) {  // an empty vector's data() may be null
        std::memcpy(&data[i * itemsize], decoded[i].data(), 4 * decoded[i].size());
      } else if (kind == 'S') {
        t.strings[i]->copy(&data[i * itemsize], t.strings[i]->size());
      }
    }
  }
  std::vector<std::string> dims;
  for (int64_t d : t.shape) dims.push_back(absl::StrCat(d));
  std::string header =
      absl::StrCat("{'descr': '", NpyDescr(t.dtype, kind, width), "', 'fortran_order': False, ",
                   "'shape': (", absl::StrJoin(dims, ", "), dims.size() == 1 ? ",), }" : "), }");
  // Pad with spaces to a '\n' that ends the preamble on a multiple of 64 bytes.
  auto padded_len = [&](size_t prefix) { return (prefix + header.size() + 64) / 64 * 64 - prefix; };
  const size_t prefix = padded_len(10) <= 0xFFFF ? 10 : 12;  // 2.0 has a 4-byte length field
  header.append(padded_len(prefix) - header.size() - 1, ' ');
  header.push_back('\n');
  std::string out(kNpyMagic);
  out.push_back(prefix == 10 ? 1 : 2);
  out.push_back(0);
  for (size_t k = 0; k < prefix - 8; ++k) out.push_back(static_cast<char>(header.size() >> 8 * k));
  out += header;
  if (t.dtype == DataType::kString) {
    out += data;
  } else {
    out.append(reinterpret_cast<const char*>(t.data.data()), t.data.size());
  }
  return out;
}

}  // namespace tensorcompute::core
