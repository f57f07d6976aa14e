// Routing policy of `loom router` (pure: no I/O, no clock, no locks): which
// replica serves a request, given each replica's load and the request's
// routing key. Requests sharing a prefix go to the same replica (rendezvous
// hashing of the key over the replicas' ids, so removing one replica moves
// only the keys it held) unless that replica is overloaded relative to the
// least loaded one; then, and for requests without a key, the least loaded
// replica wins. Hashes are fixed functions (FNV-1a + splitmix64), so every
// router process makes the same choice for the same replica set.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

namespace loom::router {

// One replica as the policy sees it.
struct ReplicaLoad {
  std::string id;         // stable identity (its base URL): the rendezvous hashing input
  bool eligible = true;   // up, and not already tried for this request
  int64_t in_flight = 0;  // requests the router has open on it now
  double running = 0;     // loom_num_requests_running at the last scrape
  double waiting = 0;     // loom_num_requests_waiting at the last scrape
  double kv_usage = 0;    // loom_kv_cache_usage_ratio at the last scrape, in [0, 1]
};

struct RoutingConfig {
  // The key's replica is overloaded when its load exceeds the least loaded
  // replica's by more than spill_margin requests AND by more than a factor
  // spill_ratio; or when its KV usage is at least kv_spill while some other
  // replica is below it.
  double spill_margin = 4;
  double spill_ratio = 1.5;
  double kv_spill = 0.95;
};

enum class RouteKind {
  Affinity,  // the key's replica (rendezvous winner)
  Spill,     // the key's replica was overloaded: least loaded instead
  Balance,   // no key: least loaded
};
const char* route_kind_name(RouteKind kind);  // "affinity", "spill", "balance"

struct RouteDecision {
  int index = -1;  // into the replicas given; -1: none eligible
  RouteKind kind = RouteKind::Balance;
};

// Requests the replica is working on: the router's own count is current, the
// scrape also sees traffic that did not come through this router.
double replica_load(const ReplicaLoad& r);

uint64_t hash_key(std::string_view bytes);  // FNV-1a 64, then splitmix64
// Rendezvous (highest random weight) score of `key` on the replica `id`.
uint64_t rendezvous_score(uint64_t key, std::string_view id);

// key: hash_key of the routing prefix, or none. tie_break: among equally
// loaded replicas the one with the highest rendezvous_score(tie_break, id)
// wins (callers pass the key when there is one, else a request counter).
RouteDecision choose_replica(std::span<const ReplicaLoad> replicas, const uint64_t* key,
                             uint64_t tie_break, const RoutingConfig& config);

}  // namespace loom::router
