// The resident-tensor registry: names, versions, the byte cap, and that readers keep the
// version they hold while the name is replaced or deleted; and ValidateResidentDescription's
// checks of an upload's description, each message exactly.

#include "core/tensor_registry.h"

#include <atomic>
#include <cstdint>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

#include "tests/testing/status_matchers.h"

namespace tensorcompute::core {
namespace {

using ::tensorcompute::testing::IsOk;
using ::tensorcompute::testing::StatusIs;
using ::testing::Eq;
using ::testing::HasSubstr;

Tensor Filled(int32_t value, int64_t n) {
  std::vector<int32_t> values(n, value);
  return Tensor::FromValues<int32_t>(DataType::kInt32, {n}, values);
}

std::shared_ptr<const ResidentTensor> PutOrDie(TensorRegistry& registry, const std::string& name,
                                               int32_t value, int64_t n, bool replace = false) {
  auto reservation = registry.Reserve(name, n * 4);
  EXPECT_THAT(reservation.status(), IsOk());
  auto entry = registry.Put(name, Filled(value, n), DeviceCopy{}, replace, *std::move(reservation));
  EXPECT_THAT(entry.status(), IsOk());
  return entry.ok() ? *entry : nullptr;
}

TEST(TensorRegistryTest, StatisticsFollowTheNameAcrossReplacementsUntilDeleted) {
  TensorRegistry registry(1 << 20);
  auto first = PutOrDie(registry, "t", 1, 4);
  ASSERT_NE(first, nullptr);
  ASSERT_NE(first->stats, nullptr);
  RequestStages stages;
  stages.total = absl::Milliseconds(1);
  first->stats->Record(stages, /*ok=*/true, absl::Now());
  auto second = PutOrDie(registry, "t", 2, 4, /*replace=*/true);
  ASSERT_NE(second, nullptr);
  EXPECT_EQ(second->stats, first->stats);
  EXPECT_EQ(second->stats->success().count(), 1);
  auto other = PutOrDie(registry, "u", 3, 4);
  EXPECT_NE(other->stats, first->stats);
  ASSERT_THAT(registry.Delete("t").status(), IsOk());
  auto again = PutOrDie(registry, "t", 4, 4);
  ASSERT_NE(again->stats, nullptr);
  EXPECT_NE(again->stats, first->stats);
  EXPECT_EQ(again->stats->success().count(), 0);
}

TEST(TensorRegistryTest, PutFindListDelete) {
  TensorRegistry registry(1 << 20);
  EXPECT_EQ(registry.Find("t"), nullptr);
  auto t = PutOrDie(registry, "t", 7, 10);
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->version, 1);
  EXPECT_EQ(t->bytes, 40);
  EXPECT_EQ(t->device, "cpu");
  EXPECT_EQ(registry.Find("t"), t);
  PutOrDie(registry, "a", 1, 1);
  auto list = registry.List();
  ASSERT_EQ(list.size(), 2u);
  EXPECT_EQ(list[0]->name, "a");
  EXPECT_EQ(list[1]->name, "t");
  EXPECT_EQ(registry.resident_bytes(), 44);
  EXPECT_THAT(registry.Delete("t"), IsOk());
  EXPECT_THAT(registry.Delete("t"),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("no tensor named 't'")));
  EXPECT_EQ(registry.Find("t"), nullptr);
  // `t` is still held here (and in `list`): its bytes stay counted until it is let go.
  EXPECT_EQ(registry.resident_bytes(), 44);
  list.clear();
  t.reset();
  EXPECT_EQ(registry.resident_bytes(), 4);
}

TEST(TensorRegistryTest, ReplacingNeedsReplaceAndBumpsTheVersion) {
  TensorRegistry registry(1 << 20);
  PutOrDie(registry, "t", 1, 4);
  auto reservation = registry.Reserve("t", 16);
  ASSERT_THAT(reservation.status(), IsOk());
  EXPECT_THAT(
      registry.Put("t", Filled(2, 4), DeviceCopy{}, /*replace=*/false, *std::move(reservation))
          .status(),
      StatusIs(absl::StatusCode::kAlreadyExists, HasSubstr("exists (version 1)")));
  // The refused upload's bytes were given back.
  EXPECT_EQ(registry.resident_bytes(), 16);
  auto v2 = PutOrDie(registry, "t", 2, 4, /*replace=*/true);
  EXPECT_EQ(v2->version, 2);
  EXPECT_EQ(registry.Find("t")->tensor.values<int32_t>()[0], 2);
  EXPECT_EQ(registry.resident_bytes(), 16);  // version 1 was freed: nobody held it
}

TEST(TensorRegistryTest, TheCapIsCheckedBeforeAllocating) {
  TensorRegistry registry(100);
  PutOrDie(registry, "a", 1, 20);  // 80 bytes
  EXPECT_THAT(registry.Reserve("b", 24).status(),
              StatusIs(absl::StatusCode::kResourceExhausted,
                       HasSubstr("tensor 'b' needs 24 bytes but 80 of max_resident_bytes = 100 "
                                 "are in use")));
  {
    auto r = registry.Reserve("b", 20);
    ASSERT_THAT(r.status(), IsOk());
    EXPECT_EQ(registry.resident_bytes(), 100);
  }  // abandoned upload: nothing left
  EXPECT_EQ(registry.resident_bytes(), 80);
}

TEST(TensorRegistryTest, NamesAreValidated) {
  TensorRegistry registry(100);
  EXPECT_THAT(TensorRegistry::ValidateName(""), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(TensorRegistry::ValidateName("a b"), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(TensorRegistry::ValidateName(std::string(257, 'x')),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(TensorRegistry::ValidateName("user_embeddings.v2"), IsOk());
}

constexpr auto kInvalid = absl::StatusCode::kInvalidArgument;
constexpr char kKnownTypes[] =
    "bool, int8, int16, int32, int64, uint8, uint16, uint32, uint64, float16, bfloat16, "
    "float32, float64, complex64, complex128, string";

TEST(ValidateResidentDescription, ReturnsTheSizeOfAValidDescription) {
  absl::StatusOr<ResidentSize> size =
      ValidateResidentDescription("t", DataType::kFloat32, {4, 3}, 32);
  ASSERT_THAT(size.status(), IsOk());
  EXPECT_EQ(size->elements, 12);
  EXPECT_EQ(size->data_bytes, 48);
  size = ValidateResidentDescription("t", DataType::kComplex128, {2, 0, 5}, 3);
  ASSERT_THAT(size.status(), IsOk());
  EXPECT_EQ(size->elements, 0);
  EXPECT_EQ(size->data_bytes, 0);
}

TEST(ValidateResidentDescription, StringsHaveNoDataBytes) {
  absl::StatusOr<ResidentSize> size =
      ValidateResidentDescription("words", DataType::kString, {5}, 32);
  ASSERT_THAT(size.status(), IsOk());
  EXPECT_EQ(size->elements, 5);
  EXPECT_EQ(size->data_bytes, 0);
}

TEST(ValidateResidentDescription, RefusesABadName) {
  EXPECT_THAT(ValidateResidentDescription("", DataType::kInt32, {1}, 32).status(),
              StatusIs(kInvalid, Eq("tensor name has 0 bytes; expected 1 to 256")));
  EXPECT_THAT(ValidateResidentDescription("a b", DataType::kInt32, {1}, 32).status(),
              StatusIs(kInvalid, Eq("tensor name must be printable ASCII without spaces (e.g. "
                                    "user_embeddings)")));
}

TEST(ValidateResidentDescription, RefusesAnUnknownDtypeWithCoresText) {
  EXPECT_THAT(ValidateResidentDescription("t", static_cast<DataType>(99), {1}, 32).status(),
              StatusIs(kInvalid, Eq(absl::StrCat("tensor 't': unknown dtype 99; expected one of ",
                                                 kKnownTypes))));
  EXPECT_THAT(ValidateResidentDescription("t", static_cast<DataType>(-1), {1}, 32).status(),
              StatusIs(kInvalid, Eq(absl::StrCat("tensor 't': unknown dtype -1; expected one of ",
                                                 kKnownTypes))));
}

TEST(ValidateResidentDescription, RefusesAnUnspecifiedDtype) {
  EXPECT_THAT(
      ValidateResidentDescription("t", DataType::kUnspecified, {1}, 32).status(),
      StatusIs(kInvalid, Eq(absl::StrCat("tensor 't': dtype is unspecified; expected one of ",
                                         kKnownTypes))));
}

TEST(ValidateResidentDescription, RefusesAScalar) {
  EXPECT_THAT(ValidateResidentDescription("t", DataType::kInt32, {}, 32).status(),
              StatusIs(kInvalid, Eq("tensor 't' is a scalar; gathers need rank >= 1 (e.g. "
                                    "shape [1])")));
}

TEST(ValidateResidentDescription, RefusesARankAboveMaxRank) {
  EXPECT_THAT(ValidateResidentDescription("t", DataType::kInt8, {1, 1, 1}, 2).status(),
              StatusIs(kInvalid, Eq("tensor 't' has rank 3; at most 2")));
  EXPECT_THAT(ValidateResidentDescription("t", DataType::kInt8, {1, 1}, 2).status(), IsOk());
}

TEST(ValidateResidentDescription, RefusesANegativeDimension) {
  EXPECT_THAT(ValidateResidentDescription("t", DataType::kInt8, {2, -3, 4}, 32).status(),
              StatusIs(kInvalid, Eq("tensor 't' has a negative dimension -3")));
}

TEST(ValidateResidentDescription, RefusesElementAndByteCountsAboveInt64) {
  const int64_t big = int64_t{1} << 32;
  const std::string overflow = "tensor 't': the element count of its shape overflows int64";
  EXPECT_THAT(ValidateResidentDescription("t", DataType::kInt8, {big, big}, 32).status(),
              StatusIs(kInvalid, Eq(overflow)));
  EXPECT_THAT(ValidateResidentDescription("t", DataType::kString, {big, big}, 32).status(),
              StatusIs(kInvalid, Eq(overflow)));
  // 2^62 elements fit in int64; 2^62 x 8 bytes do not, nor 2^62 strings' bookkeeping
  // (ResidentBytes: sizeof(std::string) each), which an upload reserves before its payload.
  const int64_t elements = int64_t{1} << 62;
  EXPECT_THAT(ValidateResidentDescription("t", DataType::kInt64, {elements}, 32).status(),
              StatusIs(kInvalid, Eq(overflow)));
  EXPECT_THAT(ValidateResidentDescription("t", DataType::kInt8, {elements}, 32).status(), IsOk());
  EXPECT_THAT(ValidateResidentDescription("t", DataType::kString, {elements}, 32).status(),
              StatusIs(kInvalid, Eq(overflow)));
  const int64_t strings = int64_t{1} << 50;  // 2^55 bytes of bookkeeping: fits
  auto size = ValidateResidentDescription("t", DataType::kString, {strings}, 32);
  ASSERT_THAT(size.status(), IsOk());
  EXPECT_EQ(size->elements, strings);
  EXPECT_EQ(size->data_bytes, 0);
}

TEST(ValidateResidentDescription, ChecksNameThenDtypeThenShape) {
  // Every fault at once: the name's is reported.
  EXPECT_THAT(ValidateResidentDescription("", static_cast<DataType>(99), {}, 0).status(),
              StatusIs(kInvalid, HasSubstr("tensor name has 0 bytes")));
  // Then the dtype, before the scalar.
  EXPECT_THAT(ValidateResidentDescription("t", static_cast<DataType>(99), {}, 0).status(),
              StatusIs(kInvalid, HasSubstr("unknown dtype 99")));
  // Then the scalar, the rank, and the negative dimension before the overflow.
  EXPECT_THAT(ValidateResidentDescription("t", DataType::kInt8, {}, 0).status(),
              StatusIs(kInvalid, HasSubstr("is a scalar")));
  EXPECT_THAT(ValidateResidentDescription("t", DataType::kInt8, {-1, -1}, 1).status(),
              StatusIs(kInvalid, HasSubstr("has rank 2")));
  const int64_t big = int64_t{1} << 32;
  EXPECT_THAT(ValidateResidentDescription("t", DataType::kInt8, {big, big, -1}, 32).status(),
              StatusIs(kInvalid, HasSubstr("negative dimension -1")));
}

TEST(TensorRegistryTest, ReadersSeeWholeVersionsWhileTheNameIsReplaced) {
  // 4 readers look the name up and check that every element of what they got is the same
  // value (never a mix of versions), while a writer replaces it 300 times.
  TensorRegistry registry(int64_t{64} << 20);
  constexpr int64_t kElements = 4096;
  PutOrDie(registry, "t", 0, kElements);
  std::atomic<bool> stop{false};
  std::atomic<int64_t> reads{0}, torn{0};
  std::vector<std::thread> readers;
  for (int r = 0; r < 4; ++r) {
    readers.emplace_back([&] {
      while (!stop.load()) {
        auto entry = registry.Find("t");
        if (entry == nullptr) {
          ++torn;
          continue;
        }
        auto values = entry->tensor.values<int32_t>();
        for (int32_t v : values) {
          if (v != values[0] || v + 1 != entry->version) ++torn;
        }
        ++reads;
      }
    });
  }
  // The readers first (on a loaded machine the writer could otherwise finish before they start).
  while (reads.load() < 4) std::this_thread::yield();
  for (int32_t v = 1; v <= 300; ++v) PutOrDie(registry, "t", v, kElements, /*replace=*/true);
  stop.store(true);
  for (auto& t : readers) t.join();
  EXPECT_GT(reads.load(), 0);
  EXPECT_EQ(torn.load(), 0);
  EXPECT_EQ(registry.Find("t")->version, 301);
  EXPECT_EQ(registry.resident_bytes(), kElements * 4);
}

}  // namespace
}  // namespace tensorcompute::core
