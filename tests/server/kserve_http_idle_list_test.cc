// HttpIdleList (server/kserve/http_idle_list.h): the oldest idle member is evicted first, a
// member that left is not, a member evicted learns so when it leaves, and a member being
// destroyed is skipped.

#include <memory>
#include <vector>

#include "gtest/gtest.h"

#include "server/kserve/http_idle_list.h"

namespace tensorcompute::server::kserve {
namespace {

struct FakeSession final : HttpIdleList::Member {
  void Evict() override { ++evictions; }
  HttpIdleList::Node node;
  int evictions = 0;
};

std::vector<std::shared_ptr<FakeSession>> Sessions(int n) {
  std::vector<std::shared_ptr<FakeSession>> sessions;
  for (int i = 0; i < n; ++i) {
    sessions.push_back(std::make_shared<FakeSession>());
    sessions.back()->node.owner = sessions.back();
  }
  return sessions;
}

TEST(HttpIdleList, EvictsTheLongestIdleFirst) {
  HttpIdleList idle;
  auto s = Sessions(3);
  for (auto& session : s) idle.Enter(&session->node);
  EXPECT_EQ(idle.size(), 3);
  EXPECT_TRUE(idle.EvictOldest());
  EXPECT_EQ(s[0]->evictions, 1);
  EXPECT_EQ(s[1]->evictions, 0);
  EXPECT_EQ(idle.size(), 2);
}

TEST(HttpIdleList, AMemberThatLeftIsNotEvicted) {
  HttpIdleList idle;
  auto s = Sessions(3);
  for (auto& session : s) idle.Enter(&session->node);
  EXPECT_TRUE(idle.Leave(&s[0]->node));  // its request's first byte came
  idle.Enter(&s[0]->node);               // idle again, after its answer: now the newest
  EXPECT_TRUE(idle.EvictOldest());
  EXPECT_TRUE(idle.EvictOldest());
  EXPECT_EQ(s[0]->evictions, 0);
  EXPECT_EQ(s[1]->evictions, 1);
  EXPECT_EQ(s[2]->evictions, 1);
}

TEST(HttpIdleList, AnEvictedMemberLearnsItWhenItLeaves) {
  HttpIdleList idle;
  auto s = Sessions(1);
  idle.Enter(&s[0]->node);
  EXPECT_TRUE(idle.EvictOldest());
  EXPECT_FALSE(idle.Leave(&s[0]->node));
}

TEST(HttpIdleList, NoneIdleEvictsNothing) {
  HttpIdleList idle;
  EXPECT_FALSE(idle.EvictOldest());
  auto s = Sessions(1);
  idle.Enter(&s[0]->node);
  EXPECT_TRUE(idle.Leave(&s[0]->node));
  EXPECT_FALSE(idle.EvictOldest());
  EXPECT_EQ(s[0]->evictions, 0);
}

TEST(HttpIdleList, AMemberBeingDestroyedIsSkipped) {
  HttpIdleList idle;
  auto s = Sessions(2);
  idle.Enter(&s[0]->node);
  idle.Enter(&s[1]->node);
  // As if s[0]'s last reference were gone and its destructor waited to leave: its weak
  // owner no longer locks.
  HttpIdleList::Node& node = s[0]->node;
  node.owner.reset();
  EXPECT_TRUE(idle.EvictOldest());
  EXPECT_EQ(s[1]->evictions, 1);
  EXPECT_FALSE(idle.Leave(&node));
}

}  // namespace
}  // namespace tensorcompute::server::kserve
