// Tests for proto/decoded_cost.h: the scan's counts equal what the parsed message holds (random
// messages of every request type), and its byte estimate covers what the allocator gives the
// parse (glibc's own count, mallinfo2) and is at most twice it (a repeated field's capacity
// doubles as it grows, so the estimate counts the worst case).

#include "proto/decoded_cost.h"

#include <cstdint>
#include <memory>
#include <random>
#include <string>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "google/protobuf/message.h"
#include "google/protobuf/stubs/logging.h"
#include "google/protobuf/unknown_field_set.h"
#include "grpcpp/support/byte_buffer.h"
#include "grpcpp/support/slice.h"
#include "gtest/gtest.h"
#include "inference/grpc_predict_v2.pb.h"
#include "tensorcompute/v1/tensorcompute.pb.h"
#include <malloc.h>

#include "tests/testing/sanitizers.h"

namespace tensorcompute::proto {
namespace {

using google::protobuf::Descriptor;
using google::protobuf::FieldDescriptor;
using google::protobuf::Message;
using google::protobuf::Reflection;
using google::protobuf::UnknownFieldSet;

// ---- Random messages, filled through reflection ----

// Printable ASCII, valid in `string` fields as in `bytes` ones.
std::string RandomBytes(std::mt19937_64& rng, int max_length) {
  std::string s(std::uniform_int_distribution<int>(0, max_length)(rng), '\0');
  for (char& c : s) c = static_cast<char>(' ' + rng() % 95);
  return s;
}

void FillUnknown(std::mt19937_64& rng, int depth, UnknownFieldSet* set) {
  const int n = std::uniform_int_distribution<int>(0, 3)(rng);
  for (int i = 0; i < n; ++i) {
    const int number = 1000 + static_cast<int>(rng() % 100);
    switch (rng() % 5) {
      case 0:
        set->AddVarint(number, rng());
        break;
      case 1:
        set->AddFixed32(number, static_cast<uint32_t>(rng()));
        break;
      case 2:
        set->AddFixed64(number, rng());
        break;
      case 3:
        set->AddLengthDelimited(number, RandomBytes(rng, 40));
        break;
      default:
        if (depth < 3) FillUnknown(rng, depth + 1, set->AddGroup(number));
    }
  }
}

void SetScalar(std::mt19937_64& rng, const FieldDescriptor& f, Message* m) {
  const Reflection& r = *m->GetReflection();
  const bool rep = f.is_repeated();
  // Small and large values, so that packed varints take 1 to 10 bytes.
  const uint64_t v = rng() % 2 == 0 ? rng() % 200 : rng();
  switch (f.cpp_type()) {
    case FieldDescriptor::CPPTYPE_INT32:
      rep ? r.AddInt32(m, &f, static_cast<int32_t>(v)) : r.SetInt32(m, &f, static_cast<int32_t>(v));
      break;
    case FieldDescriptor::CPPTYPE_INT64:
      rep ? r.AddInt64(m, &f, static_cast<int64_t>(v)) : r.SetInt64(m, &f, static_cast<int64_t>(v));
      break;
    case FieldDescriptor::CPPTYPE_UINT32:
      rep ? r.AddUInt32(m, &f, static_cast<uint32_t>(v))
          : r.SetUInt32(m, &f, static_cast<uint32_t>(v));
      break;
    case FieldDescriptor::CPPTYPE_UINT64:
      rep ? r.AddUInt64(m, &f, v) : r.SetUInt64(m, &f, v);
      break;
    case FieldDescriptor::CPPTYPE_FLOAT:
      rep ? r.AddFloat(m, &f, static_cast<float>(v)) : r.SetFloat(m, &f, static_cast<float>(v));
      break;
    case FieldDescriptor::CPPTYPE_DOUBLE:
      rep ? r.AddDouble(m, &f, static_cast<double>(v)) : r.SetDouble(m, &f, static_cast<double>(v));
      break;
    case FieldDescriptor::CPPTYPE_BOOL:
      rep ? r.AddBool(m, &f, v % 2 == 1) : r.SetBool(m, &f, v % 2 == 1);
      break;
    case FieldDescriptor::CPPTYPE_ENUM:
      rep ? r.AddEnumValue(m, &f, static_cast<int>(v % 20))
          : r.SetEnumValue(m, &f, static_cast<int>(v % 20));
      break;
    default:
      break;
  }
}

void Fill(std::mt19937_64& rng, int depth, Message* m) {
  const Descriptor& d = *m->GetDescriptor();
  const Reflection& r = *m->GetReflection();
  for (int i = 0; i < d.field_count(); ++i) {
    const FieldDescriptor& f = *d.field(i);
    if (rng() % 3 == 0) continue;  // left unset
    const int count = f.is_repeated() ? std::uniform_int_distribution<int>(0, 6)(rng) : 1;
    for (int k = 0; k < count; ++k) {
      if (f.is_map()) {
        // Distinct keys: a repeated key would collapse into one entry.
        Message* entry = r.AddMessage(m, &f);
        const FieldDescriptor& key = *f.message_type()->map_key();
        entry->GetReflection()->SetString(entry, &key, absl::StrCat("key", k, RandomBytes(rng, 4)));
        if (rng() % 2 == 0) {
          Fill(rng, depth + 1,
               entry->GetReflection()->MutableMessage(entry, f.message_type()->map_value()));
        }
      } else if (f.cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE) {
        if (depth >= 3) break;
        Fill(rng, depth + 1, f.is_repeated() ? r.AddMessage(m, &f) : r.MutableMessage(m, &f));
      } else if (f.cpp_type() == FieldDescriptor::CPPTYPE_STRING) {
        f.is_repeated() ? r.AddString(m, &f, RandomBytes(rng, 40))
                        : r.SetString(m, &f, RandomBytes(rng, 40));
      } else {
        SetScalar(rng, f, m);
      }
    }
  }
  if (rng() % 4 == 0) FillUnknown(rng, 0, r.MutableUnknownFields(m));
}

// ---- What a parsed message holds, counted through reflection ----

int64_t CountUnknown(const UnknownFieldSet& set) {
  int64_t n = set.field_count();
  for (int i = 0; i < set.field_count(); ++i) {
    if (set.field(i).type() == google::protobuf::UnknownField::TYPE_GROUP) {
      n += CountUnknown(set.field(i).group());
    }
  }
  return n;
}

void CountHeld(const Message& m, DecodedCost* held) {
  const Reflection& r = *m.GetReflection();
  held->unknown_fields += CountUnknown(r.GetUnknownFields(m));
  std::vector<const FieldDescriptor*> fields;
  r.ListFields(m, &fields);
  for (const FieldDescriptor* f : fields) {
    if (f->cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE) {
      const int n = f->is_repeated() ? r.FieldSize(m, f) : 1;
      held->messages += n;
      for (int i = 0; i < n; ++i) {
        CountHeld(f->is_repeated() ? r.GetRepeatedMessage(m, f, i) : r.GetMessage(m, f), held);
      }
    } else if (f->is_repeated()) {
      (f->cpp_type() == FieldDescriptor::CPPTYPE_STRING ? held->strings : held->scalars) +=
          r.FieldSize(m, f);
    }
  }
}

template <typename T>
void ExpectCountsMatch(uint64_t seed) {
  std::mt19937_64 rng(seed);
  T sent;
  Fill(rng, 0, &sent);
  const std::string wire = sent.SerializeAsString();
  T parsed;
  ASSERT_TRUE(parsed.ParseFromString(wire));
  DecodedCost held;
  CountHeld(parsed, &held);
  absl::StatusOr<DecodedCost> cost = ScanDecodedCost(*T::descriptor(), wire);
  ASSERT_TRUE(cost.ok()) << cost.status();
  SCOPED_TRACE(absl::StrCat(T::descriptor()->name(), " seed ", seed));
  EXPECT_EQ(cost->wire_bytes, static_cast<int64_t>(wire.size()));
  EXPECT_EQ(cost->strings, held.strings);
  EXPECT_EQ(cost->scalars, held.scalars);
  EXPECT_EQ(cost->messages, held.messages);
  EXPECT_EQ(cost->unknown_fields, held.unknown_fields);
}

TEST(DecodedCostTest, CountsWhatRandomParsedMessagesHold) {
  for (uint64_t seed = 1; seed <= 200; ++seed) {
    ExpectCountsMatch<v1::GatherRequest>(seed);
    ExpectCountsMatch<v1::GatherNdRequest>(seed);
    ExpectCountsMatch<v1::PutTensorRequest>(seed);
    ExpectCountsMatch<inference::ModelInferRequest>(seed);
  }
}

// Random bytes changed, cut or inserted in valid messages: whatever parses also scans, and the
// scan counts at least what the parsed message holds (more where the parser merges: a singular
// message sent twice, a map key repeated). The scan is never the stricter of the two.
// Returns whether the damaged message parsed.
template <typename T>
bool ExpectNeverStricterThanTheParser(uint64_t seed) {
  std::mt19937_64 rng(seed);
  T sent;
  Fill(rng, 0, &sent);
  std::string wire = sent.SerializeAsString();
  for (int edit = 0; edit < 3 && !wire.empty(); ++edit) {
    const size_t at = rng() % wire.size();
    switch (rng() % 3) {
      case 0:
        wire[at] = static_cast<char>(rng());
        break;
      case 1:
        wire.resize(at);
        break;
      default:
        wire.insert(at, 1, static_cast<char>(rng()));
    }
  }
  T parsed;
  if (!parsed.ParseFromString(wire)) return false;
  DecodedCost held;
  CountHeld(parsed, &held);
  absl::StatusOr<DecodedCost> cost = ScanDecodedCost(*T::descriptor(), wire);
  EXPECT_TRUE(cost.ok()) << T::descriptor()->name() << " seed " << seed << ": " << cost.status();
  if (!cost.ok()) return true;
  EXPECT_GE(cost->strings, held.strings);
  EXPECT_GE(cost->scalars, held.scalars);
  EXPECT_GE(cost->messages, held.messages);
  EXPECT_GE(cost->unknown_fields, held.unknown_fields);
  return true;
}

TEST(DecodedCostTest, IsNeverStricterThanTheParserOnDamagedMessages) {
  google::protobuf::LogSilencer silence;  // the parser's complaints about bad UTF-8
  int parsed = 0;
  for (uint64_t seed = 1; seed <= 3000; ++seed) {
    parsed += ExpectNeverStricterThanTheParser<v1::GatherRequest>(seed);
    parsed += ExpectNeverStricterThanTheParser<v1::PutTensorRequest>(seed);
    parsed += ExpectNeverStricterThanTheParser<inference::ModelInferRequest>(seed);
  }
  EXPECT_GT(parsed, 300);  // of 9000 (533 parse): enough to mean something
}

TEST(DecodedCostTest, AByteBufferOfManySlicesCountsAsItsFlatCopy) {
  std::mt19937_64 rng(7);
  inference::ModelInferRequest request;
  Fill(rng, 0, &request);
  const std::string wire = request.SerializeAsString();
  std::vector<grpc::Slice> slices;
  for (size_t at = 0; at < wire.size(); at += 7) slices.emplace_back(wire.substr(at, 7));
  grpc::ByteBuffer buffer(slices.data(), slices.size());
  absl::StatusOr<DecodedCost> flat = ScanDecodedCost(*request.descriptor(), wire);
  absl::StatusOr<DecodedCost> sliced = ScanDecodedCost(*request.descriptor(), &buffer);
  ASSERT_TRUE(flat.ok() && sliced.ok());
  EXPECT_EQ(sliced->total(), flat->total());
  EXPECT_EQ(sliced->strings, flat->strings);
  EXPECT_EQ(buffer.Length(), wire.size());  // read, not consumed
}

TEST(DecodedCostTest, UnpackedRepeatedNumbersCountOneEach) {
  // Tensor.shape (field 2) sent unpacked: tag 0x10 per value, which parsers must accept.
  const std::string tensor = std::string("\x10\x01\x10\x02\x10\x03", 6);
  const std::string wire = "\x0a" + std::string(1, static_cast<char>(tensor.size())) + tensor;
  v1::GatherRequest parsed;
  ASSERT_TRUE(parsed.ParseFromString(wire));
  ASSERT_EQ(parsed.params().shape_size(), 3);
  absl::StatusOr<DecodedCost> cost = ScanDecodedCost(*parsed.descriptor(), wire);
  ASSERT_TRUE(cost.ok());
  EXPECT_EQ(cost->scalars, 3);
  EXPECT_EQ(cost->messages, 1);
}

TEST(DecodedCostTest, WhatDoesNotParseDoesNotScan) {
  const Descriptor& type = *v1::GatherRequest::descriptor();
  const std::string bad[] = {
      std::string("\x0a\x05\x22\x00", 4),  // params says 5 bytes, 2 follow
      std::string("\x0f", 1),              // wire type 7
      std::string("\x0c", 1),              // an end-group tag outside a group
      std::string("\x0b\x0a\x00", 3),      // a group never closed
      std::string("\x0a\x02\x22\x05", 4),  // a string longer than its message
  };
  for (const std::string& wire : bad) {
    v1::GatherRequest parsed;
    EXPECT_FALSE(parsed.ParseFromString(wire));
    EXPECT_FALSE(ScanDecodedCost(type, wire).ok()) << absl::CEscape(wire);
  }
  EXPECT_TRUE(ScanDecodedCost(type, "").ok());
}

// ---- The byte estimate against the allocator ----

int64_t HeapInUse() {
  const struct mallinfo2 info = mallinfo2();
  return static_cast<int64_t>(info.uordblks + info.hblkhd);
}

// Parses `wire` into a new T and returns the heap the parse took (the message object itself
// excluded: the server's call owns it already).
template <typename T>
int64_t MeasureParse(const std::string& wire) {
  auto message = std::make_unique<T>();
  const int64_t before = HeapInUse();
  EXPECT_TRUE(message->ParseFromString(wire));
  return HeapInUse() - before;
}

template <typename T>
void ExpectEstimateCovers(const T& sent, absl::string_view what) {
  const std::string wire = sent.SerializeAsString();
  absl::StatusOr<DecodedCost> cost = ScanDecodedCost(*T::descriptor(), wire);
  ASSERT_TRUE(cost.ok());
  const int64_t measured = MeasureParse<T>(wire);
  SCOPED_TRACE(absl::StrCat(what, ": ", wire.size(), " wire bytes, measured ", measured,
                            ", estimated ", cost->parsed_bytes));
  EXPECT_GE(cost->parsed_bytes, measured);
  EXPECT_LE(cost->parsed_bytes, 2 * measured + 4096);
}

constexpr int kMany = 200'000;

TEST(DecodedCostTest, TheEstimateCoversWhatAParseAllocates) {
  static_assert(sizeof(std::string) == 32);  // the constants assume libstdc++'s layout
  if (::tensorcompute::testing::kSanitized)
    GTEST_SKIP() << "the sanitizer's allocator is not glibc's";
  for (int length : {0, 5, 15, 16, 29, 30, 40, 100}) {
    v1::GatherRequest strings;
    strings.mutable_params()->set_dtype(v1::DT_STRING);
    for (int i = 0; i < kMany; ++i) strings.mutable_params()->add_strings(std::string(length, 'x'));
    ExpectEstimateCovers(strings, absl::StrCat("strings of ", length, " bytes"));
  }
  v1::GatherRequest shape;
  for (int i = 0; i < kMany; ++i) shape.mutable_params()->add_shape(1);
  ExpectEstimateCovers(shape, "a shape of 1s");
  v1::GatherRequest data;
  data.mutable_params()->set_data(std::string(8 << 20, 'd'));
  ExpectEstimateCovers(data, "8 MiB of data");

  inference::ModelInferRequest bytes;
  auto* contents = bytes.add_inputs()->mutable_contents();
  for (int i = 0; i < kMany; ++i) contents->add_bytes_contents("");
  ExpectEstimateCovers(bytes, "bytes_contents, empty");
  inference::ModelInferRequest numbers;
  auto* typed = numbers.add_inputs()->mutable_contents();
  for (int i = 0; i < kMany; ++i) typed->add_int64_contents(i % 100);
  for (int i = 0; i < kMany; ++i) typed->add_fp64_contents(i);
  ExpectEstimateCovers(numbers, "int64 and fp64 contents");
  inference::ModelInferRequest inputs;
  for (int i = 0; i < kMany / 10; ++i) inputs.add_inputs();
  ExpectEstimateCovers(inputs, "empty inputs");
  inference::ModelInferRequest parameters;
  for (int i = 0; i < kMany / 10; ++i) (*parameters.mutable_parameters())[absl::StrCat(i)];
  ExpectEstimateCovers(parameters, "parameters");

  v1::GatherRequest unknown;
  for (int i = 0; i < kMany; ++i) {
    unknown.GetReflection()->MutableUnknownFields(&unknown)->AddLengthDelimited(99, "");
  }
  ExpectEstimateCovers(unknown, "empty unknown fields");
}

}  // namespace
}  // namespace tensorcompute::proto
