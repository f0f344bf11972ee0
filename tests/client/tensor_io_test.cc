#include "client/tensor_io.h"

#include <cmath>
#include <complex>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include <sys/stat.h>
#include <unistd.h>

#include "core/dtype.h"
#include "core/half_float.h"
#include "core/tensor.h"
#include "tests/testing/random_tensor.h"
#include "tests/testing/status_matchers.h"

namespace tensorcompute::client {
namespace {

using core::BFloat16ToFloat;
using core::DataType;
using core::DoubleToFloat;
using core::FloatToBFloat16;
using core::FloatToHalf;
using core::HalfToFloat;
using core::ParseNpy;
using core::SerializeNpy;
using core::Shape;
using core::Tensor;
using tensorcompute::testing::IsOk;
using tensorcompute::testing::MakeStrings;
using tensorcompute::testing::MakeTensor;
using tensorcompute::testing::StatusIs;
using ::testing::HasSubstr;
using ::testing::StartsWith;

constexpr auto kInvalid = absl::StatusCode::kInvalidArgument;

// ---- helpers ----

uint32_t Bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
float FromBits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
bool IsHalfNaN(uint16_t h) { return (h & 0x7FFF) > 0x7C00; }
bool IsBFloat16NaN(uint16_t b) { return (b & 0x7FFF) > 0x7F80; }

// A .npy file of `header` (the dict literal) and `data`, padded as NumPy pads it.
std::string NpyFile(absl::string_view header, absl::string_view data, int major = 1) {
  const size_t prefix = major == 1 ? 10 : 12;
  std::string h(header);
  h.append(63 - (prefix + h.size()) % 64, ' ');
  h += '\n';
  std::string out =
      absl::StrCat("\x93NUMPY", std::string(1, static_cast<char>(major)), std::string(1, '\0'));
  for (size_t k = 0; k < prefix - 8; ++k) out += static_cast<char>(h.size() >> (8 * k));
  return absl::StrCat(out, h, data);
}

std::string Bytes(std::initializer_list<int> bytes) {
  std::string s;
  for (int b : bytes) s += static_cast<char>(b);
  return s;
}

// Every NaN replaced by one quiet NaN, so that tensors that went through JSON (which keeps
// that a value is NaN, not its payload) compare byte for byte.
Tensor CanonicalNaNs(const Tensor& t) {
  Tensor c = t.Clone();
  if (t.dtype() == DataType::kString) return c;
  absl::Span<uint8_t> b = c.mutable_bytes();
  auto each = [&](size_t width, auto is_nan, auto canonical) {
    for (size_t i = 0; i + width <= b.size(); i += width) {
      decltype(canonical) x;
      std::memcpy(&x, &b[i], width);
      if (is_nan(x)) std::memcpy(&b[i], &canonical, width);
    }
  };
  switch (t.dtype()) {
    case DataType::kFloat16:
      each(2, IsHalfNaN, uint16_t{0x7E00});
      break;
    case DataType::kBfloat16:
      each(2, IsBFloat16NaN, uint16_t{0x7FC0});
      break;
    case DataType::kFloat32:
    case DataType::kComplex64:
      each(
          4, [](uint32_t x) { return (x & 0x7FFFFFFF) > 0x7F800000; }, uint32_t{0x7FC00000});
      break;
    case DataType::kFloat64:
    case DataType::kComplex128:
      each(
          8, [](uint64_t x) { return (x & ~(uint64_t{1} << 63)) > (uint64_t{0x7FF} << 52); },
          uint64_t{0x7FF8} << 48);
      break;
    default:
      break;
  }
  return c;
}

// Strings as NumPy's 'S' gives them back: trailing NULs stripped.
Tensor StripTrailingNuls(const Tensor& t) {
  std::vector<std::string> s = t.strings();
  for (std::string& x : s) x.erase(x.find_last_not_of('\0') + 1);
  return *Tensor::FromStrings(t.shape(), std::move(s));
}

// ---- NumPy-written files (numpy 2.4, np.save) ----

// np.arange(6, dtype='<f4').reshape(2, 3) / 4
constexpr char kNumpyF4[] =
    "\223NUMPY\001\000v\000{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }   "
    "                                                       \012\000\000\000\000\000\000"
    "\200>\000\000\000\077\000\000@\077\000\000\200\077\000\000\240\077";
// np.asfortranarray(np.array([[1, -2, 3], [4, 5, -600000]], dtype='>i4'))
constexpr char kNumpyBigEndianFortranI4[] =
    "\223NUMPY\001\000v\000{'descr': '>i4', 'fortran_order': True, 'shape': (2, 3), }    "
    "                                                       \012\000\000\000\001\000\000"
    "\000\004\377\377\377\376\000\000\000\005\000\000\000\003\377\366\330@";
// np.array(['héllo', '日本', ''], dtype='<U5')
constexpr char kNumpyUnicode[] =
    "\223NUMPY\001\000v\000{'descr': '<U5', 'fortran_order': False, 'shape': (3,), }     "
    "                                                       \012h\000\000\000\351\000\000"
    "\000l\000\000\000l\000\000\000o\000\000\000\345e\000\000,g\000\000\000\000\000\000"
    "\000\000\000\000\000\000\000\000\000\000\000\000\000\000\000\000\000\000\000\000\000"
    "\000\000\000\000\000\000\000";
// np.array([b'ab\xff', b'', b'\x00z'], dtype='S3')
constexpr char kNumpyBytes[] =
    "\223NUMPY\001\000v\000{'descr': '|S3', 'fortran_order': False, 'shape': (3,), }     "
    "                                                       \012ab\377\000\000\000\000z"
    "\000";
// np.array(1.5 - 2j, dtype=np.complex128)
constexpr char kNumpyC16Scalar[] =
    "\223NUMPY\001\000v\000{'descr': '<c16', 'fortran_order': False, 'shape': (), }      "
    "                                                       \012\000\000\000\000\000\000"
    "\370\077\000\000\000\000\000\000\000\300";
// np.array([1, 0.1, 65504, -np.inf], dtype=np.float16)
constexpr char kNumpyF2[] =
    "\223NUMPY\001\000v\000{'descr': '<f2', 'fortran_order': False, 'shape': (4,), }     "
    "                                                       \012\000<f.\377{\000\374";
// np.array([[True, False]])
constexpr char kNumpyBool[] =
    "\223NUMPY\001\000v\000{'descr': '|b1', 'fortran_order': False, 'shape': (1, 2), }   "
    "                                                       \012\001\000";

template <size_t N>
absl::string_view Literal(const char (&s)[N]) {
  return absl::string_view(s, N - 1);
}

// ---- float16 / bfloat16 ----

TEST(Half, EveryFloat16ValueConvertsExactlyAndBack) {
  for (uint32_t h = 0; h <= 0xFFFF; ++h) {
    const float f = HalfToFloat(static_cast<uint16_t>(h));
    if (IsHalfNaN(h)) {
      ASSERT_TRUE(std::isnan(f)) << std::hex << h;
      ASSERT_TRUE(IsHalfNaN(FloatToHalf(f))) << std::hex << h;
      continue;
    }
    const uint32_t exp = (h >> 10) & 0x1F, mant = h & 0x3FF;
    const double magnitude = exp == 0x1F ? INFINITY
                             : exp == 0  ? std::ldexp(mant, -24)
                                         : std::ldexp(1024 + mant, static_cast<int>(exp) - 25);
    ASSERT_EQ(f, (h & 0x8000) ? -magnitude : magnitude) << std::hex << h;
    ASSERT_EQ(std::signbit(f), (h & 0x8000) != 0) << std::hex << h;
    ASSERT_EQ(FloatToHalf(f), h) << std::hex << h;
  }
}

TEST(Half, Float16RoundsMidpointsToNearestEven) {
  for (uint16_t h = 0; h < 0x7C00; ++h) {  // every pair of neighbouring finite halves
    const float lo = HalfToFloat(h);
    const float hi = h + 1 == 0x7C00 ? 65536.0f : HalfToFloat(h + 1);
    const float mid = lo + (hi - lo) / 2;  // exact: one bit more than a half
    const uint16_t even = (h & 1) ? h + 1 : h;
    ASSERT_EQ(FloatToHalf(mid), even) << std::hex << h;
    ASSERT_EQ(FloatToHalf(-mid), even | 0x8000) << std::hex << h;
    ASSERT_EQ(FloatToHalf(std::nextafter(mid, 0.0f)), h) << std::hex << h;
    ASSERT_EQ(FloatToHalf(std::nextafter(mid, INFINITY)), h + 1) << std::hex << h;
  }
}

TEST(Half, Float16KnownValues) {
  EXPECT_EQ(FloatToHalf(65504.0f), 0x7BFF);               // largest finite
  EXPECT_EQ(FloatToHalf(65519.99f), 0x7BFF);              // below the tie
  EXPECT_EQ(FloatToHalf(65520.0f), 0x7C00);               // the tie goes to inf
  EXPECT_EQ(FloatToHalf(1e10f), 0x7C00);                  // overflow
  EXPECT_EQ(FloatToHalf(6.1035e-05f), 0x0400);            // smallest normal
  EXPECT_EQ(FloatToHalf(5.96e-08f), 0x0001);              // smallest subnormal
  EXPECT_EQ(FloatToHalf(2.98e-08f), 0x0000);              // just under half of it
  EXPECT_EQ(FloatToHalf(std::ldexp(1.0f, -25)), 0x0000);  // exactly half: to even 0
  EXPECT_EQ(FloatToHalf(std::ldexp(3.0f, -25)), 0x0002);  // 1.5 units: to even 2
  EXPECT_EQ(FloatToHalf(1.0f / 3), 0x3555);
  EXPECT_EQ(HalfToFloat(0x3555), 0.333251953125f);
  EXPECT_EQ(FloatToHalf(1.0f + std::ldexp(1.0f, -11)), 0x3C00);      // tie: down to even
  EXPECT_EQ(FloatToHalf(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3C02);  // tie: up to even
  EXPECT_EQ(FloatToHalf(-0.0f), 0x8000);
  EXPECT_EQ(FloatToHalf(-INFINITY), 0xFC00);
  EXPECT_EQ(FloatToHalf(std::numeric_limits<float>::quiet_NaN()) & 0x7E00, 0x7E00);  // quiet
  EXPECT_TRUE(std::isnan(HalfToFloat(0x7C01)));  // signalling half NaN
}

#if defined(__FLT16_MAX__)
TEST(Half, Float16MatchesTheCompilersConversion) {
  tensorcompute::testing::Rng rng(7);
  for (int i = 0; i < 1 << 20; ++i) {
    // Exponents around the half range, where all the rounding happens.
    const uint32_t sign = static_cast<uint32_t>(rng() & 1) << 31;
    const auto exp = static_cast<uint32_t>(tensorcompute::testing::UniformInt(rng, 95, 145));
    const float f = FromBits(sign | exp << 23 | static_cast<uint32_t>(rng() & 0x7FFFFF));
    const _Float16 ref = static_cast<_Float16>(f);
    uint16_t ref_bits;
    std::memcpy(&ref_bits, &ref, 2);
    ASSERT_EQ(FloatToHalf(f), ref_bits) << f;
  }
}
#endif

TEST(Half, EveryBFloat16ValueConvertsExactlyAndBack) {
  for (uint32_t b = 0; b <= 0xFFFF; ++b) {
    const float f = BFloat16ToFloat(static_cast<uint16_t>(b));
    if (IsBFloat16NaN(b)) {
      ASSERT_TRUE(std::isnan(f));
      ASSERT_TRUE(IsBFloat16NaN(FloatToBFloat16(f)));
      continue;
    }
    ASSERT_EQ(Bits(f), b << 16) << std::hex << b;
    ASSERT_EQ(FloatToBFloat16(f), b) << std::hex << b;
  }
}

TEST(Half, BFloat16RoundsMidpointsToNearestEven) {
  for (uint32_t b = 0; b < 0x7F80; ++b) {
    const uint32_t mid = b << 16 | 0x8000;  // halfway to b + 1, in every binade
    const uint32_t even = (b & 1) ? b + 1 : b;
    ASSERT_EQ(FloatToBFloat16(FromBits(mid)), even) << std::hex << b;
    ASSERT_EQ(FloatToBFloat16(FromBits(mid | 0x80000000)), even | 0x8000) << std::hex << b;
    ASSERT_EQ(FloatToBFloat16(FromBits(mid - 1)), b) << std::hex << b;
    ASSERT_EQ(FloatToBFloat16(FromBits(mid + 1)), b + 1) << std::hex << b;
  }
}

TEST(Half, BFloat16KnownValues) {
  EXPECT_EQ(FloatToBFloat16(1.0f / 3), 0x3EAB);
  EXPECT_EQ(FloatToBFloat16(std::numeric_limits<float>::max()), 0x7F80);  // overflow: inf
  EXPECT_EQ(FloatToBFloat16(FromBits(0x7F7F7FFF)), 0x7F7F);               // largest finite
  EXPECT_EQ(FloatToBFloat16(FromBits(0x00000001)), 0x0000);               // tiny subnormal
  EXPECT_EQ(FloatToBFloat16(FromBits(0x7F800001)) & 0x7FC0, 0x7FC0);      // sNaN -> qNaN
  EXPECT_EQ(BFloat16ToFloat(0x3F80), 1.0f);
}

// ---- .npy ----

TEST(Npy, EveryDtypeRoundTripsBitExactly) {
  tensorcompute::testing::Rng rng(1);
  for (DataType dtype : core::kAllDataTypes) {
    if (dtype == DataType::kBfloat16) continue;
    for (int64_t rank = 0; rank <= 5; ++rank) {
      const Tensor t = tensorcompute::testing::RandomTensor(
          dtype, tensorcompute::testing::RandomShape(rank, rng, 4, 0.1), rng);
      const absl::StatusOr<std::string> bytes = SerializeNpy(t.view());
      ASSERT_THAT(bytes, IsOk());
      const absl::StatusOr<Tensor> back = ParseNpy(*bytes);
      ASSERT_THAT(back, IsOk());
      const Tensor expected = dtype == DataType::kString ? StripTrailingNuls(t) : t.Clone();
      EXPECT_TRUE(core::IdenticalTensors(back->view(), expected.view()))
          << core::DataTypeName(dtype) << core::ShapeToString(t.shape());
    }
  }
}

// What --preload does with a file whose rows can be read in place (server/preload.cc): the
// file's data bytes copied straight into AllocateNpyRows' tensor, then converted in place.
absl::StatusOr<Tensor> ReadRowsInPlace(const std::string& file) {
  absl::StatusOr<core::NpyLayout> layout = core::ParseNpyLayout(file);
  if (!layout.ok()) return layout.status();
  if (!core::NpyRowsReadInPlace(*layout)) return absl::FailedPreconditionError("not in place");
  absl::StatusOr<Tensor> t = core::AllocateNpyRows(*layout, layout->shape[0]);
  if (!t.ok()) return t.status();
  const absl::Span<uint8_t> bytes = t->mutable_bytes();
  if (!bytes.empty()) std::memcpy(bytes.data(), file.data() + layout->data_offset, bytes.size());
  if (absl::Status s = core::ConvertNpyRowsInPlace(*layout, bytes); !s.ok()) return s;
  return t;
}

TEST(Npy, RowsReadInPlaceEqualWhatParseNpyReads) {
  tensorcompute::testing::Rng rng(2);
  for (DataType dtype : core::kAllDataTypes) {
    if (dtype == DataType::kBfloat16 || dtype == DataType::kString) continue;
    for (int64_t rank = 1; rank <= 4; ++rank) {
      const Tensor t = tensorcompute::testing::RandomTensor(
          dtype, tensorcompute::testing::RandomShape(rank, rng, 5, 0.1), rng);
      const absl::StatusOr<std::string> file = SerializeNpy(t.view());
      ASSERT_THAT(file, IsOk());
      const absl::StatusOr<Tensor> in_place = ReadRowsInPlace(*file);
      ASSERT_THAT(in_place, IsOk()) << core::DataTypeName(dtype);
      EXPECT_TRUE(core::IdenticalTensors(in_place->view(), ParseNpy(*file)->view()))
          << core::DataTypeName(dtype) << core::ShapeToString(t.shape());
    }
  }
  // Big-endian data is swapped, and bool bytes other than 0 read as 1, as ParseNpy does.
  const std::string be = NpyFile("{'descr': '>i4', 'fortran_order': False, 'shape': (2,), }",
                                 Bytes({0, 0, 1, 2, 0xFF, 0xFF, 0xFF, 0xFE}));
  const absl::StatusOr<Tensor> swapped = ReadRowsInPlace(be);
  ASSERT_THAT(swapped, IsOk());
  EXPECT_TRUE(core::IdenticalTensors(swapped->view(), ParseNpy(be)->view()));
  EXPECT_EQ(swapped->view().data[0], 0x02);  // 0x0102 little-endian: 02 01 00 00
  EXPECT_EQ(swapped->view().data[3], 0x00);
  const std::string b =
      NpyFile("{'descr': '|b1', 'fortran_order': False, 'shape': (3,), }", Bytes({0, 2, 255}));
  const absl::StatusOr<Tensor> bools = ReadRowsInPlace(b);
  ASSERT_THAT(bools, IsOk());
  EXPECT_THAT(std::vector<uint8_t>(bools->view().data.begin(), bools->view().data.end()),
              ::testing::ElementsAre(0, 1, 1));
  // Fortran order (rank > 1) and strings take ParseNpy's path instead.
  EXPECT_FALSE(core::NpyRowsReadInPlace(*core::ParseNpyLayout(Literal(kNumpyBigEndianFortranI4))));
  EXPECT_FALSE(core::NpyRowsReadInPlace(*core::ParseNpyLayout(Literal(kNumpyUnicode))));
  EXPECT_THAT(core::AllocateNpyRows(*core::ParseNpyLayout(Literal(kNumpyUnicode)), 1),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST(Npy, WritesAVersion1HeaderLikeNumPy) {
  const Tensor t = MakeTensor<float>({2, 3}, {0, 0.25, 0.5, 0.75, 1, 1.25});
  const absl::StatusOr<std::string> bytes = SerializeNpy(t.view());
  ASSERT_THAT(bytes, IsOk());
  EXPECT_THAT(*bytes, StartsWith(std::string("\x93NUMPY\x01\x00v\x00", 10) +
                                 "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }"));
  EXPECT_EQ(bytes->size(), 128 + 24u);
  EXPECT_EQ((*bytes)[127], '\n');
  EXPECT_EQ(bytes->substr(128), Literal(kNumpyF4).substr(128));  // NumPy's own data bytes
}

TEST(Npy, ReadsFilesThatNumPyWrote) {
  absl::StatusOr<Tensor> f4 = ParseNpy(Literal(kNumpyF4));
  ASSERT_THAT(f4, IsOk());
  EXPECT_TRUE(core::IdenticalTensors(
      f4->view(), MakeTensor<float>({2, 3}, {0, 0.25, 0.5, 0.75, 1, 1.25}).view()));
  absl::StatusOr<Tensor> i4 = ParseNpy(Literal(kNumpyBigEndianFortranI4));
  ASSERT_THAT(i4, IsOk());
  EXPECT_TRUE(core::IdenticalTensors(
      i4->view(), MakeTensor<int32_t>({2, 3}, {1, -2, 3, 4, 5, -600000}).view()));
  absl::StatusOr<Tensor> c16 = ParseNpy(Literal(kNumpyC16Scalar));
  ASSERT_THAT(c16, IsOk());
  EXPECT_TRUE(core::IdenticalTensors(c16->view(),
                                     MakeTensor<std::complex<double>>({}, {{1.5, -2}}).view()));
  absl::StatusOr<Tensor> f2 = ParseNpy(Literal(kNumpyF2));
  ASSERT_THAT(f2, IsOk());
  EXPECT_TRUE(core::IdenticalTensors(
      f2->view(),
      Tensor::FromValues<uint16_t>(DataType::kFloat16, {4},
                                   std::vector<uint16_t>{0x3C00, 0x2E66, 0x7BFF, 0xFC00})
          .view()));
  absl::StatusOr<Tensor> b = ParseNpy(Literal(kNumpyBool));
  ASSERT_THAT(b, IsOk());
  EXPECT_TRUE(core::IdenticalTensors(
      b->view(),
      Tensor::FromValues<uint8_t>(DataType::kBool, {1, 2}, std::vector<uint8_t>{1, 0}).view()));
}

TEST(Npy, ReadsNumPyStrings) {
  absl::StatusOr<Tensor> u = ParseNpy(Literal(kNumpyUnicode));
  ASSERT_THAT(u, IsOk());
  EXPECT_TRUE(core::IdenticalTensors(
      u->view(), MakeStrings({3}, {"h\xC3\xA9llo", "\xE6\x97\xA5\xE6\x9C\xAC", ""}).view()));
  absl::StatusOr<Tensor> s = ParseNpy(Literal(kNumpyBytes));
  ASSERT_THAT(s, IsOk());
  EXPECT_EQ(s->strings(), (std::vector<std::string>{"ab\xFF", "", std::string("\0z", 2)}));
}

TEST(Npy, WritesUtf8AsUnicodeAndOtherBytesAsS) {
  const Tensor utf8 = MakeStrings({3}, {"h\xC3\xA9llo", "", "\xF0\x9F\x98\x80"});
  absl::StatusOr<std::string> u = SerializeNpy(utf8.view());
  ASSERT_THAT(u, IsOk());
  EXPECT_THAT(*u, HasSubstr("'descr': '<U5'"));
  ASSERT_THAT(ParseNpy(*u), IsOk());
  EXPECT_EQ(ParseNpy(*u)->strings(), utf8.strings());

  const Tensor bytes = MakeStrings({3}, {"ok", "\xFF\xFE", std::string("a\0b", 3)});
  absl::StatusOr<std::string> s = SerializeNpy(bytes.view());
  ASSERT_THAT(s, IsOk());
  EXPECT_THAT(*s, HasSubstr("'descr': '|S3'"));
  EXPECT_EQ(ParseNpy(*s)->strings(), bytes.strings());

  // NumPy drops trailing NULs of 'S' elements, and so do we.
  absl::StatusOr<std::string> t = SerializeNpy(MakeStrings({1}, {std::string("x\0", 2)}).view());
  ASSERT_THAT(t, IsOk());
  EXPECT_EQ(ParseNpy(*t)->strings(), std::vector<std::string>{"x"});
}

TEST(Npy, ScalarsAndZeroSizeShapes) {
  for (const Shape& shape : {Shape{}, Shape{0}, Shape{3, 0, 2}, Shape{0, 0}}) {
    for (DataType dtype : {DataType::kInt64, DataType::kString, DataType::kComplex64}) {
      tensorcompute::testing::Rng rng(2);
      const Tensor t = tensorcompute::testing::RandomTensor(dtype, shape, rng);
      absl::StatusOr<std::string> bytes = SerializeNpy(t.view());
      ASSERT_THAT(bytes, IsOk());
      absl::StatusOr<Tensor> back = ParseNpy(*bytes);
      ASSERT_THAT(back, IsOk());
      const Tensor expected = dtype == DataType::kString ? StripTrailingNuls(t) : t.Clone();
      EXPECT_TRUE(core::IdenticalTensors(back->view(), expected.view()));
      EXPECT_EQ(back->shape(), shape);
    }
  }
  absl::StatusOr<std::string> scalar = SerializeNpy(MakeTensor<double>({}, {2.5}).view());
  ASSERT_THAT(scalar, IsOk());
  EXPECT_THAT(*scalar, HasSubstr("'shape': (), }"));
}

TEST(Npy, ReadsBigEndianData) {
  const std::string file = NpyFile("{'descr': '>u2', 'fortran_order': False, 'shape': (2,), }",
                                   Bytes({0x01, 0x02, 0xFF, 0x00}));
  absl::StatusOr<Tensor> t = ParseNpy(file);
  ASSERT_THAT(t, IsOk());
  EXPECT_EQ(t->values<uint16_t>(), (std::vector<uint16_t>{0x0102, 0xFF00}));

  // Complex numbers swap each half on its own.
  const std::string c = NpyFile("{'descr': '>c8', 'fortran_order': False, 'shape': (), }",
                                Bytes({0x3F, 0x80, 0, 0, 0xC0, 0, 0, 0}));
  absl::StatusOr<Tensor> z = ParseNpy(c);
  ASSERT_THAT(z, IsOk());
  EXPECT_EQ(z->values<std::complex<float>>()[0], std::complex<float>(1, -2));

  const std::string u = NpyFile("{'descr': '>U2', 'fortran_order': False, 'shape': (1,), }",
                                Bytes({0, 0, 0, 'h', 0, 0, 0x00, 0xE9}));
  EXPECT_EQ(ParseNpy(u)->strings(), std::vector<std::string>{"h\xC3\xA9"});
}

TEST(Npy, TransposesFortranOrder) {
  // A [2, 3, 2] int8 tensor whose element (i, j, k) is 100i + 10j + k, stored column-major:
  // the first index varies fastest.
  std::string data;
  std::vector<int8_t> expected;
  for (int k = 0; k < 2; ++k)
    for (int j = 0; j < 3; ++j)
      for (int i = 0; i < 2; ++i) data += static_cast<char>(100 * i + 10 * j + k - 128);
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 3; ++j)
      for (int k = 0; k < 2; ++k)
        expected.push_back(static_cast<int8_t>(100 * i + 10 * j + k - 128));
  absl::StatusOr<Tensor> t =
      ParseNpy(NpyFile("{'descr': '|i1', 'fortran_order': True, 'shape': (2, 3, 2), }", data));
  ASSERT_THAT(t, IsOk());
  EXPECT_EQ(t->shape(), (Shape{2, 3, 2}));
  EXPECT_EQ(t->values<int8_t>(), expected);
}

TEST(Npy, ReadsVersion2And3Headers) {
  for (int major : {2, 3}) {
    absl::StatusOr<Tensor> t =
        ParseNpy(NpyFile("{'descr': '<i8', 'fortran_order': False, 'shape': (1,), }",
                         Bytes({7, 0, 0, 0, 0, 0, 0, 0}), major));
    ASSERT_THAT(t, IsOk());
    EXPECT_EQ(t->values<int64_t>()[0], 7);
  }
}

TEST(Npy, WritesVersion2WhenTheHeaderExceeds64KiB) {
  Tensor t = *Tensor::Allocate(DataType::kUint8, Shape(22000, 1));  // "1, " x 22000
  t.mutable_bytes()[0] = 42;
  absl::StatusOr<std::string> bytes = SerializeNpy(t.view());
  ASSERT_THAT(bytes, IsOk());
  EXPECT_EQ((*bytes)[6], 2);
  EXPECT_EQ(bytes->size() % 64, 1u);  // the preamble, then one byte of data
  absl::StatusOr<Tensor> back = ParseNpy(*bytes);
  ASSERT_THAT(back, IsOk());
  EXPECT_EQ(back->shape(), t.shape());
}

TEST(Npy, AcceptsHeaderVariants) {
  // Key order, double quotes, no trailing comma, Python 2 longs, a descr without byte order.
  absl::StatusOr<Tensor> t = ParseNpy(
      NpyFile("{\"shape\": (2L,),\"fortran_order\":False,'descr':'f8'}", std::string(16, '\0')));
  ASSERT_THAT(t, IsOk());
  EXPECT_EQ(t->dtype(), DataType::kFloat64);
  EXPECT_EQ(t->shape(), Shape{2});
}

TEST(Npy, RefusesMalformedFiles) {
  const std::string header = "{'descr': '<i4', 'fortran_order': False, 'shape': (2,), }";
  const std::string good = NpyFile(header, std::string(8, '\0'));
  ASSERT_THAT(ParseNpy(good), IsOk());
  EXPECT_THAT(ParseNpy("PK\x03\x04 not npy"), StatusIs(kInvalid, HasSubstr("not a .npy file")));
  EXPECT_THAT(ParseNpy(good.substr(0, 40)), StatusIs(kInvalid, HasSubstr("truncated .npy header")));
  EXPECT_THAT(ParseNpy(good.substr(0, 9)), StatusIs(kInvalid, HasSubstr("truncated")));
  EXPECT_THAT(ParseNpy(good.substr(0, good.size() - 1)),
              StatusIs(kInvalid, HasSubstr("data is 7 bytes but shape [2] of '<i4' needs 8")));
  EXPECT_THAT(ParseNpy(good + "x"), StatusIs(kInvalid, HasSubstr("trailing")));
  std::string v9 = good;
  v9[6] = 9;
  EXPECT_THAT(ParseNpy(v9), StatusIs(kInvalid, HasSubstr("version 9.0")));
}

absl::StatusOr<Tensor> ParseNpyWithHeader(absl::string_view header) {
  return ParseNpy(NpyFile(header, ""));
}

TEST(Npy, RefusesUnsupportedDtypes) {
  const auto& with = ParseNpyWithHeader;
  EXPECT_THAT(with("{'descr': '|O', 'fortran_order': False, 'shape': (0,), }"),
              StatusIs(kInvalid, HasSubstr("object arrays")));
  EXPECT_THAT(with("{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (0,), }"),
              StatusIs(kInvalid, HasSubstr("structured")));
  EXPECT_THAT(with("{'descr': '|V8', 'fortran_order': False, 'shape': (0,), }"),
              StatusIs(kInvalid, HasSubstr("void")));
  EXPECT_THAT(with("{'descr': '<M8[ns]', 'fortran_order': False, 'shape': (0,), }"),
              StatusIs(kInvalid, HasSubstr("datetime")));
  EXPECT_THAT(with("{'descr': '<f16', 'fortran_order': False, 'shape': (0,), }"),
              StatusIs(kInvalid, HasSubstr("unsupported .npy dtype '<f16'")));
}

TEST(Npy, RefusesMalformedHeaders) {
  const auto& with = ParseNpyWithHeader;
  EXPECT_THAT(with("{'descr': '<f4', 'fortran_order': False}"),
              StatusIs(kInvalid, HasSubstr("missing key")));
  EXPECT_THAT(with("{'descr': '<f4', 'fortran_order': False, 'shape': (-1,), }"),
              StatusIs(kInvalid, HasSubstr("expected a dimension")));
  EXPECT_THAT(with("{'descr': '<f4', 'fortran_order': 0, 'shape': (1,), }"),
              StatusIs(kInvalid, HasSubstr("True or False")));
  EXPECT_THAT(with("{'descr': '<f4', 'fortran_order': False, 'shape': (1,), 'x': 1}"),
              StatusIs(kInvalid, HasSubstr("unexpected or repeated key 'x'")));
  EXPECT_THAT(with("{'descr': '<f4', 'fortran_order': False, 'shape': (4611686018427387904, 4), }"),
              StatusIs(kInvalid, HasSubstr("too large")));
}

TEST(Npy, RefusesBfloat16AndMalformedTensors) {
  const Tensor b = Tensor::FromValues<uint16_t>(DataType::kBfloat16, {1}, std::vector<uint16_t>{1});
  EXPECT_THAT(SerializeNpy(b.view()), StatusIs(kInvalid, HasSubstr("bfloat16")));
  const Tensor two = MakeTensor<float>({2}, {1, 2});
  core::TensorView bad = two.view();
  bad.shape = {3};
  EXPECT_THAT(SerializeNpy(bad), StatusIs(kInvalid, HasSubstr("needs")));
}

// ---- JSON ----

TEST(Json, EveryDtypeRoundTripsBitExactly) {
  tensorcompute::testing::Rng rng(3);
  for (DataType dtype : core::kAllDataTypes) {
    for (int64_t rank = 0; rank <= 5; ++rank) {
      const Tensor t = tensorcompute::testing::RandomTensor(
          dtype, tensorcompute::testing::RandomShape(rank, rng, 4, 0.1), rng);
      const std::string json = SerializeJson(t.view());
      EXPECT_EQ(json.find('\n'), std::string::npos);
      const absl::StatusOr<Tensor> back = ParseJson(json);
      ASSERT_THAT(back, IsOk()) << json;
      EXPECT_TRUE(core::IdenticalTensors(CanonicalNaNs(*back).view(), CanonicalNaNs(t).view()))
          << json;
    }
  }
}

TEST(Json, WritesShortFloatsAndSpecialValues) {
  const float f[] = {0.1f, -0.0f, NAN, INFINITY, -INFINITY, 1e20f, 16777216.0f};
  EXPECT_EQ(SerializeJson(Tensor::FromValues<float>(DataType::kFloat32, {7}, f).view()),
            "{\"dtype\": \"float32\", \"shape\": [7], \"values\": "
            "[0.1, -0.0, \"nan\", \"inf\", \"-inf\", 1e+20, 16777216]}");
  const uint16_t h[] = {FloatToHalf(0.1f), FloatToHalf(65504), FloatToHalf(-1.0f / 3)};
  EXPECT_EQ(SerializeJson(Tensor::FromValues<uint16_t>(DataType::kFloat16, {3}, h).view()),
            "{\"dtype\": \"float16\", \"shape\": [3], \"values\": [0.1, 65504, -0.3333]}");
  const uint16_t b[] = {FloatToBFloat16(0.1f), FloatToBFloat16(3e38f)};
  EXPECT_EQ(SerializeJson(Tensor::FromValues<uint16_t>(DataType::kBfloat16, {1, 2}, b).view()),
            "{\"dtype\": \"bfloat16\", \"shape\": [1, 2], \"values\": [0.1, 3e+38]}");
  EXPECT_EQ(SerializeJson(MakeTensor<std::complex<double>>({}, {{0.1, -2}}).view()),
            "{\"dtype\": \"complex128\", \"shape\": [], \"values\": [[0.1, -2]]}");
}

TEST(Json, ParsesNestedListsAndInfersTheShape) {
  absl::StatusOr<Tensor> t = ParseJson(R"({"dtype": "int16", "values": [[1, 2, 3], [4, 5, 6]]})");
  ASSERT_THAT(t, IsOk());
  EXPECT_TRUE(
      core::IdenticalTensors(t->view(), MakeTensor<int16_t>({2, 3}, {1, 2, 3, 4, 5, 6}).view()));
  absl::StatusOr<Tensor> z = ParseJson(R"({"dtype": "float32", "values": [[[[[]]], [[[]]]]]})");
  ASSERT_THAT(z, IsOk());
  EXPECT_EQ(z->shape(), (Shape{1, 2, 1, 1, 0}));
  absl::StatusOr<Tensor> s = ParseJson(R"({"dtype": "bool", "values": true})");
  ASSERT_THAT(s, IsOk());
  EXPECT_EQ(s->shape(), Shape{});
  EXPECT_EQ(s->bytes()[0], 1);
}

TEST(Json, FlatValuesTakeTheGivenShape) {
  absl::StatusOr<Tensor> t =
      ParseJson(R"({"dtype": "uint8", "shape": [2, 1, 1, 2, 1], "values": [1, 0, true, 2]})");
  EXPECT_THAT(t, StatusIs(kInvalid, HasSubstr("values[2]: expected an integer for uint8")));
  t = ParseJson(R"({"dtype": "uint8", "shape": [2, 1, 1, 2, 1], "values": [1, 0, 3, 2]})");
  ASSERT_THAT(t, IsOk());
  EXPECT_EQ(t->shape(), (Shape{2, 1, 1, 2, 1}));
  EXPECT_THAT(
      ParseJson(R"({"dtype": "int8", "shape": [3], "values": [1, 2]})"),
      StatusIs(kInvalid, HasSubstr("values has shape [2] (2 elements) but \"shape\" is [3]")));
  EXPECT_THAT(ParseJson(R"({"dtype": "int8", "shape": [4], "values": [[1, 2], [3, 4]]})"),
              StatusIs(kInvalid, HasSubstr("values has shape [2,2]")));
  EXPECT_THAT(ParseJson(R"({"dtype": "int8", "shape": [2, 0], "values": []})"), IsOk());
  EXPECT_THAT(ParseJson(R"({"dtype": "int8", "shape": [], "values": 5})"), IsOk());
}

TEST(Json, RefusesRaggedLists) {
  EXPECT_THAT(
      ParseJson(R"({"dtype": "int32", "values": [[1, 2], [3]]})"),
      StatusIs(kInvalid, HasSubstr("values[1]: ragged nested lists: expected a list of 2")));
  EXPECT_THAT(ParseJson(R"({"dtype": "int32", "values": [[1, 2], 3]})"),
              StatusIs(kInvalid, HasSubstr("values[1]: ragged")));
  EXPECT_THAT(ParseJson(R"({"dtype": "int32", "values": [1, [2]]})"),
              StatusIs(kInvalid, HasSubstr("values[1]: ragged nested lists: expected a value")));
  EXPECT_THAT(ParseJson(R"({"dtype": "int32", "values": [[], [1]]})"),
              StatusIs(kInvalid, HasSubstr("values[1]: ragged")));
}

TEST(Json, RefusesIntegersThatDoNotFit) {
  EXPECT_THAT(ParseJson(R"({"dtype": "uint8", "values": [1, 2, 3, 300]})"),
              StatusIs(kInvalid, HasSubstr("values[3]: 300 does not fit uint8")));
  EXPECT_THAT(ParseJson(R"({"dtype": "uint32", "values": [[1], [-1]]})"),
              StatusIs(kInvalid, HasSubstr("values[1][0]: -1 does not fit uint32")));
  EXPECT_THAT(ParseJson(R"({"dtype": "int64", "values": 9223372036854775808})"),
              StatusIs(kInvalid, HasSubstr("does not fit int64")));
  EXPECT_THAT(ParseJson(R"({"dtype": "uint64", "values": 18446744073709551616})"),
              StatusIs(kInvalid, HasSubstr("does not fit uint64")));
  EXPECT_THAT(ParseJson(R"({"dtype": "int16", "values": [2.5]})"),
              StatusIs(kInvalid, HasSubstr("values[0]: 2.5 is not an integer")));
  EXPECT_THAT(ParseJson(R"({"dtype": "int8", "values": "nan"})"),
              StatusIs(kInvalid, HasSubstr("expected an integer for int8")));
}

TEST(Json, AcceptsIntegersAtTheLimits) {
  absl::StatusOr<Tensor> edges = ParseJson(
      R"({"dtype": "int64", "values": [-9223372036854775808, 9223372036854775807, 1e18, -0.0]})");
  ASSERT_THAT(edges, IsOk());
  EXPECT_EQ(edges->values<int64_t>(),
            (std::vector<int64_t>{INT64_MIN, INT64_MAX, 1000000000000000000, 0}));
  absl::StatusOr<Tensor> u = ParseJson(R"({"dtype": "uint64", "values": [18446744073709551615]})");
  ASSERT_THAT(u, IsOk());
  EXPECT_EQ(u->values<uint64_t>()[0], UINT64_MAX);
}

TEST(Json, ReadsFloatsRoundedToNearestEven) {
  absl::StatusOr<Tensor> h = ParseJson(
      R"({"dtype": "float16", "values": [0.1, 65520, -1e10, "-inf", "NaN", 5.96e-8, 1e-9]})");
  ASSERT_THAT(h, IsOk());
  const absl::Span<const uint16_t> v = h->values<uint16_t>();
  EXPECT_EQ(v[0], 0x2E66);
  EXPECT_EQ(v[1], 0x7C00);  // the tie between 65504 and 65536 goes to even: inf
  EXPECT_EQ(v[2], 0xFC00);
  EXPECT_EQ(v[3], 0xFC00);
  EXPECT_TRUE(IsHalfNaN(v[4]));
  EXPECT_EQ(v[5], 0x0001);
  EXPECT_EQ(v[6], 0x0000);
  absl::StatusOr<Tensor> f = ParseJson(R"({"dtype": "float32", "values": [1e39, -1e-50, 0.1]})");
  ASSERT_THAT(f, IsOk());
  EXPECT_EQ(f->values<float>()[0], INFINITY);
  EXPECT_EQ(Bits(f->values<float>()[1]), 0x80000000u);
  EXPECT_EQ(f->values<float>()[2], 0.1f);
  EXPECT_THAT(ParseJson(R"({"dtype": "float64", "values": [null]})"),
              StatusIs(kInvalid, HasSubstr("values[0]: expected a number, \"nan\"")));
  EXPECT_THAT(ParseJson(R"({"dtype": "bool", "values": [2]})"),
              StatusIs(kInvalid, HasSubstr("expected true, false, 0 or 1")));
}

TEST(Json, ComplexValuesArePairs) {
  absl::StatusOr<Tensor> c =
      ParseJson(R"({"dtype": "complex64", "values": [[[1, 2], [3, "-inf"]]]})");
  ASSERT_THAT(c, IsOk());
  EXPECT_EQ(c->shape(), (Shape{1, 2}));
  EXPECT_EQ(c->values<std::complex<float>>()[1], std::complex<float>(3, -INFINITY));
  EXPECT_THAT(ParseJson(R"({"dtype": "complex128", "values": [[1, 2, 3]]})"),
              StatusIs(kInvalid, HasSubstr("values[0]: expected [real, imag]")));
  EXPECT_THAT(ParseJson(R"({"dtype": "complex128", "values": [1, 2]})"), IsOk());  // a scalar
}

TEST(Json, StringsAreUtf8OrBase64) {
  const Tensor t =
      MakeStrings({3}, {"h\xC3\xA9 \"q\"\n", std::string("\xFF\x00\x01", 3), std::string("\0", 1)});
  const std::string json = SerializeJson(t.view());
  EXPECT_THAT(json, HasSubstr(R"(["hé \"q\"\n", {"base64": "/wAB"}, "\u0000"])"));
  absl::StatusOr<Tensor> back = ParseJson(json);
  ASSERT_THAT(back, IsOk());
  EXPECT_EQ(back->strings(), t.strings());
  EXPECT_THAT(ParseJson(R"({"dtype": "string", "values": [{"base64": "!!"}]})"),
              StatusIs(kInvalid, HasSubstr("values[0]: invalid base64")));
  EXPECT_THAT(ParseJson(R"({"dtype": "string", "values": [1]})"),
              StatusIs(kInvalid, HasSubstr("expected a string or {\"base64\"")));
}

TEST(Json, RefusesMalformedDocuments) {
  EXPECT_THAT(ParseJson("{\"dtype\": "), StatusIs(kInvalid, HasSubstr("invalid JSON")));
  EXPECT_THAT(ParseJson("[1, 2]"), StatusIs(kInvalid, HasSubstr("expected a JSON object")));
  EXPECT_THAT(ParseJson(R"({"dtype": "float32", "values": [], "shap": [0]})"),
              StatusIs(kInvalid, HasSubstr("unexpected key \"shap\"")));
  EXPECT_THAT(ParseJson(R"({"dtype": "float", "values": []})"),
              StatusIs(kInvalid, HasSubstr("unknown dtype \"float\"; expected one of bool")));
  EXPECT_THAT(ParseJson(R"({"values": []})"), StatusIs(kInvalid, HasSubstr("\"dtype\"")));
  EXPECT_THAT(ParseJson(R"({"dtype": "int8"})"), StatusIs(kInvalid, HasSubstr("\"values\"")));
}

TEST(Json, RefusesBadShapesAndDeepNesting) {
  EXPECT_THAT(ParseJson(R"({"dtype": "int8", "shape": [2, -1], "values": []})"),
              StatusIs(kInvalid, HasSubstr("shape[1]: expected an int >= 0")));
  EXPECT_THAT(ParseJson(R"({"dtype": "int8", "shape": [4294967296, 4294967296], "values": []})"),
              StatusIs(kInvalid, HasSubstr("too large")));
  EXPECT_THAT(ParseJson(absl::StrCat(R"({"dtype": "int8", "values": )", std::string(100, '['),
                                     std::string(100, ']'), "}")),
              StatusIs(kInvalid, HasSubstr("nested deeper than")));
}

// ---- files ----

class TensorIoFile : public ::testing::Test {
 protected:
  std::string Path(absl::string_view name) {
    return absl::StrCat(::testing::TempDir(), "tensor_io_test_", getpid(), "_", name);
  }
};

TEST(TensorIoFormat, FollowsTheExtension) {
  EXPECT_EQ(*FormatFromPath("a/b.npy"), TensorFormat::kNpy);
  EXPECT_EQ(*FormatFromPath("B.NPY"), TensorFormat::kNpy);
  EXPECT_EQ(*FormatFromPath("x.Json"), TensorFormat::kJson);
  EXPECT_THAT(FormatFromPath("x.npz"), StatusIs(kInvalid, HasSubstr(".npy or .json")));
  EXPECT_THAT(FormatFromPath("json"), StatusIs(kInvalid));
}

TEST_F(TensorIoFile, WritesAndReadsBothFormats) {
  const Tensor t = MakeTensor<int32_t>({2, 2}, {1, -2, 3, 4});
  for (absl::string_view name : {"t.npy", "t.json"}) {
    const std::string path = Path(name);
    ASSERT_THAT(WriteTensorFile(t.view(), path), IsOk());
    absl::StatusOr<Tensor> back = ReadTensorFile(path);
    ASSERT_THAT(back, IsOk());
    EXPECT_TRUE(core::IdenticalTensors(back->view(), t.view()));
    std::remove(path.c_str());
  }
}

TEST_F(TensorIoFile, MissingFilesAreNotFound) {
  const std::string missing = Path("missing.npy");
  EXPECT_THAT(
      ReadTensorFile(missing),
      StatusIs(absl::StatusCode::kNotFound, HasSubstr(missing + ": No such file or directory")));
  EXPECT_THAT(WriteTensorFile(MakeTensor<float>({1}, {1}).view(), Path("no/such/dir/t.json")),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("no/such/dir/t.json")));
}

TEST_F(TensorIoFile, ReadingADirectoryIsInternal) {
  const std::string dir = Path("dir.json");
  ASSERT_EQ(mkdir(dir.c_str(), 0700), 0);
  EXPECT_THAT(ReadTensorFile(dir), StatusIs(absl::StatusCode::kInternal, HasSubstr("directory")));
  rmdir(dir.c_str());
}

TEST_F(TensorIoFile, UnreadableFileIsPermissionDenied) {
  if (geteuid() == 0) GTEST_SKIP() << "running as root, which may read any file";
  const std::string path = Path("secret.json");
  ASSERT_THAT(WriteTensorFile(MakeTensor<float>({1}, {1}).view(), path), IsOk());
  chmod(path.c_str(), 0);
  EXPECT_THAT(ReadTensorFile(path),
              StatusIs(absl::StatusCode::kPermissionDenied, HasSubstr("Permission denied")));
  std::remove(path.c_str());
}

TEST_F(TensorIoFile, ParseErrorsNameThePath) {
  const std::string path = Path("bad.json");
  std::FILE* f = std::fopen(path.c_str(), "w");
  ASSERT_NE(f, nullptr);
  std::fputs("{\"dtype\": \"uint8\", \"values\": [256]}", f);
  std::fclose(f);
  EXPECT_THAT(ReadTensorFile(path),
              StatusIs(kInvalid, HasSubstr(path + ": values[0]: 256 does not fit uint8")));
  std::remove(path.c_str());
  const Tensor b = Tensor::FromValues<uint16_t>(DataType::kBfloat16, {1}, std::vector<uint16_t>{1});
  EXPECT_THAT(WriteTensorFile(b.view(), Path("b.npy")), StatusIs(kInvalid, HasSubstr("bfloat16")));
  EXPECT_THAT(WriteTensorFile(b.view(), Path("b.txt")),
              StatusIs(kInvalid, HasSubstr(".npy or .json")));
}

}  // namespace
}  // namespace tensorcompute::client
