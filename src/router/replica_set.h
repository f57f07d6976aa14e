// ReplicaSet: the replicas behind `loom router` and what the router knows of
// each (up or down, requests it has open there, load scraped from /metrics).
// Thread-safe (one mutex): HTTP workers pick and release, the health loop
// reports. Choosing a replica and counting the request in flight on it happen
// under the same lock, so a burst spreads by load instead of piling onto the
// replica that looked idle at the last scrape.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "router/routing_policy.h"

namespace loom::router {

// One replica. Identity is immutable; the state is guarded by the set's mutex.
struct Replica {
  Replica(std::string url, std::string host, std::string port)
      : url(std::move(url)), host(std::move(host)), port(std::move(port)) {}
  const std::string url;  // base URL, "http://host:port": its id for hashing and in metrics
  const std::string host;
  const std::string port;

 private:
  friend class ReplicaSet;
  bool up = true;  // optimistic until the first health check says otherwise
  int64_t in_flight = 0;
  double running = 0, waiting = 0, kv_usage = 0;
  std::string last_error;
};

// Load figures from one scrape of a replica's /metrics.
struct ReplicaStats {
  double running = 0;
  double waiting = 0;
  double kv_usage = 0;
};

struct ReplicaView {  // a copy, for metrics and tests
  std::string url;
  bool up = false;
  int64_t in_flight = 0;
  ReplicaStats stats;
  std::string last_error;
};

class ReplicaSet {
 public:
  explicit ReplicaSet(RoutingConfig config = {}) : config_(config) {}

  // Makes `urls` ("http://host:port", parsed with net::parse_url; throws
  // loom::Error on a bad one) the replica set. Replicas already known keep
  // their state and identity; returns the URLs that left the set.
  std::vector<std::string> assign(const std::vector<std::string>& urls);

  struct Pick {
    std::shared_ptr<Replica> replica;
    RouteKind kind = RouteKind::Balance;
  };
  // Chooses an up replica whose URL is not in `excluded` and counts one
  // request in flight on it (give it back with release). key: hash_key of
  // the routing prefix, or null; tie_break as in choose_replica. nullopt
  // when no replica qualifies.
  std::optional<Pick> pick(const uint64_t* key, uint64_t tie_break,
                           std::span<const std::string> excluded = {});
  void release(Replica& replica);
  // True when some up replica is not in `excluded`.
  bool any_up(std::span<const std::string> excluded = {}) const;

  // A connection to it failed: out of rotation until a health check passes.
  // Both return whether the replica was up before.
  bool mark_down(Replica& replica, std::string reason);
  // A health check's result: up with fresh stats (stats absent: keep the
  // last), or down with the reason.
  bool report_health(Replica& replica, bool up, std::optional<ReplicaStats> stats,
                     std::string reason = "");

  std::vector<std::shared_ptr<Replica>> replicas() const;
  std::vector<ReplicaView> view() const;

 private:
  RoutingConfig config_;
  mutable std::mutex mu_;
  std::vector<std::shared_ptr<Replica>> replicas_;
};

}  // namespace loom::router
