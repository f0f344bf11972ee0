// File: core/utf8.h
//
// UTF-8 checks and conversions for the tensor file formats: NumPy 'U' arrays are UTF-32, JSON
// strings must be UTF-8, and tensor strings are arbitrary bytes. Thread-safety: pure functions.

#ifndef TENSORCOMPUTE_CORE_UTF8_H_
#define TENSORCOMPUTE_CORE_UTF8_H_

#include <string>
#include <vector>

#include "absl/strings/string_view.h"

namespace tensorcompute::core {

// Appends the code points of `s` to `*out` (when out != nullptr); returns false if `s` is not
// valid UTF-8 (overlong forms, surrogates and code points above U+10FFFF are invalid).
bool DecodeUtf8(absl::string_view s, std::vector<char32_t>* out);

bool IsValidUtf8(absl::string_view s);

// Appends the UTF-8 encoding of code point `cp`. REQUIRES: cp <= U+10FFFF, not a surrogate.
void AppendUtf8(char32_t cp, std::string* out);

}  // namespace tensorcompute::core

#endif  // TENSORCOMPUTE_CORE_UTF8_H_
