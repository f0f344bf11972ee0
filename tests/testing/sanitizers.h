// File: tests/testing/sanitizers.h
//
// Whether this binary runs under AddressSanitizer or ThreadSanitizer: their allocators replace
// glibc's, so tests that measure what an allocation costs (mallinfo2, peak RSS) skip under them.

#ifndef TENSORCOMPUTE_TESTS_TESTING_SANITIZERS_H_
#define TENSORCOMPUTE_TESTS_TESTING_SANITIZERS_H_

namespace tensorcompute::testing {

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
inline constexpr bool kSanitized = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
inline constexpr bool kSanitized = true;
#else
inline constexpr bool kSanitized = false;
#endif
#else
inline constexpr bool kSanitized = false;
#endif

}  // namespace tensorcompute::testing

#endif  // TENSORCOMPUTE_TESTS_TESTING_SANITIZERS_H_
