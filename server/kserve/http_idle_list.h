// File: server/kserve/http_idle_list.h
//
// The KServe HTTP front end's idle connections, oldest first: those waiting for the first byte
// of a request (freshly accepted, in a TLS handshake, or kept alive between requests). When a
// connection arrives at http_max_connections, the front end closes the one idle longest to make
// room for it (nginx's rule for "reusable" keep-alive connections); a connection with a request
// in progress (header partly read, body being read, computing, writing) is never in the list,
// so it is never closed for a newcomer. Without this, connections that send nothing would hold
// every slot until their timeouts, and keep doing so: a denial of service for one socket each.
//
// A session embeds one Node and moves it in and out as it changes state; every transition is
// O(1) (an intrusive doubly-linked list). Whoever takes a node out first wins: a session that
// leaves after an eviction took it learns so (Leave returns false) and closes.
//
// Thread-safety: every method may be called from any thread (a mutex held for a few pointer
// moves); Member::Evict runs outside the lock. A Node outlives its membership: its owner's
// destructor calls Leave.

#ifndef TENSORCOMPUTE_SERVER_KSERVE_HTTP_IDLE_LIST_H_
#define TENSORCOMPUTE_SERVER_KSERVE_HTTP_IDLE_LIST_H_

#include <cstdint>
#include <memory>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace tensorcompute::server::kserve {

class HttpIdleList {
 public:
  // What an idle connection is to the list: something that can be told to close.
  class Member {
   public:
    // Called (off the list's lock, on the evicting thread) once the member was taken out:
    // close the connection, on its own strand.
    virtual void Evict() = 0;

   protected:
    ~Member() = default;
  };

  // A member's place in the list.
  struct Node {
    std::weak_ptr<Member> owner;  // set before the first Enter
   private:
    friend class HttpIdleList;
    Node* prev = nullptr;
    Node* next = nullptr;
    bool listed = false;
  };

  HttpIdleList() = default;
  HttpIdleList(const HttpIdleList&) = delete;
  HttpIdleList& operator=(const HttpIdleList&) = delete;

  // `node` becomes the newest idle member. REQUIRES: it is not listed.
  void Enter(Node* node);
  // Takes `node` out. Returns true if it was listed; false if it was not (an eviction took it:
  // the caller is being closed).
  bool Leave(Node* node);
  // Takes out the member idle longest and calls its Evict. Returns false, doing nothing, when
  // no member is idle (members being destroyed do not count).
  bool EvictOldest();

  int64_t size() const;

 private:
  void Unlink(Node* node) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  mutable absl::Mutex mu_;
  Node* oldest_ ABSL_GUARDED_BY(mu_) = nullptr;
  Node* newest_ ABSL_GUARDED_BY(mu_) = nullptr;
  int64_t size_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace tensorcompute::server::kserve

#endif  // TENSORCOMPUTE_SERVER_KSERVE_HTTP_IDLE_LIST_H_
