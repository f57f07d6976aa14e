// Rendezvous hashing with load-based spill; see routing_policy.h.
#include "router/routing_policy.h"

#include <algorithm>

namespace loom::router {

namespace {

uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

uint64_t fnv1a(std::string_view bytes) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : bytes) {
    h ^= c;
    h *= 0x100000001b3ull;
  }
  return h;
}

// Replica overloaded compared with the least loaded eligible one?
bool overloaded(const ReplicaLoad& target, std::span<const ReplicaLoad> replicas,
                const RoutingConfig& config) {
  double min_load = replica_load(target), min_kv = target.kv_usage;
  for (const auto& r : replicas) {
    if (!r.eligible) continue;
    min_load = std::min(min_load, replica_load(r));
    min_kv = std::min(min_kv, r.kv_usage);
  }
  const double load = replica_load(target);
  if (load - min_load > config.spill_margin && load > config.spill_ratio * min_load) return true;
  return target.kv_usage >= config.kv_spill && min_kv < target.kv_usage;
}

}  // namespace

const char* route_kind_name(RouteKind kind) {
  switch (kind) {
    case RouteKind::Affinity:
      return "affinity";
    case RouteKind::Spill:
      return "spill";
    case RouteKind::Balance:
      return "balance";
  }
  return "balance";
}

double replica_load(const ReplicaLoad& r) {
  return std::max(double(r.in_flight), r.running + r.waiting);
}

uint64_t hash_key(std::string_view bytes) {
  return splitmix64(fnv1a(bytes));
}

uint64_t rendezvous_score(uint64_t key, std::string_view id) {
  return splitmix64(key ^ splitmix64(fnv1a(id)));
}

RouteDecision choose_replica(std::span<const ReplicaLoad> replicas, const uint64_t* key,
                             uint64_t tie_break, const RoutingConfig& config) {
  RouteDecision out;
  if (key) {
    uint64_t best = 0;
    for (size_t i = 0; i < replicas.size(); ++i) {
      if (!replicas[i].eligible) continue;
      const uint64_t s = rendezvous_score(*key, replicas[i].id);
      if (out.index < 0 || s > best) out.index = int(i), best = s;
    }
    if (out.index < 0) return out;
    if (!overloaded(replicas[size_t(out.index)], replicas, config)) {
      out.kind = RouteKind::Affinity;
      return out;
    }
    out.kind = RouteKind::Spill;
    tie_break = *key;  // a spilled prefix keeps going to the same second choice
  }
  // Least loaded; then lower KV usage; then the highest tie-break score.
  int best = -1;
  uint64_t best_score = 0;
  for (size_t i = 0; i < replicas.size(); ++i) {
    const auto& r = replicas[i];
    if (!r.eligible) continue;
    const uint64_t score = rendezvous_score(tie_break, r.id);
    if (best >= 0) {
      const auto& b = replicas[size_t(best)];
      const double lr = replica_load(r), lb = replica_load(b);
      if (lr > lb) continue;
      if (lr == lb) {
        if (r.kv_usage > b.kv_usage) continue;
        if (r.kv_usage == b.kv_usage && score <= best_score) continue;
      }
    }
    best = int(i);
    best_score = score;
  }
  out.index = best;
  if (!key) out.kind = RouteKind::Balance;
  return out;
}

}  // namespace loom::router
