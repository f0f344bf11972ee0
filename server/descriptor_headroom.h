// File: server/descriptor_headroom.h
//
// Whether the process may take one more file descriptor and still keep `reserve` free under its
// soft limit (RLIMIT_NOFILE): the rule by which grpc_acceptor.h closes a connection at once
// rather than hand it to gRPC.
//
// Counting the open descriptors (/proc/self/fd) costs a directory read of one entry per
// descriptor, too much for every connection of a flood: a count is reused for up to 100 ms, plus
// one for each descriptor admitted since, so the estimate only errs high (descriptors closed
// since are not seen) and is recounted at once, at most every 5 ms, when it says no.
//
// Thread-safety: none; one acceptor thread owns it.

#ifndef TENSORCOMPUTE_SERVER_DESCRIPTOR_HEADROOM_H_
#define TENSORCOMPUTE_SERVER_DESCRIPTOR_HEADROOM_H_

#include <cstdint>
#include <functional>

#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace tensorcompute::server {

// Descriptors open in this process now (entries of /proc/self/fd, less the one reading it);
// -1 if it cannot be read.
int64_t OpenDescriptors();
// The soft limit on open descriptors (RLIMIT_NOFILE); -1 for none.
int64_t DescriptorLimit();

class DescriptorHeadroom {
 public:
  struct Sources {
    std::function<int64_t()> open = OpenDescriptors;
    std::function<int64_t()> limit = DescriptorLimit;
    std::function<absl::Time()> now = absl::Now;
  };

  // With this process's count and limit.
  explicit DescriptorHeadroom(int64_t reserve);
  DescriptorHeadroom(int64_t reserve, Sources sources);

  // One more descriptor was just opened (a connection accepted): true if, with it, at least
  // `reserve` stay free, and it is counted; false if it should be closed (it is not counted).
  // Without a readable count or limit, always true.
  bool Admit();

 private:
  void Recount(absl::Time now);

  int64_t reserve_;
  Sources sources_;
  int64_t counted_ = 0;   // at the last count, less the descriptor being admitted then
  int64_t admitted_ = 0;  // admitted since
  int64_t limit_ = -1;
  absl::Time counted_at_ = absl::InfinitePast();
};

}  // namespace tensorcompute::server

#endif  // TENSORCOMPUTE_SERVER_DESCRIPTOR_HEADROOM_H_
