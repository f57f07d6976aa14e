// Replica state and the locked pick; see replica_set.h.
#include "router/replica_set.h"

#include <algorithm>

#include "net/url.h"

namespace loom::router {

std::vector<std::string> ReplicaSet::assign(const std::vector<std::string>& urls) {
  std::vector<std::shared_ptr<Replica>> next;
  for (const auto& url : urls) {
    const net::Url u = net::parse_url(url);
    const std::string id = u.host.find(':') != std::string::npos
                               ? "http://[" + u.host + "]:" + u.port
                               : "http://" + u.host + ":" + u.port;
    if (std::any_of(next.begin(), next.end(), [&](const auto& r) { return r->url == id; }))
      continue;
    next.push_back(std::make_shared<Replica>(id, u.host, u.port));
  }
  std::lock_guard<std::mutex> lk(mu_);
  std::vector<std::string> removed;
  for (const auto& old : replicas_) {
    auto same =
        std::find_if(next.begin(), next.end(), [&](const auto& r) { return r->url == old->url; });
    if (same == next.end())
      removed.push_back(old->url);
    else
      *same = old;  // keep its state (and the object in-flight requests hold)
  }
  replicas_ = std::move(next);
  return removed;
}

std::optional<ReplicaSet::Pick> ReplicaSet::pick(const uint64_t* key, uint64_t tie_break,
                                                 std::span<const std::string> excluded) {
  std::lock_guard<std::mutex> lk(mu_);
  std::vector<ReplicaLoad> loads;
  loads.reserve(replicas_.size());
  for (const auto& r : replicas_) {
    const bool skip = std::find(excluded.begin(), excluded.end(), r->url) != excluded.end();
    loads.push_back({r->url, r->up && !skip, r->in_flight, r->running, r->waiting, r->kv_usage});
  }
  const RouteDecision d = choose_replica(loads, key, tie_break, config_);
  if (d.index < 0) return std::nullopt;
  auto& chosen = replicas_[size_t(d.index)];
  ++chosen->in_flight;
  return Pick{chosen, d.kind};
}

void ReplicaSet::release(Replica& replica) {
  std::lock_guard<std::mutex> lk(mu_);
  if (replica.in_flight > 0) --replica.in_flight;
}

bool ReplicaSet::any_up(std::span<const std::string> excluded) const {
  std::lock_guard<std::mutex> lk(mu_);
  return std::any_of(replicas_.begin(), replicas_.end(), [&](const auto& r) {
    return r->up && std::find(excluded.begin(), excluded.end(), r->url) == excluded.end();
  });
}

bool ReplicaSet::mark_down(Replica& replica, std::string reason) {
  std::lock_guard<std::mutex> lk(mu_);
  const bool was_up = replica.up;
  replica.up = false;
  replica.last_error = std::move(reason);
  return was_up;
}

bool ReplicaSet::report_health(Replica& replica, bool up, std::optional<ReplicaStats> stats,
                               std::string reason) {
  std::lock_guard<std::mutex> lk(mu_);
  const bool was_up = replica.up;
  replica.up = up;
  replica.last_error = std::move(reason);
  if (stats) {
    replica.running = stats->running;
    replica.waiting = stats->waiting;
    replica.kv_usage = stats->kv_usage;
  }
  return was_up;
}

std::vector<std::shared_ptr<Replica>> ReplicaSet::replicas() const {
  std::lock_guard<std::mutex> lk(mu_);
  return replicas_;
}

std::vector<ReplicaView> ReplicaSet::view() const {
  std::lock_guard<std::mutex> lk(mu_);
  std::vector<ReplicaView> out;
  for (const auto& r : replicas_)
    out.push_back(
        {r->url, r->up, r->in_flight, {r->running, r->waiting, r->kv_usage}, r->last_error});
  return out;
}

}  // namespace loom::router
