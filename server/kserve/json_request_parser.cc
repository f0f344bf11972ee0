// JsonRequestParser's events (json_request_parser.h): what each SAX event means to the value it
// belongs to. The rules that give values their meaning are in json_request_rules.cc.

#include "server/kserve/json_request_parser.h"

#include <algorithm>
#include <cstdint>

#include "absl/strings/str_cat.h"

#include "core/status_macros.h"
#include "server/kserve/json_data.h"
#include "server/kserve/json_request.h"

namespace tensorcompute::server::kserve {
namespace {

// The parser's own state: its frames (at most kMaxJsonDepth), one input's and one output's
// fields, a lexer's fixed part; generously.
constexpr int64_t kParserStateBytes = 16 << 10;

}  // namespace

absl::Status JsonRequestParser::Parse() {
  const bool parsed = ParseJsonValue(json_.data(), json_.data() + json_.size(), &cursor_, this,
                                     /*strict=*/true);
  TC_RETURN_IF_ERROR(status_);  // not JSON, or past a bound
  if (!parsed) return absl::InternalError("the JSON parser stopped without a reason");
  return Finish();
}

int64_t JsonRequestParser::HeldBytes() const {
  // nlohmann's lexer keeps a token twice (unescaped, and as read), each in a buffer grown by
  // doubling; a second parse of `data` has its own lexer beside the first.
  const int64_t lexers = reparsed_ ? 2 : 1;
  return static_cast<int64_t>(request_->SpaceUsedLong()) +
         lexers * 4 * static_cast<int64_t>(longest_token_) + kParserStateBytes;
}

bool JsonRequestParser::key(Json::string_t& key) {
  longest_token_ = std::max(longest_token_, key.size());
  if (skip_ > 0) return true;
  if (data_) return data_->key(key);
  // Not skipped nor decoded: the innermost open object is a protocol container.
  rule_ = (this->*frames_.back().fields)(key);
  return rule_ != nullptr;
}

bool JsonRequestParser::Open(Value::Type type) {
  const bool object = type == Value::Type::kObject;
  if (++depth_ > kMaxJsonDepth) {
    return Fail(absl::InvalidArgumentError(
        absl::StrCat("the request: JSON nests deeper than ", kMaxJsonDepth, " levels")));
  }
  if (skip_ > 0) {
    ++skip_;
    return true;
  }
  if (data_) return object ? data_->start_object(0) : data_->start_array(0);
  return Apply((this->*rule_)({type, JsonLeaf::Null()}));
}

bool JsonRequestParser::Apply(const Then& then) {
  switch (then.what) {
    case Then::Do::kStop:
      return false;
    case Then::Do::kNothing:
      break;
    case Then::Do::kEnter:
      frames_.push_back(then.container);
      break;
    case Then::Do::kSkip:
      skip_ = 1;
      value_start_ = cursor_ - 1;
      ended_ = then.ended;
      break;
    case Then::Do::kDecode:
      value_start_ = cursor_ - 1;
      ended_ = then.ended;
      break;
  }
  // The frames stay as they are while a value is skipped or decoded.
  rule_ = ElementRule();
  return then.what == Then::Do::kDecode ? data_->start_array(0) : true;
}

bool JsonRequestParser::Close(bool object) {
  --depth_;
  if (skip_ > 0) {
    if (--skip_ == 0) ValueEnded();
    return true;
  }
  if (data_) {
    object ? data_->end_object() : data_->end_array();
    if (data_->done()) {
      ValueEnded();
      data_.reset();
    }
    return true;
  }
  const Container container = frames_.back();
  frames_.pop_back();
  rule_ = ElementRule();
  if (container.ended != nullptr) (this->*container.ended)({});
  return true;
}

void JsonRequestParser::ValueEnded() {
  if (ended_ == nullptr) return;
  (this->*ended_)(absl::string_view(value_start_, static_cast<size_t>(cursor_ - value_start_)));
}

}  // namespace tensorcompute::server::kserve
