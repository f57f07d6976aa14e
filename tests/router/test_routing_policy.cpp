// Routing policy and replica set of `loom router`: prefix affinity by
// rendezvous hashing (stable, minimal movement), spill from an overloaded
// replica, balancing by load, routing keys from request bodies.
#include <gtest/gtest.h>

#include <map>
#include <set>
#include <string>
#include <vector>

#include "router/prefix_key.h"
#include "router/replica_set.h"
#include "router/routing_policy.h"

namespace loom::router {
namespace {

std::vector<ReplicaLoad> replicas(std::initializer_list<const char*> ids) {
  std::vector<ReplicaLoad> out;
  for (const char* id : ids) out.push_back({id});
  return out;
}

// The id chosen for `key` (by value) among `rs`.
std::string route(const std::vector<ReplicaLoad>& rs, const std::string& key,
                  RouteKind* kind = nullptr) {
  const uint64_t k = hash_key(key);
  const RouteDecision d = choose_replica(rs, &k, 0, RoutingConfig{});
  if (kind) *kind = d.kind;
  return d.index < 0 ? "" : rs[size_t(d.index)].id;
}

std::string key_n(int i) {
  return "You are a helpful assistant. Session " + std::to_string(i);
}

TEST(RoutingPolicy, AffinityIsStableAndIndependentOfOrder) {
  const auto a = replicas({"http://10.0.0.1:8000", "http://10.0.0.2:8000", "http://10.0.0.3:8000"});
  const auto b = replicas({"http://10.0.0.3:8000", "http://10.0.0.1:8000", "http://10.0.0.2:8000"});
  for (int i = 0; i < 200; ++i) {
    RouteKind kind;
    const std::string first = route(a, key_n(i), &kind);
    EXPECT_EQ(kind, RouteKind::Affinity);
    EXPECT_EQ(route(a, key_n(i)), first);
    EXPECT_EQ(route(b, key_n(i)), first) << "the choice must not depend on the list order";
  }
}

TEST(RoutingPolicy, KeysSpreadEvenly) {
  const auto rs = replicas({"http://a:8000", "http://b:8000", "http://c:8000", "http://d:8000"});
  std::map<std::string, int> count;
  const int n = 8000;
  for (int i = 0; i < n; ++i) ++count[route(rs, key_n(i))];
  ASSERT_EQ(count.size(), 4u);
  for (const auto& [id, c] : count) EXPECT_NEAR(c, n / 4, n / 4 * 0.1) << id;
}

TEST(RoutingPolicy, RemovingAReplicaMovesOnlyItsKeys) {
  const auto all = replicas({"http://a:8000", "http://b:8000", "http://c:8000"});
  auto without_b = all;
  without_b[1].eligible = false;  // down: as good as removed
  const auto removed = replicas({"http://a:8000", "http://c:8000"});
  std::map<std::string, int> moved_to;
  for (int i = 0; i < 3000; ++i) {
    const std::string before = route(all, key_n(i));
    const std::string down = route(without_b, key_n(i));
    EXPECT_EQ(down, route(removed, key_n(i))) << "down and removed route alike";
    if (before != "http://b:8000")
      EXPECT_EQ(down, before) << "a key moved without need";
    else
      ++moved_to[down];
  }
  // b's keys spread over both survivors rather than piling onto one.
  ASSERT_EQ(moved_to.size(), 2u);
  EXPECT_GT(moved_to["http://a:8000"], 300);
  EXPECT_GT(moved_to["http://c:8000"], 300);
}

TEST(RoutingPolicy, AddingAReplicaMovesKeysOnlyToIt) {
  const auto three = replicas({"http://a:8000", "http://b:8000", "http://c:8000"});
  const auto four = replicas({"http://a:8000", "http://b:8000", "http://c:8000", "http://d:8000"});
  int moved = 0;
  const int n = 4000;
  for (int i = 0; i < n; ++i) {
    const std::string before = route(three, key_n(i)), after = route(four, key_n(i));
    if (before != after) {
      EXPECT_EQ(after, "http://d:8000");
      ++moved;
    }
  }
  EXPECT_NEAR(moved, n / 4, n / 4 * 0.15);
}

TEST(RoutingPolicy, OverloadedReplicaSpillsToTheLeastLoaded) {
  auto rs = replicas({"http://a:8000", "http://b:8000", "http://c:8000"});
  const std::string key = key_n(7);
  const std::string home = route(rs, key);
  auto at = [&](const std::string& id) -> ReplicaLoad& {
    for (auto& r : rs)
      if (r.id == id) return r;
    throw std::runtime_error("no " + id);
  };
  // A little busier than the others: stays (prefix cache beats balance).
  at(home).in_flight = 4;
  RouteKind kind;
  EXPECT_EQ(route(rs, key, &kind), home);
  EXPECT_EQ(kind, RouteKind::Affinity);
  // Over the margin and the ratio: spills to the least loaded replica.
  at(home).in_flight = 9;
  for (auto& r : rs)
    if (r.id != home) r.in_flight = 2;
  std::string other;
  for (auto& r : rs)
    if (r.id != home && other.empty()) other = r.id, r.in_flight = 1;
  EXPECT_EQ(route(rs, key, &kind), other);
  EXPECT_EQ(kind, RouteKind::Spill);
  // Scraped queue depth counts as load too (traffic from elsewhere).
  at(home).in_flight = 0;
  at(home).running = 4;
  at(home).waiting = 6;
  EXPECT_EQ(route(rs, key, &kind), other);
  EXPECT_EQ(kind, RouteKind::Spill);
  // Not over the ratio when everyone is busy: stays.
  for (auto& r : rs) r.in_flight = 8, r.running = r.waiting = 0;
  at(home).in_flight = 11;
  EXPECT_EQ(route(rs, key, &kind), home);
  EXPECT_EQ(kind, RouteKind::Affinity);
}

TEST(RoutingPolicy, SpillOfOnePrefixGoesToOneSecondChoice) {
  auto rs = replicas({"http://a:8000", "http://b:8000", "http://c:8000", "http://d:8000"});
  const std::string key = key_n(11);
  const std::string home = route(rs, key);
  for (auto& r : rs)
    if (r.id == home) r.in_flight = 20;
  std::set<std::string> seconds;
  for (int i = 0; i < 10; ++i) seconds.insert(route(rs, key));
  EXPECT_EQ(seconds.size(), 1u);
  EXPECT_NE(*seconds.begin(), home);
}

TEST(RoutingPolicy, FullKvCacheSpills) {
  auto rs = replicas({"http://a:8000", "http://b:8000"});
  const std::string key = key_n(3);
  const std::string home = route(rs, key);
  for (auto& r : rs) r.kv_usage = r.id == home ? 0.97 : 0.40;
  RouteKind kind;
  EXPECT_NE(route(rs, key, &kind), home);
  EXPECT_EQ(kind, RouteKind::Spill);
  for (auto& r : rs) r.kv_usage = 0.97;  // everyone full: no point moving
  EXPECT_EQ(route(rs, key, &kind), home);
  EXPECT_EQ(kind, RouteKind::Affinity);
}

TEST(RoutingPolicy, WithoutAKeyTheLeastLoadedWins) {
  auto rs = replicas({"http://a:8000", "http://b:8000", "http://c:8000"});
  rs[0].in_flight = 3;
  rs[1].running = 1;
  rs[2].in_flight = 2;
  RouteDecision d = choose_replica(rs, nullptr, 0, {});
  EXPECT_EQ(d.index, 1);
  EXPECT_EQ(d.kind, RouteKind::Balance);
  // Ties: lower KV usage, then spread by the tie-break.
  rs[0].in_flight = rs[1].in_flight = rs[2].in_flight = 0;
  rs[1].running = 0;
  rs[0].kv_usage = 0.5;
  std::set<int> chosen;
  for (uint64_t t = 0; t < 64; ++t) chosen.insert(choose_replica(rs, nullptr, t, {}).index);
  EXPECT_EQ(chosen, (std::set<int>{1, 2}));
}

TEST(RoutingPolicy, IneligibleReplicasAreNeverChosen) {
  auto rs = replicas({"http://a:8000", "http://b:8000"});
  rs[0].eligible = rs[1].eligible = false;
  const uint64_t k = hash_key("x");
  EXPECT_EQ(choose_replica(rs, &k, 0, {}).index, -1);
  EXPECT_EQ(choose_replica(rs, nullptr, 0, {}).index, -1);
  rs[1].eligible = true;
  rs[1].in_flight = 1000;
  EXPECT_EQ(choose_replica(rs, &k, 0, {}).index, 1);
  EXPECT_EQ(choose_replica(rs, &k, 0, {}).kind, RouteKind::Affinity);
}

TEST(ReplicaSet, PicksCountInFlightSoABurstSpreads) {
  ReplicaSet set;
  set.assign({"http://a:8000", "http://b:8000", "http://c:8000"});
  std::vector<ReplicaSet::Pick> picks;
  for (int i = 0; i < 9; ++i) picks.push_back(*set.pick(nullptr, uint64_t(i)));
  for (const auto& v : set.view()) EXPECT_EQ(v.in_flight, 3) << v.url;
  for (auto& p : picks) set.release(*p.replica);
  for (const auto& v : set.view()) EXPECT_EQ(v.in_flight, 0) << v.url;
}

TEST(ReplicaSet, ABurstOfOnePrefixSpillsOnceTheReplicaIsOverloaded) {
  ReplicaSet set;
  set.assign({"http://a:8000", "http://b:8000"});
  const uint64_t k = hash_key(key_n(5));
  std::map<std::string, int> where;
  std::map<RouteKind, int> kinds;
  for (int i = 0; i < 12; ++i) {
    auto p = *set.pick(&k, 0);
    ++where[p.replica->url];
    ++kinds[p.kind];
  }
  // margin 4, ratio 1.5: the home replica takes the first 5, then the other
  // one is sent every request that would put the home replica 5 ahead.
  EXPECT_EQ(kinds[RouteKind::Affinity], 5 + 3);
  EXPECT_EQ(kinds[RouteKind::Spill], 4);
  EXPECT_EQ(where.size(), 2u);
}

TEST(ReplicaSet, DownAndExcludedReplicasAreSkipped) {
  ReplicaSet set;
  set.assign({"http://a:8000", "http://b:8000/"});
  auto rs = set.replicas();
  ASSERT_EQ(rs.size(), 2u);
  EXPECT_EQ(rs[1]->url, "http://b:8000");
  EXPECT_TRUE(set.mark_down(*rs[0], "connect: refused"));
  EXPECT_FALSE(set.mark_down(*rs[0], "again"));
  for (int i = 0; i < 5; ++i) {
    auto p = set.pick(nullptr, uint64_t(i));
    ASSERT_TRUE(p);
    EXPECT_EQ(p->replica->url, "http://b:8000");
    set.release(*p->replica);
  }
  const std::vector<std::string> tried = {"http://b:8000"};
  EXPECT_FALSE(set.pick(nullptr, 0, tried));
  EXPECT_FALSE(set.any_up(tried));
  EXPECT_FALSE(set.report_health(*rs[0], true, ReplicaStats{2, 3, 0.5}));
  EXPECT_TRUE(set.any_up(tried));
  const auto view = set.view();
  EXPECT_TRUE(view[0].up);
  EXPECT_EQ(view[0].stats.waiting, 3);
  EXPECT_EQ(view[0].stats.kv_usage, 0.5);
}

TEST(ReplicaSet, AssignKeepsStateOfReplicasThatStay) {
  ReplicaSet set;
  set.assign({"http://10.0.0.1:8000", "http://10.0.0.2:8000"});
  auto held = set.pick(nullptr, 0);  // a request open on one of them
  ASSERT_TRUE(held);
  const std::string kept = held->replica->url;
  const std::string gone =
      kept == "http://10.0.0.1:8000" ? "http://10.0.0.2:8000" : "http://10.0.0.1:8000";
  const auto removed = set.assign({kept, "http://10.0.0.3:8000"});
  EXPECT_EQ(removed, std::vector<std::string>{gone});
  const auto view = set.view();
  ASSERT_EQ(view.size(), 2u);
  EXPECT_EQ(view[0].url, kept);
  EXPECT_EQ(view[0].in_flight, 1);
  set.release(*held->replica);
  EXPECT_EQ(set.view()[0].in_flight, 0);
  EXPECT_THROW(set.assign({"ftp://x"}), std::exception);
}

TEST(RoutingPrefix, CompletionsPrompts) {
  using nlohmann::ordered_json;
  auto prefix = [](const ordered_json& body, size_t n = 8) {
    return routing_prefix("/v1/completions", body, n);
  };
  EXPECT_EQ(prefix({{"prompt", "Hello, world and more"}}), "Hello, w");
  EXPECT_EQ(prefix({{"prompt", "Hi"}}), "Hi");
  EXPECT_EQ(prefix({{"prompt", {"first prompt", "second"}}}), "first pr");
  EXPECT_EQ(prefix({{"prompt", {1, 2, 3}}}, 2), "ids:1,2,");
  EXPECT_EQ(prefix({{"prompt", {{5, 6, 7}, {8}}}}, 8), "ids:5,6,7,");
  EXPECT_EQ(prefix({{"prompt", {1, "x"}}}), std::nullopt);
  EXPECT_EQ(prefix({{"prompt", ordered_json::array()}}), std::nullopt);
  EXPECT_EQ(prefix({{"model", "m"}}), std::nullopt);
  EXPECT_EQ(prefix(ordered_json::array()), std::nullopt);
  // Same first n bytes, same key; a different start, another key.
  EXPECT_EQ(prefix({{"prompt", "Hello, wonderful"}}), prefix({{"prompt", "Hello, world"}}));
}

TEST(RoutingPrefix, ChatMessagesRendered) {
  using nlohmann::ordered_json;
  const ordered_json body = {
      {"messages",
       {{{"role", "system"}, {"content", "Be brief."}},
        {{"role", "user"},
         {"content",
          {{{"type", "text"}, {"text", "Hi "}}, {{"type", "text"}, {"text", "there"}}}}}}}};
  EXPECT_EQ(routing_prefix("/v1/chat/completions", body, 1000),
            "system\nBe brief.\nuser\nHi there\n");
  EXPECT_EQ(routing_prefix("/v1/chat/completions", body, 10), "system\nBe ");
  // The system prompt decides when n covers only it.
  ordered_json other = body;
  other["messages"][1]["content"] = "something else entirely";
  EXPECT_EQ(routing_prefix("/v1/chat/completions", other, 16),
            routing_prefix("/v1/chat/completions", body, 16));
  EXPECT_EQ(routing_prefix("/v1/chat/completions", ordered_json{{"messages", "x"}}, 10),
            std::nullopt);
  EXPECT_EQ(routing_prefix("/v1/models", body, 10), std::nullopt);
}

}  // namespace
}  // namespace loom::router
