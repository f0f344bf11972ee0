#include "server/kserve/http_idle_list.h"

namespace tensorcompute::server::kserve {

void HttpIdleList::Enter(Node* node) {
  absl::MutexLock lock(&mu_);
  node->prev = newest_;
  node->next = nullptr;
  if (newest_ != nullptr) {
    newest_->next = node;
  } else {
    oldest_ = node;
  }
  newest_ = node;
  node->listed = true;
  ++size_;
}

bool HttpIdleList::Leave(Node* node) {
  absl::MutexLock lock(&mu_);
  if (!node->listed) return false;
  Unlink(node);
  return true;
}

bool HttpIdleList::EvictOldest() {
  std::shared_ptr<Member> victim;
  {
    absl::MutexLock lock(&mu_);
    while (victim == nullptr && oldest_ != nullptr) {
      Node* node = oldest_;
      Unlink(node);
      // Null: its owner is being destroyed (it frees its slot anyway) and waits on mu_ to
      // leave; the next one is tried.
      victim = node->owner.lock();
    }
  }
  if (victim == nullptr) return false;
  victim->Evict();
  return true;
}

int64_t HttpIdleList::size() const {
  absl::MutexLock lock(&mu_);
  return size_;
}

void HttpIdleList::Unlink(Node* node) {
  (node->prev != nullptr ? node->prev->next : oldest_) = node->next;
  (node->next != nullptr ? node->next->prev : newest_) = node->prev;
  node->prev = node->next = nullptr;
  node->listed = false;
  --size_;
}

}  // namespace tensorcompute::server::kserve
