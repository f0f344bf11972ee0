// The streaming ParseHttpInferRequest (server/kserve/json_request.h) against its slow twin, the
// document-building decoder it replaced (kserve_json_reference.h), on random requests: every
// datatype, flat and nested data, fields in any order, binary data, parameters and outputs, and
// faults, one kind or several at a time (a bad element, a missing or mistyped field, a key given
// twice, a count that does not match, binary sizes that do not add up, truncated JSON). Both must
// return the same status (code and message), the same request and the same options.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "google/protobuf/util/message_differencer.h"
#include "gtest/gtest.h"

#include "server/kserve/json_request.h"
#include "tests/server/kserve_json_reference.h"

// GCC 12 warns wrongly on `"literal" + std::string` at -O3 (GCC bug 105329). Clang has no such
// warning (nor the group: naming it would be a warning of its own).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wrestrict"
#endif

namespace tensorcompute::server::kserve {
namespace {

const std::vector<std::string> kDatatypes = {"BOOL",  "INT8",   "INT16",  "INT32",  "INT64",
                                             "UINT8", "UINT16", "UINT32", "UINT64", "FP16",
                                             "BF16",  "FP32",   "FP64",   "BYTES"};

// The faults a case may carry (one at most).
enum class Fault {
  kNone,
  kBadElement,
  kCountMismatch,
  kMissingField,
  kWrongType,
  kUnknownDatatype,
  kTruncated,
  kTrailingGarbage,
  kBinarySize,
  kBadParameter,
  kBadOutput,
  kRootNotObject,
  kDuplicate,  // a key given twice, the first time with a wrong value
  kCount       // the number of faults
};

class RequestGenerator {
 public:
  // With `single_fault`, a case has one fault at most; else any number of them.
  RequestGenerator(uint32_t seed, bool single_fault) : rng_(seed), single_fault_(single_fault) {}

  // A random request body and its header length (set when it has binary data).
  void Make(std::string* body, std::optional<int64_t>* header_length) {
    faults_ = 0;
    if (Coin(0.6)) {
      for (int f = 1; f < static_cast<int>(Fault::kCount); ++f) {
        if (Coin(single_fault_ ? 0.0 : 0.2)) faults_ |= 1u << f;
      }
      if (faults_ == 0) faults_ = 1u << Int(1, static_cast<int>(Fault::kCount) - 1);
    }
    binary_.clear();
    const int inputs = Int(0, 3);
    std::vector<std::string> fields;
    if (Coin()) fields.push_back(Key("id") + (Take(Fault::kWrongType, 0.2) ? "5" : String()));
    if (Coin()) fields.push_back(Key("parameters") + Parameters());
    std::vector<std::string> list;
    for (int i = 0; i < inputs; ++i) list.push_back(Input(Coin()));
    if (!Take(Fault::kMissingField, 0.2)) {
      fields.push_back(Key("inputs") + (Take(Fault::kWrongType, 0.1)
                                            ? "{}"
                                            : "[" + absl::StrJoin(list, Comma()) + "]"));
    }
    if (Coin()) fields.push_back(Key("outputs") + Outputs());
    if (Coin(0.3)) fields.push_back(Key("extra") + Junk(3));
    std::shuffle(fields.begin(), fields.end(), rng_);
    if (Take(Fault::kDuplicate, 0.5)) {
      static const char* const kFirst[] = {"\"id\":5", "\"inputs\":{}", "\"parameters\":[1]",
                                           "\"outputs\":3", "\"inputs\":[7]"};
      fields.insert(fields.begin(), kFirst[Int(0, 4)]);
    }
    std::string json = Ws() + "{" + absl::StrJoin(fields, Comma()) + "}" + Ws();
    if (Take(Fault::kRootNotObject)) json = Coin() ? "[" + json + "]" : "5";
    if (Take(Fault::kTruncated)) json.resize(Int(0, static_cast<int>(json.size()) - 1));
    if (Take(Fault::kTrailingGarbage)) json += Coin() ? "x" : "{}";
    if (Take(Fault::kBinarySize)) binary_ += "!";
    *body = json + binary_;
    *header_length = std::nullopt;
    if (!binary_.empty() || Coin(0.1)) *header_length = static_cast<int64_t>(json.size());
  }

 private:
  int Int(int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng_); }
  bool Coin(double p = 0.5) { return std::bernoulli_distribution(p)(rng_); }
  // Whether to put in `fault` here (with probability p) when the case has it.
  bool Take(Fault fault, double p = 1) {
    return (faults_ & (1u << static_cast<int>(fault))) != 0 && Coin(p);
  }
  std::string Ws() {
    static const char* const kSpaces[] = {"", "", "", " ", "\n  ", "\t"};
    return kSpaces[Int(0, 5)];
  }
  std::string Comma() { return Ws() + "," + Ws(); }
  std::string Key(const std::string& key) { return "\"" + key + "\"" + Ws() + ":" + Ws(); }

  std::string String() {
    static const char* const kPieces[] = {
        "a", "b", "\\n", "\\\"", "\\\\", "\\u00e9", "é", " ", "\\ud83d\\ude00", "0", "xyz"};
    std::string s = "\"";
    for (int n = Int(0, 6); n > 0; --n) s += kPieces[Int(0, 10)];
    return s + "\"";
  }

  // Any JSON value nested at most `depth` deep (ignored fields).
  std::string Junk(int depth) {
    switch (Int(0, depth > 0 ? 5 : 3)) {
      case 0:
        return "null";
      case 1:
        return String();
      case 2:
        return absl::StrCat(Int(-5, 5));
      case 3:
        return "1.5e3";
      case 4:
        return "[" + Junk(depth - 1) + Comma() + Junk(depth - 1) + "]";
      default:
        return "{" + Key("k") + Junk(depth - 1) + Comma() + Key("a") + Junk(depth - 1) + "}";
    }
  }

  std::string Integer(const std::string& datatype) {
    if (datatype == "UINT64") {
      return Coin(0.2) ? "18446744073709551615" : absl::StrCat(rng_());
    }
    if (datatype == "INT64") {
      return Coin(0.2) ? "-9223372036854775808" : absl::StrCat(static_cast<int32_t>(rng_()));
    }
    const int bits = std::stoi(datatype.substr(datatype[0] == 'U' ? 4 : 3));
    const bool is_unsigned = datatype[0] == 'U';
    const int64_t lo = is_unsigned ? 0 : -(int64_t{1} << (bits - 1));
    const int64_t hi = is_unsigned ? (int64_t{1} << bits) - 1 : (int64_t{1} << (bits - 1)) - 1;
    if (Coin(0.2)) return absl::StrCat(Coin() ? lo : hi);
    return absl::StrCat(std::uniform_int_distribution<int64_t>(lo, hi)(rng_));
  }

  std::string Number() {
    static const char* const kSpecial[] = {"0",     "-0.0",  "1e38",   "3.5e38", "65504",
                                           "65520", "1e-8",  "-2",     "1e-45",  "1.00390625",
                                           "0.1",   "1e308", "-1e-320"};
    if (Coin(0.3)) return kSpecial[Int(0, 12)];
    if (Coin(0.2)) return absl::StrCat(Int(-100000, 100000));
    const double v =
        std::uniform_real_distribution<double>(-1, 1)(rng_) * std::pow(10.0, Int(-12, 12));
    char text[40];
    std::snprintf(text, sizeof(text), "%.17g", v);
    return text;
  }

  std::string Element(const std::string& datatype) {
    if (datatype == "BOOL") return Coin() ? "true" : "false";
    if (datatype == "BYTES") return String();
    if (datatype[0] == 'F' || datatype[0] == 'B') return Number();
    return Integer(datatype);
  }

  std::string BadElement(const std::string& datatype) {
    static const char* const kBad[] = {"null",
                                       "\"x\"",
                                       "{\"b\":[1,2],\"a\":\"zz\"}",
                                       "true",
                                       "1.5",
                                       "{}",
                                       "\"a string much longer than forty chars\""};
    if (datatype[0] == 'I' || datatype[0] == 'U') {
      if (Coin(0.4)) {
        static const char* const kBig[] = {"128",
                                           "-129",
                                           "256",
                                           "-1",
                                           "40000",
                                           "4294967296",
                                           "18446744073709551616",
                                           "9223372036854775808"};
        return kBig[Int(0, 7)];
      }
    }
    if (datatype == "BOOL" && Coin(0.4)) return "1";
    if (datatype == "BYTES" && Coin(0.4)) return "7";
    return kBad[Int(0, 6)];
  }

  // `data` for `shape`: nested as the shape or flat; one bad element when `bad`.
  std::string Data(const std::string& datatype, const std::vector<int>& shape, bool bad) {
    int64_t n = 1;
    for (int d : shape) n *= d;
    const int64_t bad_at = bad && n > 0 ? Int(0, static_cast<int>(n) - 1) : -1;
    int64_t next = 0;
    auto element = [&] { return next++ == bad_at ? BadElement(datatype) : Element(datatype); };
    if (shape.empty() || Coin(0.4)) {
      std::vector<std::string> flat;
      for (int64_t i = 0; i < n; ++i) flat.push_back(element());
      return "[" + absl::StrJoin(flat, Comma()) + "]";
    }
    std::function<std::string(size_t)> nested = [&](size_t axis) {
      std::vector<std::string> items;
      for (int i = 0; i < shape[axis]; ++i) {
        items.push_back(axis + 1 == shape.size() ? element() : nested(axis + 1));
      }
      return "[" + Ws() + absl::StrJoin(items, Comma()) + Ws() + "]";
    };
    return nested(0);
  }

  std::string Input(bool faulty) {
    std::string datatype = kDatatypes[Int(0, static_cast<int>(kDatatypes.size()) - 1)];
    std::vector<int> shape(Int(0, 3));
    for (int& d : shape) d = Int(0, 3);
    int64_t n = 1;
    for (int d : shape) n *= d;
    std::vector<std::string> fields;
    fields.push_back(Key("name") + (faulty && Take(Fault::kWrongType, 0.2)
                                        ? "7"
                                        : "\"in" + absl::StrCat(Int(0, 9)) + "\""));
    fields.push_back(Key("datatype") + "\"" +
                     (faulty && Take(Fault::kUnknownDatatype) ? "FP99" : datatype) + "\"");
    std::vector<int> written = shape;
    if (faulty && Take(Fault::kCountMismatch)) written.push_back(2);
    fields.push_back(Key("shape") + "[" + absl::StrJoin(written, Comma()) + "]");
    if (faulty && Take(Fault::kWrongType, 0.5)) {
      static const char* const kWrong[] = {
          "\"shape\":{}",       "\"shape\":[1.5]",
          "\"shape\":[\"x\"]",  "\"datatype\":[]",
          "\"parameters\":3",   "\"data\":5",
          "\"data\":{\"a\":1}", "\"parameters\":{\"binary_data_size\":\"8\"}"};
      const std::string wrong = kWrong[Int(0, 7)];
      const std::string key = wrong.substr(0, wrong.find(':'));
      fields.erase(std::remove_if(fields.begin(), fields.end(),
                                  [&](const std::string& f) { return f.rfind(key, 0) == 0; }),
                   fields.end());
      fields.push_back(wrong);
      if (key != "\"data\"" && key != "\"parameters\"") {
        fields.push_back(Key("data") + Data(datatype, shape, false));
      }
    } else if (datatype != "BOOL" && Coin(0.25)) {
      const std::string bytes = BinaryBytes(datatype, n);
      const size_t more = faulty && Take(Fault::kBinarySize) ? 4 : 0;
      fields.push_back(Key("parameters") + "{" + Key("binary_data_size") +
                       absl::StrCat(bytes.size() + more) + "}");
      binary_ += bytes;
    } else {
      fields.push_back(Key("data") + Data(datatype, shape, faulty && Take(Fault::kBadElement)));
      if (Coin(0.2)) fields.push_back(Key("parameters") + "{" + Key("other") + Junk(2) + "}");
    }
    if (Coin(0.2)) fields.push_back(Key("junk") + Junk(3));
    if (faulty && Take(Fault::kMissingField)) fields.erase(fields.begin() + Int(0, 3));
    std::shuffle(fields.begin(), fields.end(), rng_);
    if (faulty && Take(Fault::kDuplicate)) {
      static const char* const kFirst[] = {"\"name\":5", "\"data\":\"x\"", "\"shape\":{}",
                                           "\"datatype\":1",
                                           "\"parameters\":{\"binary_data_size\":\"x\"}"};
      fields.insert(fields.begin(), kFirst[Int(0, 4)]);
    }
    return "{" + Ws() + absl::StrJoin(fields, Comma()) + Ws() + "}";
  }

  std::string BinaryBytes(const std::string& datatype, int64_t n) {
    std::string out;
    if (datatype == "BYTES") {
      for (int64_t i = 0; i < n; ++i) {
        const uint32_t len = Int(0, 3);
        char prefix[4];
        std::memcpy(prefix, &len, 4);
        out.append(prefix, 4);
        out.append(len, 'q');
      }
      return out;
    }
    const int size = datatype.find("8") != std::string::npos    ? 1
                     : datatype.find("16") != std::string::npos ? 2
                     : datatype.find("32") != std::string::npos ? 4
                                                                : 8;
    for (int64_t i = 0; i < n * size; ++i) out.push_back(static_cast<char>(rng_()));
    return out;
  }

  std::string Parameters() {
    std::vector<std::string> items;
    static const char* const kValues[] = {"1",
                                          "-3",
                                          "true",
                                          "false",
                                          "0.5",
                                          "\"gather\"",
                                          "18446744073709551615",
                                          "9223372036854775807",
                                          "5000",
                                          "1e300"};
    static const char* const kNames[] = {"axis",    "batch_dims", "binary_data_output",
                                         "timeout", "op",         "scale"};
    for (int n = Int(0, 4); n > 0; --n)
      items.push_back(Key(kNames[Int(0, 5)]) + kValues[Int(0, 9)]);
    if (Take(Fault::kBadParameter)) {
      static const char* const kBad[] = {"[1]", "{\"b\":1,\"a\":[2,3]}", "null", "[]",
                                         "[\"a very long string that needs shortening\"]"};
      items.push_back(Key("bad") + kBad[Int(0, 4)]);
    }
    std::shuffle(items.begin(), items.end(), rng_);
    if (Take(Fault::kDuplicate, 0.3)) items.insert(items.begin(), Key(kNames[Int(0, 5)]) + "[1]");
    if (Take(Fault::kWrongType, 0.2)) return "[]";
    return "{" + absl::StrJoin(items, Comma()) + "}";
  }

  std::string Outputs() {
    std::vector<std::string> items;
    for (int n = Int(0, 2); n > 0; --n) {
      std::vector<std::string> fields = {Key("name") + "\"output\""};
      if (Coin()) {
        fields.push_back(Key("parameters") + "{" + Key("binary_data") +
                         (Coin() ? "true" : "false") + "}");
      }
      if (Take(Fault::kBadOutput, 0.7)) {
        static const char* const kBad[] = {"\"parameters\":{\"binary_data\":1}", "\"name\":3",
                                           "\"parameters\":[]"};
        const std::string bad = kBad[Int(0, 2)];
        const std::string key = bad.substr(0, bad.find(':'));
        fields.erase(std::remove_if(fields.begin(), fields.end(),
                                    [&](const std::string& f) { return f.rfind(key, 0) == 0; }),
                     fields.end());
        fields.push_back(bad);
      }
      std::shuffle(fields.begin(), fields.end(), rng_);
      items.push_back("{" + absl::StrJoin(fields, Comma()) + "}");
    }
    if (Take(Fault::kBadOutput)) items.push_back("5");
    return "[" + absl::StrJoin(items, Comma()) + "]";
  }

  std::mt19937 rng_;
  const bool single_fault_;
  uint32_t faults_ = 0;  // bit f: the case may have Fault f
  std::string binary_;
};

void CompareOnRandomRequests(bool single_fault) {
  RequestGenerator generator(single_fault ? 20261124 : 20261125, single_fault);
  int ok = 0;
  for (int i = 0; i < 4000; ++i) {
    std::string body;
    std::optional<int64_t> header_length;
    generator.Make(&body, &header_length);
    inference::ModelInferRequest expected, actual;
    HttpInferOptions expected_options, actual_options;
    const absl::Status want =
        ReferenceParseHttpInferRequest(body, header_length, &expected, &expected_options);
    const absl::Status got = ParseHttpInferRequest(body, header_length, &actual, &actual_options);
    ASSERT_EQ(got, want) << "case " << i << ":\n" << body;
    if (!want.ok()) continue;
    ++ok;
    ASSERT_TRUE(google::protobuf::util::MessageDifferencer::Equals(actual, expected))
        << "case " << i << ":\n"
        << body << "\ngot:\n"
        << actual.DebugString() << "\nwant:\n"
        << expected.DebugString();
    EXPECT_EQ(actual_options.binary_output, expected_options.binary_output) << body;
    EXPECT_EQ(actual_options.timeout_us, expected_options.timeout_us) << body;
  }
  EXPECT_GT(ok, 1000);  // the generator makes many valid requests, not only faults
}

TEST(KserveJsonRandom, MatchesTheDocumentDecoderWithOneKindOfFault) {
  CompareOnRandomRequests(true);
}

// Several faults: the decoder reports the one the document decoder (kserve_json_reference.cc) did
// (the text is parsed to its end before any is reported, then they are taken in the old order).
TEST(KserveJsonRandom, MatchesTheDocumentDecoderWithSeveralFaults) {
  CompareOnRandomRequests(false);
}

}  // namespace
}  // namespace tensorcompute::server::kserve
