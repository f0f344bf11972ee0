// Tests for proto/kserve_wire.h: the KServe v2 datatype table, the BYTES framing and the
// status code <-> HTTP status maps.

#include "proto/kserve_wire.h"

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "gtest/gtest.h"

#include "core/dtype.h"

namespace tensorcompute::proto {
namespace {

using core::DataType;

TEST(KserveDatatype, EveryNamedTypeRoundTrips) {
  const std::pair<DataType, absl::string_view> kTable[] = {
      {DataType::kBool, "BOOL"},     {DataType::kUint8, "UINT8"},   {DataType::kUint16, "UINT16"},
      {DataType::kUint32, "UINT32"}, {DataType::kUint64, "UINT64"}, {DataType::kInt8, "INT8"},
      {DataType::kInt16, "INT16"},   {DataType::kInt32, "INT32"},   {DataType::kInt64, "INT64"},
      {DataType::kFloat16, "FP16"},  {DataType::kBfloat16, "BF16"}, {DataType::kFloat32, "FP32"},
      {DataType::kFloat64, "FP64"},  {DataType::kString, "BYTES"},
  };
  for (const auto& [dtype, name] : kTable) {
    EXPECT_EQ(KserveDatatypeName(dtype), std::optional<absl::string_view>(name)) << name;
    EXPECT_EQ(KserveDatatypeOf(name), std::optional<DataType>(dtype)) << name;
  }
}

TEST(KserveDatatype, EveryCoreTypeButComplexHasAName) {
  for (DataType dtype : core::kAllDataTypes) {
    const std::optional<absl::string_view> name = KserveDatatypeName(dtype);
    if (dtype == DataType::kComplex64 || dtype == DataType::kComplex128) {
      EXPECT_EQ(name, std::nullopt) << core::DataTypeName(dtype);
      continue;
    }
    ASSERT_TRUE(name.has_value()) << core::DataTypeName(dtype);
    EXPECT_EQ(KserveDatatypeOf(*name), dtype);
  }
}

TEST(KserveDatatype, UnnamedTypesHaveNoName) {
  EXPECT_EQ(KserveDatatypeName(DataType::kComplex64), std::nullopt);
  EXPECT_EQ(KserveDatatypeName(DataType::kComplex128), std::nullopt);
  EXPECT_EQ(KserveDatatypeName(DataType::kUnspecified), std::nullopt);
  EXPECT_EQ(KserveDatatypeName(static_cast<DataType>(99)), std::nullopt);
}

TEST(KserveDatatype, UnknownNamesAreNullopt) {
  for (absl::string_view name : {"", "fp32", "Fp32", "FLOAT32", "STRING", "COMPLEX64", "BYTES ",
                                 " INT8", "INT128", "bool"}) {
    EXPECT_EQ(KserveDatatypeOf(name), std::nullopt) << "'" << name << "'";
  }
}

TEST(KserveDatatype, NamesListIsTheTableInOrder) {
  EXPECT_EQ(KserveDatatypeNames(),
            "BOOL, UINT8, UINT16, UINT32, UINT64, INT8, INT16, INT32, INT64, FP16, BF16, FP32, "
            "FP64, BYTES");
}

// Reads back every element AppendKserveBytesElement wrote into `raw`.
std::vector<std::string> Unframe(absl::string_view raw) {
  std::vector<std::string> elements;
  size_t at = 0;
  while (at < raw.size()) {
    EXPECT_GE(raw.size() - at, kKserveBytesLengthSize);
    if (raw.size() - at < kKserveBytesLengthSize) break;
    const uint32_t n = ReadKserveBytesLength(reinterpret_cast<const uint8_t*>(raw.data() + at));
    at += kKserveBytesLengthSize;
    EXPECT_LE(n, raw.size() - at);
    if (n > raw.size() - at) break;
    elements.emplace_back(raw.substr(at, n));
    at += n;
  }
  return elements;
}

TEST(KserveBytes, PrefixIsFourBytesLittleEndian) {
  std::string out = "x";  // appends, keeping what is there
  AppendKserveBytesElement("abc", &out);
  EXPECT_EQ(out, std::string("x\x03\x00\x00\x00"
                             "abc",
                             8));
  out.clear();
  AppendKserveBytesElement("", &out);
  EXPECT_EQ(out, std::string(4, '\0'));
}

TEST(KserveBytes, ReadsEveryByteOfThePrefix) {
  const uint8_t p[] = {0x04, 0x03, 0x02, 0x01};
  EXPECT_EQ(ReadKserveBytesLength(p), 0x01020304u);
  const uint8_t max[] = {0xff, 0xff, 0xff, 0xff};
  EXPECT_EQ(ReadKserveBytesLength(max), 0xffffffffu);
}

TEST(KserveBytes, FramingRoundTrips) {
  const std::vector<std::string> elements = {
      "", "a", std::string("\0\xff\x80", 3), std::string(300, 'q'), std::string(70000, 'z'), ""};
  std::string raw;
  for (const std::string& e : elements) AppendKserveBytesElement(e, &raw);
  EXPECT_EQ(raw.size(), 6 * kKserveBytesLengthSize + 0 + 1 + 3 + 300 + 70000 + 0);
  // 300 = 0x12c and 70000 = 0x11170: the second and third bytes of the prefix matter.
  const size_t at_300 = 3 * kKserveBytesLengthSize + 0 + 1 + 3;
  EXPECT_EQ(raw.substr(at_300, 4), std::string("\x2c\x01\x00\x00", 4));
  EXPECT_EQ(raw.substr(at_300 + 4 + 300, 4), std::string("\x70\x11\x01\x00", 4));
  EXPECT_EQ(Unframe(raw), elements);
}

TEST(HttpStatusOf, EveryMappedCode) {
  EXPECT_EQ(HttpStatusOf(absl::StatusCode::kOk), 200);
  EXPECT_EQ(HttpStatusOf(absl::StatusCode::kInvalidArgument), 400);
  EXPECT_EQ(HttpStatusOf(absl::StatusCode::kOutOfRange), 400);
  EXPECT_EQ(HttpStatusOf(absl::StatusCode::kFailedPrecondition), 400);
  EXPECT_EQ(HttpStatusOf(absl::StatusCode::kUnauthenticated), 401);
  EXPECT_EQ(HttpStatusOf(absl::StatusCode::kPermissionDenied), 403);
  EXPECT_EQ(HttpStatusOf(absl::StatusCode::kNotFound), 404);
  EXPECT_EQ(HttpStatusOf(absl::StatusCode::kResourceExhausted), 429);
  EXPECT_EQ(HttpStatusOf(absl::StatusCode::kUnimplemented), 501);
  EXPECT_EQ(HttpStatusOf(absl::StatusCode::kUnavailable), 503);
  EXPECT_EQ(HttpStatusOf(absl::StatusCode::kDeadlineExceeded), 504);
}

TEST(HttpStatusOf, AnyOtherCodeIs500) {
  for (absl::StatusCode code :
       {absl::StatusCode::kCancelled, absl::StatusCode::kUnknown, absl::StatusCode::kAlreadyExists,
        absl::StatusCode::kAborted, absl::StatusCode::kInternal, absl::StatusCode::kDataLoss}) {
    EXPECT_EQ(HttpStatusOf(code), 500) << absl::StatusCodeToString(code);
  }
}

TEST(StatusCodeOfHttp, EveryMappedStatus) {
  EXPECT_EQ(StatusCodeOfHttp(200), absl::StatusCode::kOk);
  EXPECT_EQ(StatusCodeOfHttp(400), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(StatusCodeOfHttp(401), absl::StatusCode::kUnauthenticated);
  EXPECT_EQ(StatusCodeOfHttp(403), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(StatusCodeOfHttp(404), absl::StatusCode::kNotFound);
  EXPECT_EQ(StatusCodeOfHttp(413), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(StatusCodeOfHttp(429), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(StatusCodeOfHttp(501), absl::StatusCode::kUnimplemented);
  EXPECT_EQ(StatusCodeOfHttp(503), absl::StatusCode::kUnavailable);
  EXPECT_EQ(StatusCodeOfHttp(504), absl::StatusCode::kDeadlineExceeded);
}

TEST(StatusCodeOfHttp, AnyOtherStatusIsInternal) {
  for (int status : {0, 201, 302, 405, 500, 502, 599}) {
    EXPECT_EQ(StatusCodeOfHttp(status), absl::StatusCode::kInternal) << status;
  }
}

TEST(StatusCodeOfHttp, InvertsHttpStatusOfOnEveryOneToOneCode) {
  for (absl::StatusCode code :
       {absl::StatusCode::kOk, absl::StatusCode::kInvalidArgument,
        absl::StatusCode::kUnauthenticated, absl::StatusCode::kPermissionDenied,
        absl::StatusCode::kNotFound, absl::StatusCode::kResourceExhausted,
        absl::StatusCode::kUnimplemented, absl::StatusCode::kUnavailable,
        absl::StatusCode::kDeadlineExceeded, absl::StatusCode::kInternal}) {
    EXPECT_EQ(StatusCodeOfHttp(HttpStatusOf(code)), code) << absl::StatusCodeToString(code);
  }
}

}  // namespace
}  // namespace tensorcompute::proto
