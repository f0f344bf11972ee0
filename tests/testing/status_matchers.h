// File: tests/testing/status_matchers.h
//
// GoogleMock matchers for absl::Status and absl::StatusOr<T> (Abseil 20220623 ships none):
//   EXPECT_THAT(status_or, IsOk());
//   EXPECT_THAT(status, StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("rank")));
// Both accept a Status, a StatusOr<T> of any T, or a reference to either. The failure text
// shows the actual code and message. And a macro for StatusOr values in a test body:
//   ASSERT_OK_AND_ASSIGN(const KeyIndex index, KeyIndex::Build(keys, nullptr));

#ifndef TENSORCOMPUTE_TESTS_TESTING_STATUS_MATCHERS_H_
#define TENSORCOMPUTE_TESTS_TESTING_STATUS_MATCHERS_H_

#include <ostream>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "gmock/gmock.h"

namespace tensorcompute::testing {
namespace internal_status {

inline const absl::Status& GetStatus(const absl::Status& status) { return status; }

template <typename T>
const absl::Status& GetStatus(const absl::StatusOr<T>& status_or) {
  return status_or.status();
}

// The code and message test that StatusIs() and IsOk() share across all argument types.
class StatusIsCommon {
 public:
  StatusIsCommon(absl::StatusCode code, ::testing::Matcher<const std::string&> message)
      : code_(code), message_(std::move(message)) {}

  bool MatchAndExplain(const absl::Status& status, ::testing::MatchResultListener* listener) const {
    *listener << "whose status is " << status;
    if (status.code() != code_) return false;
    const std::string message(status.message());
    ::testing::StringMatchResultListener inner;
    if (!message_.MatchAndExplain(message, &inner)) {
      if (!inner.str().empty()) *listener << ", and the message " << inner.str();
      return false;
    }
    return true;
  }

  void DescribeTo(std::ostream* os) const {
    *os << "has status code " << absl::StatusCodeToString(code_) << " and a message that ";
    message_.DescribeTo(os);
  }

  void DescribeNegationTo(std::ostream* os) const {
    *os << "has a status code other than " << absl::StatusCodeToString(code_)
        << " or a message that ";
    message_.DescribeNegationTo(os);
  }

 private:
  absl::StatusCode code_;
  ::testing::Matcher<const std::string&> message_;
};

template <typename StatusType>
class MonoStatusIsMatcher : public ::testing::MatcherInterface<StatusType> {
 public:
  explicit MonoStatusIsMatcher(StatusIsCommon common) : common_(std::move(common)) {}

  bool MatchAndExplain(StatusType actual, ::testing::MatchResultListener* listener) const override {
    return common_.MatchAndExplain(GetStatus(actual), listener);
  }
  void DescribeTo(std::ostream* os) const override { common_.DescribeTo(os); }
  void DescribeNegationTo(std::ostream* os) const override { common_.DescribeNegationTo(os); }

 private:
  StatusIsCommon common_;
};

// Polymorphic: converts to a Matcher of whatever Status or StatusOr type it is applied to.
class StatusIsMatcher {
 public:
  explicit StatusIsMatcher(StatusIsCommon common) : common_(std::move(common)) {}

  template <typename StatusType>
  operator ::testing::Matcher<StatusType>() const {  // NOLINT(google-explicit-constructor)
    return ::testing::Matcher<StatusType>(new MonoStatusIsMatcher<StatusType>(common_));
  }

 private:
  StatusIsCommon common_;
};

}  // namespace internal_status

// Matches a Status or StatusOr whose code is `code` and whose message matches `message`
// (a std::string matcher such as HasSubstr("..."), or a string for equality).
inline internal_status::StatusIsMatcher StatusIs(absl::StatusCode code,
                                                 ::testing::Matcher<const std::string&> message) {
  return internal_status::StatusIsMatcher(
      internal_status::StatusIsCommon(code, std::move(message)));
}

// Matches a Status or StatusOr whose code is `code`, with any message.
inline internal_status::StatusIsMatcher StatusIs(absl::StatusCode code) {
  return StatusIs(code, ::testing::_);
}

// Matches an OK Status or StatusOr.
inline internal_status::StatusIsMatcher IsOk() { return StatusIs(absl::StatusCode::kOk); }

}  // namespace tensorcompute::testing

#define TC_TESTING_CONCAT_INNER(a, b) a##b
#define TC_TESTING_CONCAT(a, b) TC_TESTING_CONCAT_INNER(a, b)
// `decl` = the value of StatusOr `expr`, or the test fails here.
#define ASSERT_OK_AND_ASSIGN(decl, expr) \
  TC_TESTING_ASSERT_OK_AND_ASSIGN_IMPL(TC_TESTING_CONCAT(status_or_, __LINE__), decl, expr)
#define TC_TESTING_ASSERT_OK_AND_ASSIGN_IMPL(tmp, decl, expr)  \
  auto tmp = (expr);                                           \
  ASSERT_THAT(tmp.status(), ::tensorcompute::testing::IsOk()); \
  decl = *std::move(tmp)

#endif  // TENSORCOMPUTE_TESTS_TESTING_STATUS_MATCHERS_H_
