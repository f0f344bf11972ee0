// Tests for proto/tensor_codec.h and the wire contract of tensorcompute.proto.

#include "proto/tensor_codec.h"

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tensorcompute/v1/tensorcompute.pb.h"

#include "core/dtype.h"
#include "core/shape.h"
#include "core/tensor.h"

namespace tensorcompute::proto {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

// A well-formed tensor of `dtype` and `shape` with distinct, deterministic contents
// (bools are 0/1; strings vary in length and include NUL and non-UTF-8 bytes).
core::Tensor MakeTensor(core::DataType dtype, core::Shape shape) {
  absl::StatusOr<core::Tensor> t = core::Tensor::Allocate(dtype, std::move(shape));
  EXPECT_TRUE(t.ok()) << t.status();
  core::MutableTensorView v = t->mutable_view();
  if (dtype == core::DataType::kString) {
    for (size_t i = 0; i < v.strings.size(); ++i) {
      *v.strings[i] = std::string(i % 4, 'a' + static_cast<char>(i % 26));
      if (i % 3 == 1) v.strings[i]->append(std::string("\0\xff", 2));
    }
  } else {
    for (size_t i = 0; i < v.data.size(); ++i) {
      v.data[i] = dtype == core::DataType::kBool ? i % 2 : static_cast<uint8_t>(i * 7 + 3);
    }
  }
  return *std::move(t);
}

// absl::string_view is not std::string_view here, so gmock's string matchers need a copy.
std::string Message(const absl::Status& status) { return std::string(status.message()); }

// Every dtype x {matrix, scalar, zero-size} survives ToProto -> bytes -> FromProto.
TEST(TensorCodec, RoundTripsEveryDtypeThroughWireBytes) {
  const std::vector<core::Shape> shapes = {{2, 3}, {}, {0}, {3, 0, 2}, {1, 1, 1, 5}};
  for (core::DataType dtype : core::kAllDataTypes) {
    for (const core::Shape& shape : shapes) {
      SCOPED_TRACE(core::DataTypeName(dtype) + " " + core::ShapeToString(shape));
      const core::Tensor original = MakeTensor(dtype, shape);
      v1::Tensor wire;
      ToProto(original.view(), &wire);
      EXPECT_EQ(wire.dtype(), ToProtoDataType(dtype));
      EXPECT_THAT(wire.shape(), ::testing::ElementsAreArray(shape));

      v1::Tensor parsed;
      ASSERT_TRUE(parsed.ParseFromString(wire.SerializeAsString()));
      absl::StatusOr<core::Tensor> back = FromProto(parsed, "params");
      ASSERT_TRUE(back.ok()) << back.status();
      EXPECT_TRUE(core::IdenticalTensors(back->view(), original.view()));
    }
  }
}

TEST(TensorCodec, ToProtoReplacesPreviousContents) {
  v1::Tensor wire;
  ToProto(MakeTensor(core::DataType::kString, {4}).view(), &wire);
  ToProto(MakeTensor(core::DataType::kInt16, {2}).view(), &wire);
  EXPECT_EQ(wire.dtype(), v1::DT_INT16);
  EXPECT_THAT(wire.shape(), ::testing::ElementsAre(2));
  EXPECT_EQ(wire.data().size(), 4u);
  EXPECT_EQ(wire.strings_size(), 0);
}

TEST(TensorCodec, ViewTensorPointsIntoTheMessageBytes) {
  v1::Tensor wire;
  ToProto(MakeTensor(core::DataType::kFloat32, {4, 5}).view(), &wire);
  absl::StatusOr<core::TensorView> view = ViewTensor(wire, "params");
  ASSERT_TRUE(view.ok()) << view.status();
  EXPECT_EQ(view->dtype, core::DataType::kFloat32);
  EXPECT_EQ(view->shape, (core::Shape{4, 5}));
  EXPECT_EQ(static_cast<const void*>(view->data.data()),
            static_cast<const void*>(wire.data().data()));
  EXPECT_EQ(view->data.size(), wire.data().size());
  EXPECT_TRUE(view->strings.empty());
}

TEST(TensorCodec, ViewTensorPointsAtTheMessageStrings) {
  v1::Tensor wire;
  ToProto(MakeTensor(core::DataType::kString, {2, 3}).view(), &wire);
  absl::StatusOr<core::TensorView> view = ViewTensor(wire, "params");
  ASSERT_TRUE(view.ok()) << view.status();
  ASSERT_EQ(view->strings.size(), 6u);
  EXPECT_EQ(view->strings.data(), wire.strings().data());  // the message's pointer array
  for (int i = 0; i < wire.strings_size(); ++i) {
    EXPECT_EQ(view->strings[i], &wire.strings(i));  // the message's string objects
  }
  EXPECT_TRUE(view->data.empty());
}

TEST(TensorCodec, ViewTensorLeavesShapeChecksToValidateTensor) {
  v1::Tensor wire;
  wire.set_dtype(v1::DT_INT32);
  wire.add_shape(3);
  wire.set_data(std::string(5, '\0'));  // 3 x int32 needs 12 bytes
  absl::StatusOr<core::TensorView> view = ViewTensor(wire, "indices");
  ASSERT_TRUE(view.ok()) << view.status();
  EXPECT_EQ(view->data.size(), 5u);

  absl::StatusOr<core::Tensor> owned = FromProto(wire, "indices");
  EXPECT_EQ(owned.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(Message(owned.status()), StartsWith("indices: data has 5 bytes"));
}

TEST(TensorCodec, FromProtoRejectsMalformedTensors) {
  v1::Tensor strings_with_data;
  strings_with_data.set_dtype(v1::DT_STRING);
  strings_with_data.set_data("x");
  EXPECT_EQ(FromProto(strings_with_data, "params").status().code(),
            absl::StatusCode::kInvalidArgument);

  v1::Tensor negative_dim;
  negative_dim.set_dtype(v1::DT_INT8);
  negative_dim.add_shape(-1);
  EXPECT_EQ(FromProto(negative_dim, "params").status().code(), absl::StatusCode::kInvalidArgument);

  v1::Tensor too_deep;
  too_deep.set_dtype(v1::DT_INT8);
  for (int i = 0; i < 4; ++i) too_deep.add_shape(1);
  too_deep.set_data(std::string(1, '\0'));
  EXPECT_TRUE(FromProto(too_deep, "params", /*max_rank=*/4).ok());
  EXPECT_THAT(Message(FromProto(too_deep, "params", /*max_rank=*/3).status()),
              HasSubstr("rank 4 exceeds the maximum rank 3"));
}

TEST(TensorCodec, RejectsUnknownDtypeNumbers) {
  struct Case {
    int number;
    std::string message_prefix;
  };
  const Case cases[] = {{99, "params: unknown dtype 99"},
                        {-1, "params: unknown dtype -1"},
                        {17, "params: unknown dtype 17"},
                        {0, "params: dtype is unspecified"}};
  for (const Case& c : cases) {
    SCOPED_TRACE(c.number);
    v1::Tensor wire;
    wire.set_dtype(static_cast<v1::DataType>(c.number));  // proto3 enums are open
    wire.add_shape(0);
    // The unknown number survives the wire, so the check must be ours.
    v1::Tensor parsed;
    ASSERT_TRUE(parsed.ParseFromString(wire.SerializeAsString()));
    ASSERT_EQ(static_cast<int>(parsed.dtype()), c.number);

    absl::StatusOr<core::TensorView> view = ViewTensor(parsed, "params");
    EXPECT_EQ(view.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(Message(view.status()), StartsWith(c.message_prefix));
    absl::StatusOr<core::Tensor> owned = FromProto(parsed, "params");
    EXPECT_EQ(owned.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(Message(owned.status()), StartsWith(c.message_prefix));
  }
}

TEST(PrepareOutput, BytesAreWrittenStraightIntoTheMessage) {
  v1::Tensor out;
  out.add_strings("stale");  // a reused message: earlier contents must go
  core::MutableTensorView view =
      PrepareOutput(core::DataType::kInt16, {2, 3}, /*num_elements=*/6, /*num_bytes=*/12, &out);
  EXPECT_EQ(out.dtype(), v1::DT_INT16);
  EXPECT_THAT(out.shape(), ::testing::ElementsAre(2, 3));
  EXPECT_EQ(out.strings_size(), 0);
  EXPECT_EQ(view.dtype, core::DataType::kInt16);
  EXPECT_EQ(view.shape, (core::Shape{2, 3}));
  ASSERT_EQ(view.data.size(), 12u);
  EXPECT_EQ(static_cast<void*>(view.data.data()), static_cast<const void*>(out.data().data()));
  EXPECT_EQ(out.data(), std::string(12, '\0'));  // resize zero-fills

  for (size_t i = 0; i < view.data.size(); ++i) view.data[i] = static_cast<uint8_t>(i + 1);
  EXPECT_EQ(out.data(), std::string("\1\2\3\4\5\6\7\10\11\12\13\14"));
  absl::StatusOr<core::Tensor> back = FromProto(out, "output");
  EXPECT_TRUE(back.ok()) << back.status();
}

// The head the server writes an output after is exactly protobuf's serialization up to the
// data, for every fixed-size dtype, scalars, zero-free shapes, high ranks, large dimensions
// (multi-byte varints) and sizes across the 1-, 2- and 3-byte length varints.
TEST(ResponsePrefix, PlusTheDataIsProtobufsOwnSerialization) {
  struct Case {
    core::DataType dtype;
    core::Shape shape;
  };
  const std::vector<Case> cases = {
      {core::DataType::kInt8, {}},          {core::DataType::kBool, {3}},
      {core::DataType::kFloat32, {2, 3}},   {core::DataType::kFloat16, {1, 1, 1, 1, 1, 1, 1, 70}},
      {core::DataType::kUint64, {4, 2}},    {core::DataType::kComplex128, {5}},
      {core::DataType::kInt32, {3, 10000}}, {core::DataType::kBfloat16, {129, 1}},
      {core::DataType::kFloat64, {16384}},  {core::DataType::kComplex64, {1, 300000}},
  };
  for (const Case& c : cases) {
    int64_t elements = 1;
    for (int64_t d : c.shape) elements *= d;
    const int64_t bytes = elements * static_cast<int64_t>(core::ElementSize(c.dtype));
    std::string data(static_cast<size_t>(bytes), '\0');
    for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<char>(i * 7 + 1);
    v1::GatherResponse expected;
    expected.mutable_output()->set_dtype(ToProtoDataType(c.dtype));
    expected.mutable_output()->mutable_shape()->Assign(c.shape.begin(), c.shape.end());
    expected.mutable_output()->set_data(data);
    const std::string wire = ResponsePrefix(c.dtype, c.shape, bytes) + data;
    EXPECT_EQ(wire, expected.SerializeAsString()) << c.shape.size() << " dims, " << bytes;
    v1::GatherNdResponse parsed;
    ASSERT_TRUE(parsed.ParseFromString(wire));
    EXPECT_EQ(parsed.output().data(), data);
    EXPECT_EQ(parsed.output().shape_size(), static_cast<int>(c.shape.size()));
  }
}

TEST(PrepareOutput, StringsAreWrittenStraightIntoTheMessage) {
  v1::Tensor out;
  out.set_data("stale");
  out.add_strings("stale");
  core::MutableTensorView view =
      PrepareOutput(core::DataType::kString, {3}, /*num_elements=*/3, /*num_bytes=*/0, &out);
  EXPECT_EQ(out.dtype(), v1::DT_STRING);
  EXPECT_TRUE(out.data().empty());
  ASSERT_EQ(out.strings_size(), 3);
  ASSERT_EQ(view.strings.size(), 3u);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(view.strings[i], out.mutable_strings(i));
    EXPECT_TRUE(out.strings(i).empty());
  }
  *view.strings[0] = "a";
  *view.strings[2] = std::string("c\0c", 3);
  EXPECT_EQ(out.strings(0), "a");
  EXPECT_EQ(out.strings(1), "");
  EXPECT_EQ(out.strings(2), std::string("c\0c", 3));

  v1::Tensor parsed;
  ASSERT_TRUE(parsed.ParseFromString(out.SerializeAsString()));
  absl::StatusOr<core::Tensor> back = FromProto(parsed, "output");
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_THAT(back->strings(), ::testing::ElementsAre("a", "", std::string("c\0c", 3)));
}

TEST(PrepareOutput, ZeroSizeAndScalarSlots) {
  v1::Tensor empty;
  core::MutableTensorView v = PrepareOutput(core::DataType::kFloat64, {0, 4}, 0, 0, &empty);
  EXPECT_TRUE(v.data.empty());
  EXPECT_TRUE(FromProto(empty, "output").ok());

  v1::Tensor no_strings;
  v = PrepareOutput(core::DataType::kString, {2, 0}, 0, 0, &no_strings);
  EXPECT_TRUE(v.strings.empty());
  EXPECT_TRUE(FromProto(no_strings, "output").ok());

  v1::Tensor scalar;
  v = PrepareOutput(core::DataType::kComplex128, {}, 1, 16, &scalar);
  EXPECT_EQ(v.data.size(), 16u);
  EXPECT_EQ(scalar.shape_size(), 0);
  EXPECT_TRUE(FromProto(scalar, "output").ok());
}

// The server may allocate responses on an arena (cc_enable_arenas); views work the same.
TEST(PrepareOutput, WorksOnArenaMessages) {
  google::protobuf::Arena arena;
  auto* bytes_out = google::protobuf::Arena::CreateMessage<v1::Tensor>(&arena);
  core::MutableTensorView v = PrepareOutput(core::DataType::kUint32, {2}, 2, 8, bytes_out);
  v.data[7] = 0x42;
  EXPECT_EQ(bytes_out->data()[7], '\x42');

  auto* strings_out = google::protobuf::Arena::CreateMessage<v1::Tensor>(&arena);
  v = PrepareOutput(core::DataType::kString, {2}, 2, 0, strings_out);
  *v.strings[1] = "arena";
  EXPECT_EQ(strings_out->strings(1), "arena");
  absl::StatusOr<core::TensorView> view = ViewTensor(*strings_out, "output");
  ASSERT_TRUE(view.ok()) << view.status();
  EXPECT_EQ(view->strings[1], &strings_out->strings(1));
}

// The enum numbers are part of the wire contract: they must never change.
TEST(WireContract, DataTypeNumbersAreExactlyAsSpecified) {
  const std::pair<const char*, int> expected[] = {
      {"DT_UNSPECIFIED", 0}, {"DT_BOOL", 1},     {"DT_INT8", 2},       {"DT_INT16", 3},
      {"DT_INT32", 4},       {"DT_INT64", 5},    {"DT_UINT8", 6},      {"DT_UINT16", 7},
      {"DT_UINT32", 8},      {"DT_UINT64", 9},   {"DT_FLOAT16", 10},   {"DT_BFLOAT16", 11},
      {"DT_FLOAT32", 12},    {"DT_FLOAT64", 13}, {"DT_COMPLEX64", 14}, {"DT_COMPLEX128", 15},
      {"DT_STRING", 16},
  };
  const google::protobuf::EnumDescriptor* d = v1::DataType_descriptor();
  ASSERT_EQ(d->value_count(), 17);
  EXPECT_EQ(d->full_name(), "tensorcompute.v1.DataType");
  for (int i = 0; i < d->value_count(); ++i) {
    EXPECT_EQ(d->value(i)->name(), expected[i].first);
    EXPECT_EQ(d->value(i)->number(), expected[i].second);
  }
}

TEST(WireContract, DataTypeConversionsPreserveNumbers) {
  EXPECT_EQ(FromProtoDataType(v1::DT_UNSPECIFIED), core::DataType::kUnspecified);
  EXPECT_EQ(ToProtoDataType(core::DataType::kUnspecified), v1::DT_UNSPECIFIED);
  for (core::DataType dtype : core::kAllDataTypes) {
    const v1::DataType wire = ToProtoDataType(dtype);
    EXPECT_EQ(static_cast<int>(wire), static_cast<int>(dtype));
    EXPECT_TRUE(v1::DataType_IsValid(wire));
    EXPECT_EQ(FromProtoDataType(wire), dtype);
  }
}

TEST(WireContract, MessageFieldNumbers) {
  const auto number = [](const google::protobuf::Descriptor* d, const char* field) {
    const google::protobuf::FieldDescriptor* f = d->FindFieldByName(field);
    return f == nullptr ? -1 : f->number();
  };
  EXPECT_EQ(number(v1::Tensor::descriptor(), "dtype"), 1);
  EXPECT_EQ(number(v1::Tensor::descriptor(), "shape"), 2);
  EXPECT_EQ(number(v1::Tensor::descriptor(), "data"), 3);
  EXPECT_EQ(number(v1::Tensor::descriptor(), "strings"), 4);
  EXPECT_EQ(number(v1::GatherRequest::descriptor(), "params"), 1);
  EXPECT_EQ(number(v1::GatherRequest::descriptor(), "indices"), 2);
  EXPECT_EQ(number(v1::GatherRequest::descriptor(), "axis"), 3);
  EXPECT_EQ(number(v1::GatherRequest::descriptor(), "batch_dims"), 4);
  EXPECT_EQ(number(v1::GatherNdRequest::descriptor(), "batch_dims"), 3);

  // axis has presence: unset and an explicit 0 are different requests.
  v1::GatherRequest request;
  EXPECT_FALSE(request.has_axis());
  request.set_axis(0);
  v1::GatherRequest parsed;
  ASSERT_TRUE(parsed.ParseFromString(request.SerializeAsString()));
  EXPECT_TRUE(parsed.has_axis());
}

}  // namespace
}  // namespace tensorcompute::proto
