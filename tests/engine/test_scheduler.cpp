// Scheduler: unit tests of admission, budgets, chunked prefill, prefix hits,
// preemption, deadlines, n > 1 forks and anti-starvation; then randomised
// simulations of >= 10,000 requests driving the scheduler as the engine does,
// with a fake KV cache that records which (token, position) each slot holds
// so every step checks that each sequence's context reads back exactly its own
// tokens (block tables, copy-on-write and prefix-cache hits all verified).
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <random>
#include <set>

#include "core/error.h"
#include "engine/scheduler.h"

namespace loom {
namespace {

using std::chrono::milliseconds;

Request make_request(int prompt_len, int max_tokens, int first_token = 1, int priority = 0) {
  Request r;
  for (int i = 0; i < prompt_len; ++i) r.prompt_ids.push_back(first_token + i);
  r.params.max_tokens = max_tokens;
  r.priority = priority;
  return r;
}

const ScheduledSeq* entry_for(const StepPlan& plan, SeqId id) {
  for (const auto& e : plan.seqs)
    if (e.seq == id) return &e;
  return nullptr;
}

Clock::time_point t0() { return Clock::time_point{}; }

// One engine-like step: complete the plan and append a token to every sampled sequence.
void run_step(Scheduler& s, const StepPlan& plan, int32_t token = 7) {
  s.complete_step(plan);
  for (const auto& e : plan.seqs)
    if (e.sample) s.append_token(e.seq, token);
}

TEST(Scheduler, PrefillThenDecode) {
  KvManager kv({.num_blocks = 16, .block_size = 4});
  Scheduler s({.max_num_batched_tokens = 64, .max_num_seqs = 4}, kv);
  SeqId id;
  ASSERT_EQ(s.add_request(1, make_request(10, 5), &id), AdmitStatus::Admitted);
  StepPlan p = s.schedule(t0());
  ASSERT_EQ(p.seqs.size(), 1u);
  EXPECT_EQ(p.seqs[0].start, 0);
  EXPECT_EQ(p.seqs[0].num_tokens, 10);
  EXPECT_TRUE(p.seqs[0].sample);
  EXPECT_EQ(s.get(id).blocks.num_blocks(), 3);
  run_step(s, p);
  p = s.schedule(t0());
  ASSERT_EQ(p.seqs.size(), 1u);
  EXPECT_EQ(p.seqs[0].start, 10);
  EXPECT_EQ(p.seqs[0].num_tokens, 1);
  EXPECT_EQ(p.num_decode_tokens, 1);
  run_step(s, p);
  s.finish(id);
  EXPECT_TRUE(s.idle());
  EXPECT_EQ(kv.num_used_blocks(), 0);
  s.check_invariants();
}

TEST(Scheduler, ChunkedPrefillWithinTokenBudgetDecodesFirst) {
  KvManager kv({.num_blocks = 64, .block_size = 4});
  Scheduler s({.max_num_batched_tokens = 8, .max_num_seqs = 4}, kv);
  SeqId a, b;
  ASSERT_EQ(s.add_request(1, make_request(3, 5), &a), AdmitStatus::Admitted);
  StepPlan p = s.schedule(t0());
  run_step(s, p);
  ASSERT_EQ(s.add_request(2, make_request(20, 5, 100), &b), AdmitStatus::Admitted);
  p = s.schedule(t0());
  ASSERT_EQ(p.seqs.size(), 2u);
  EXPECT_EQ(p.seqs[0].seq, a);  // the decode first
  EXPECT_EQ(p.seqs[1].seq, b);
  EXPECT_EQ(p.seqs[1].num_tokens, 7);  // the rest of the budget
  EXPECT_FALSE(p.seqs[1].sample);
  run_step(s, p);
  p = s.schedule(t0());
  EXPECT_EQ(entry_for(p, b)->start, 7);
  EXPECT_EQ(entry_for(p, b)->num_tokens, 7);
  run_step(s, p);
  p = s.schedule(t0());
  EXPECT_EQ(entry_for(p, b)->num_tokens, 6);
  EXPECT_TRUE(entry_for(p, b)->sample);
  EXPECT_EQ(p.num_tokens, 7);
  run_step(s, p);
  s.check_invariants();
}

TEST(Scheduler, NoChunkingAdmitsWholePromptsOnly) {
  KvManager kv({.num_blocks = 64, .block_size = 4});
  Scheduler s({.max_num_batched_tokens = 16, .max_num_seqs = 4, .enable_chunked_prefill = false},
              kv);
  EXPECT_EQ(s.add_request(1, make_request(10, 4)), AdmitStatus::Admitted);
  EXPECT_EQ(s.add_request(2, make_request(10, 4)), AdmitStatus::Admitted);
  EXPECT_EQ(s.add_request(3, make_request(20, 4)), AdmitStatus::TooLong);  // > budget
  StepPlan p = s.schedule(t0());
  ASSERT_EQ(p.seqs.size(), 1u);  // the second does not fit whole in what is left
  EXPECT_EQ(p.seqs[0].num_tokens, 10);
}

TEST(Scheduler, SequenceCapCountsForkSeats) {
  KvManager kv({.num_blocks = 64, .block_size = 4});
  Scheduler s({.max_num_batched_tokens = 64, .max_num_seqs = 3}, kv);
  Request r = make_request(4, 4);
  r.params.n = 2;
  ASSERT_EQ(s.add_request(1, r), AdmitStatus::Admitted);
  ASSERT_EQ(s.add_request(2, make_request(4, 4)), AdmitStatus::Admitted);
  ASSERT_EQ(s.add_request(3, make_request(4, 4)), AdmitStatus::Admitted);
  StepPlan p = s.schedule(t0());
  EXPECT_EQ(p.seqs.size(), 2u);  // 2 seats for request 1, 1 for request 2
  EXPECT_EQ(s.num_waiting(), 1u);
}

TEST(Scheduler, AdmissionBounds) {
  KvManager kv({.num_blocks = 8, .block_size = 4});  // 32 token slots
  Scheduler s({.max_num_batched_tokens = 64, .max_num_seqs = 4, .max_waiting_requests = 2,
               .max_waiting_tokens = 25},
              kv);
  EXPECT_EQ(s.add_request(1, make_request(30, 3)), AdmitStatus::TooLong);
  EXPECT_EQ(s.add_request(2, make_request(0, 3)), AdmitStatus::Invalid);
  EXPECT_EQ(s.add_request(3, make_request(20, 3)), AdmitStatus::Admitted);
  EXPECT_EQ(s.add_request(3, make_request(2, 3)), AdmitStatus::Invalid);  // duplicate id
  EXPECT_EQ(s.add_request(4, make_request(6, 3)), AdmitStatus::QueueFull);  // tokens
  EXPECT_EQ(s.add_request(5, make_request(5, 3)), AdmitStatus::Admitted);
  EXPECT_EQ(s.add_request(6, make_request(1, 3)), AdmitStatus::QueueFull);  // count
  StepPlan p = s.schedule(t0());  // both start: the queue empties
  EXPECT_EQ(s.add_request(6, make_request(1, 3)), AdmitStatus::Admitted);
  EXPECT_EQ(s.stats().rejected_requests, 5u);
}

TEST(Scheduler, PrefixHitSkipsCachedTokensButNotTheLast) {
  KvManager kv({.num_blocks = 32, .block_size = 4});
  Scheduler s({.max_num_batched_tokens = 64, .max_num_seqs = 4}, kv);
  SeqId a, b, c;
  ASSERT_EQ(s.add_request(1, make_request(12, 2), &a), AdmitStatus::Admitted);
  StepPlan p = s.schedule(t0());
  run_step(s, p);
  s.finish(a);
  // Same 12-token prompt: 2 of 3 blocks hit; the third is recomputed for the logits.
  ASSERT_EQ(s.add_request(2, make_request(12, 2), &b), AdmitStatus::Admitted);
  // Longer prompt with the same start: all 3 blocks hit.
  ASSERT_EQ(s.add_request(3, make_request(14, 2), &c), AdmitStatus::Admitted);
  p = s.schedule(t0());
  EXPECT_EQ(entry_for(p, b)->start, 8);
  EXPECT_EQ(entry_for(p, b)->num_tokens, 4);
  EXPECT_EQ(entry_for(p, c)->start, 12);
  EXPECT_EQ(entry_for(p, c)->num_tokens, 2);
  EXPECT_EQ(p.num_cached_tokens, 20);
  EXPECT_NEAR(kv.stats().prefix_hit_rate(), 20.0 / 38.0, 1e-12);
  run_step(s, p);
  s.check_invariants();
}

TEST(Scheduler, PreemptsLowestPriorityThenNewest) {
  KvManager kv({.num_blocks = 6, .block_size = 4});
  Scheduler s({.max_num_batched_tokens = 64, .max_num_seqs = 8, .starvation_steps = 0}, kv);
  SeqId hi, lo_old, lo_new;
  ASSERT_EQ(s.add_request(1, make_request(8, 16, 1, /*priority=*/1), &lo_old),
            AdmitStatus::Admitted);
  ASSERT_EQ(s.add_request(2, make_request(8, 16, 100, 1), &lo_new), AdmitStatus::Admitted);
  ASSERT_EQ(s.add_request(3, make_request(7, 16, 200, 0), &hi), AdmitStatus::Admitted);
  StepPlan p = s.schedule(t0());
  EXPECT_EQ(p.seqs.size(), 3u);  // 2 + 2 + 2 blocks
  run_step(s, p);
  // hi's decode fits in its block; lo_old and lo_new each need a fifth slot:
  // lo_old's allocation preempts lo_new (same priority, newer).
  p = s.schedule(t0());
  ASSERT_EQ(p.preempted.size(), 1u);
  EXPECT_EQ(p.preempted[0], lo_new);
  EXPECT_NE(entry_for(p, hi), nullptr);
  EXPECT_NE(entry_for(p, lo_old), nullptr);
  EXPECT_EQ(s.get(lo_new).status, SeqStatus::Waiting);
  EXPECT_TRUE(s.get(lo_new).blocks.empty());
  EXPECT_EQ(s.get(lo_new).num_tokens(), 9);  // keeps its generated token
  run_step(s, p);
  s.check_invariants();
  // Finishing lo_old lets lo_new resume by recompute of its 9 tokens. Its
  // freed blocks went to the LRU tail first, so lo_old's new block evicted
  // lo_new's second block and the prefix cache gives back only the first.
  s.finish(lo_old);
  p = s.schedule(t0());
  const ScheduledSeq* e = entry_for(p, lo_new);
  ASSERT_NE(e, nullptr);
  EXPECT_EQ(e->start, 4);
  EXPECT_EQ(e->num_tokens, 5);
  EXPECT_TRUE(e->sample);
  s.check_invariants();
}

TEST(Scheduler, DeadlinesExpire) {
  KvManager kv({.num_blocks = 16, .block_size = 4});
  Scheduler s({.max_num_batched_tokens = 64, .max_num_seqs = 4}, kv);
  Request r = make_request(4, 8);
  r.deadline = t0() + milliseconds(10);
  SeqId id;
  ASSERT_EQ(s.add_request(1, r, &id), AdmitStatus::Admitted);
  StepPlan p = s.schedule(t0());
  run_step(s, p);
  p = s.schedule(t0() + milliseconds(10));
  ASSERT_EQ(p.expired.size(), 1u);
  EXPECT_EQ(p.expired[0], id);
  EXPECT_TRUE(p.empty());
  EXPECT_TRUE(s.idle());
  EXPECT_EQ(kv.num_used_blocks(), 0);
}

TEST(Scheduler, ForkSharesPromptAndCopiesPartialBlock) {
  KvManager kv({.num_blocks = 16, .block_size = 4});
  Scheduler s({.max_num_batched_tokens = 64, .max_num_seqs = 4}, kv);
  Request r = make_request(6, 4);
  r.params.n = 3;
  SeqId parent;
  ASSERT_EQ(s.add_request(1, r, &parent), AdmitStatus::Admitted);
  StepPlan p = s.schedule(t0());
  s.complete_step(p);
  auto kids = s.fork(parent, 2);
  ASSERT_EQ(kids.size(), 2u);
  EXPECT_EQ(s.get(kids[0]).index, 1);
  EXPECT_EQ(s.get(kids[1]).index, 2);
  EXPECT_EQ(kv.num_used_blocks(), 2);
  s.append_token(parent, 50);
  s.append_token(kids[0], 51);
  s.append_token(kids[1], 52);
  p = s.schedule(t0());
  EXPECT_EQ(p.seqs.size(), 3u);
  EXPECT_EQ(p.copies.size(), 2u);  // the last writer keeps the original block
  EXPECT_EQ(kv.num_used_blocks(), 4);
  s.complete_step(p);
  s.check_invariants();
  EXPECT_EQ(s.abort_request(1).size(), 3u);
  EXPECT_TRUE(s.idle());
  EXPECT_EQ(kv.num_used_blocks(), 0);
}

// A low-priority request under a flood of high-priority ones: with the aging
// rule it runs within a bounded number of steps; without it, it waits until
// the flood stops.
TEST(Scheduler, AgingPreventsStarvation) {
  auto first_run_step = [](int64_t starvation_steps) {
    KvManager kv({.num_blocks = 8, .block_size = 4});
    Scheduler s({.max_num_batched_tokens = 64, .max_num_seqs = 2,
                 .starvation_steps = starvation_steps},
                kv);
    SeqId low;
    RequestId next = 1;
    EXPECT_EQ(s.add_request(next++, make_request(4, 4, 1, 0), nullptr), AdmitStatus::Admitted);
    EXPECT_EQ(s.add_request(next++, make_request(4, 4, 1, 0), nullptr), AdmitStatus::Admitted);
    EXPECT_EQ(s.add_request(next++, make_request(4, 4, 1, 5), &low), AdmitStatus::Admitted);
    for (int step = 1; step <= 400; ++step) {
      // Keep two high-priority requests waiting at all times.
      while (s.num_waiting() < 3 && step < 300)
        s.add_request(next++, make_request(4, 4, 1, 0), nullptr);
      StepPlan p = s.schedule(t0());
      if (entry_for(p, low) != nullptr) return step;
      s.complete_step(p);
      for (const auto& e : p.seqs) {
        if (!e.sample) continue;
        if (s.get(e.seq).num_output_tokens() >= 3) s.finish(e.seq);
        else s.append_token(e.seq, 9);
      }
    }
    return -1;
  };
  const int with_aging = first_run_step(20);
  const int without = first_run_step(0);
  EXPECT_GT(with_aging, 0);
  EXPECT_LE(with_aging, 20 + 4);
  EXPECT_GE(without, 300);  // only once the flood stopped
}

// ------------------------------------------------------------ simulation

struct SimConfig {
  int num_requests = 10000;
  int num_blocks = 64;
  int block_size = 16;
  SchedulerConfig sched;
  bool prefix_caching = true;
  double abort_prob = 0.01;      // per step: abort one random live request
  double deadline_prob = 0.0;    // share of requests with a deadline
  int max_arrivals_per_step = 4;
  int target_live = 40;          // keep about this many requests in flight
  bool sharegpt = false;         // lognormal lengths (else uniform small)
  double max_n_prob = 0.05;      // share of requests with n in [2, 4]
  int num_priorities = 3;
  int num_tenants = 1;           // > 1: tenant "t<k>" with weight k + 1, at random
  uint64_t seed = 1;
  bool check_every_step = true;
};

struct SimResult {
  uint64_t steps = 0;
  uint64_t preemptions = 0;
  uint64_t finished_requests = 0;
  uint64_t aborted_requests = 0;
  uint64_t expired_requests = 0;
  uint64_t rejected = 0;
  uint64_t max_wait_steps = 0;      // arrival to first scheduled
  uint64_t max_latency_steps = 0;   // arrival to completion
  double kv_waste = 0.0;            // over all steps: wasted slots / allocated slots
  double hit_rate = 0.0;
  uint64_t copies = 0;
};

SimResult simulate(const SimConfig& cfg) {
  std::mt19937_64 rng(cfg.seed);
  KvManager kv({.num_blocks = cfg.num_blocks, .block_size = cfg.block_size,
                .enable_prefix_caching = cfg.prefix_caching});
  Scheduler sched(cfg.sched, kv);
  const int32_t bs = cfg.block_size;
  // Fake KV: each slot holds (token << 32 | position) of what was written there.
  std::vector<int64_t> slots(size_t(cfg.num_blocks) * bs, -1);
  auto kv_value = [](int32_t token, int32_t pos) {
    return (int64_t(uint32_t(token)) << 32) | int64_t(uint32_t(pos));
  };

  std::vector<std::vector<int32_t>> prefixes;
  for (int i = 0; i < 6; ++i) {
    std::vector<int32_t> p(size_t(8 + rng() % 60));
    for (auto& x : p) x = int32_t(rng() % 1000);
    prefixes.push_back(p);
  }
  std::lognormal_distribution<double> prompt_ln(5.3, 0.9), output_ln(5.2, 0.8);
  auto clampi = [](double x, int lo, int hi) { return std::clamp(int(x), lo, hi); };

  struct Live {
    int n = 1;
    int done_seqs = 0;
    uint64_t arrival_step = 0;
    bool started = false;
    std::map<int32_t, int32_t> target;  // sequence index -> output length
    int32_t output_len = 0;
  };
  std::map<RequestId, Live> live;
  std::map<SeqId, int32_t> target_of;  // live sequence -> output length target
  std::map<SeqId, RequestId> req_of;
  SimResult res;
  int64_t wasted = 0, allocated = 0;
  RequestId next_id = 1;
  int submitted = 0;
  Clock::time_point now{};
  uint64_t step = 0;

  auto finish_seq = [&](SeqId id) {
    RequestId rid = sched.get(id).request_id;
    sched.finish(id);
    target_of.erase(id);
    req_of.erase(id);
    Live& l = live.at(rid);
    if (++l.done_seqs == l.n) {
      res.max_latency_steps = std::max(res.max_latency_steps, step - l.arrival_step);
      ++res.finished_requests;
      live.erase(rid);
    }
  };

  while (submitted < cfg.num_requests || !live.empty()) {
    ++step;
    now += milliseconds(1);
    // Arrivals.
    for (int a = 0; a < cfg.max_arrivals_per_step && submitted < cfg.num_requests &&
                    int(live.size()) < cfg.target_live;
         ++a) {
      Request r;
      int plen, olen;
      if (cfg.sharegpt) {
        plen = clampi(prompt_ln(rng), 4, 1024);
        olen = clampi(output_ln(rng), 4, 1024);
      } else {
        plen = 1 + int(rng() % 80);
        olen = 1 + int(rng() % 60);
      }
      if (!cfg.sharegpt && rng() % 2 == 0) r.prompt_ids = prefixes[rng() % prefixes.size()];
      while (int(r.prompt_ids.size()) < plen) r.prompt_ids.push_back(int32_t(rng() % 1000));
      r.params.max_tokens = olen + int(rng() % 3);  // the "eos" usually comes first
      r.params.n = (double(rng() % 10000) / 10000.0 < cfg.max_n_prob) ? 2 + int(rng() % 3) : 1;
      r.priority = int32_t(rng() % uint64_t(cfg.num_priorities));
      if (cfg.deadline_prob > 0 && double(rng() % 10000) / 10000.0 < cfg.deadline_prob)
        r.deadline = now + milliseconds(5 + rng() % 200);
      if (rng() % 8 == 0) r.cache_salt = "tenant-" + std::to_string(rng() % 3);
      if (cfg.num_tenants > 1) {
        const int k = int(rng() % uint64_t(cfg.num_tenants));
        r.tenant = fmt::format("t{}", k);
        r.tenant_weight = float(k + 1);
      }
      SeqId first;
      AdmitStatus st = sched.add_request(next_id, r, &first);
      ++submitted;
      if (st != AdmitStatus::Admitted) {
        ++res.rejected;
        ++next_id;
        continue;
      }
      Live l;
      l.n = r.params.n;
      l.arrival_step = step;
      l.output_len = olen;
      live[next_id] = l;
      target_of[first] = olen;
      req_of[first] = next_id;
      ++next_id;
    }
    // Random aborts (between steps, as the engine does).
    if (!live.empty() && double(rng() % 10000) / 10000.0 < cfg.abort_prob) {
      auto it = live.begin();
      std::advance(it, long(rng() % live.size()));
      for (SeqId id : sched.abort_request(it->first)) {
        target_of.erase(id);
        req_of.erase(id);
      }
      ++res.aborted_requests;
      live.erase(it);
    }

    StepPlan plan = sched.schedule(now);
    std::set<RequestId> expired_reqs;
    for (SeqId id : plan.expired) {
      expired_reqs.insert(req_of.at(id));
      target_of.erase(id);
      req_of.erase(id);
    }
    for (RequestId rid : expired_reqs) {
      bool any = false;
      for (const auto& [sid, r] : req_of) any = any || r == rid;
      if (!any) {  // siblings share the deadline: usually all went together
        ++res.expired_requests;
        live.erase(rid);
      }
    }

    // Validate the plan.
    EXPECT_LE(plan.num_tokens, cfg.sched.max_num_batched_tokens);
    EXPECT_LE(int(plan.seqs.size()), cfg.sched.max_num_seqs);
    std::set<SeqId> seen;
    for (const auto& e : plan.seqs) {
      const Sequence& s = sched.get(e.seq);
      EXPECT_TRUE(seen.insert(e.seq).second);
      EXPECT_EQ(s.status, SeqStatus::Running);
      EXPECT_EQ(e.start, s.num_computed);
      EXPECT_GT(e.num_tokens, 0);
      EXPECT_EQ(s.blocks.num_tokens(), e.start + e.num_tokens);
      EXPECT_EQ(e.sample, e.start + e.num_tokens == s.num_tokens());
      Live& l = live.at(s.request_id);
      if (!l.started) {
        l.started = true;
        res.max_wait_steps = std::max(res.max_wait_steps, step - l.arrival_step);
      }
    }
    for (SeqId id : plan.preempted) {
      EXPECT_EQ(sched.get(id).status, SeqStatus::Waiting);
      EXPECT_TRUE(sched.get(id).blocks.empty());
    }
    // "Run" the step on the fake KV: copies, writes, then read back every context.
    for (const auto& c : plan.copies) {
      std::copy_n(slots.begin() + size_t(c.src) * bs, bs, slots.begin() + size_t(c.dst) * bs);
      ++res.copies;
    }
    for (const auto& e : plan.seqs) {
      const Sequence& s = sched.get(e.seq);
      for (int32_t p = e.start; p < e.start + e.num_tokens; ++p)
        slots[size_t(s.blocks.blocks()[p / bs]) * bs + p % bs] = kv_value(s.tokens[p], p);
    }
    for (const auto& e : plan.seqs) {
      const Sequence& s = sched.get(e.seq);
      for (int32_t p = 0; p < e.start + e.num_tokens; ++p) {
        if (slots[size_t(s.blocks.blocks()[p / bs]) * bs + p % bs] != kv_value(s.tokens[p], p)) {
          ADD_FAILURE() << "sequence " << s.id << " reads wrong KV at position " << p
                        << " (step " << step << ")";
          return res;
        }
      }
    }
    {
      KvStats ks = kv.stats();
      wasted += ks.allocated_slots - ks.filled_slots;
      allocated += ks.allocated_slots;
    }
    sched.complete_step(plan);
    // Sample: fork n > 1 at the end of the prompt, then append or finish.
    for (const auto& e : plan.seqs) {
      if (!e.sample) continue;
      const Sequence* s = sched.find(e.seq);
      if (s == nullptr) continue;
      std::vector<SeqId> ids{e.seq};
      if (s->pending_forks > 0) {
        auto kids = sched.fork(e.seq, s->pending_forks);
        Live& l = live.at(s->request_id);
        for (SeqId k : kids) {
          target_of[k] = std::max<int32_t>(1, l.output_len - int32_t(rng() % 8));
          req_of[k] = s->request_id;
          ids.push_back(k);
        }
      }
      for (SeqId id : ids) {
        const Sequence& q = sched.get(id);
        const int32_t token = int32_t((q.request_id * 131 + uint64_t(q.index) * 17 +
                                       uint64_t(q.num_tokens())) % 1000);
        sched.append_token(id, token);
        if (q.num_output_tokens() >= target_of.at(id) || q.num_output_tokens() >= q.max_tokens)
          finish_seq(id);
      }
    }
    if (cfg.check_every_step || step % 97 == 0) {
      try {
        sched.check_invariants();
      } catch (const Error& err) {
        ADD_FAILURE() << "step " << step << ": " << err.what();
        return res;
      }
    }
    if (step > uint64_t(cfg.num_requests) * 2000) {
      ADD_FAILURE() << "simulation does not terminate";
      return res;
    }
  }
  sched.check_invariants();
  EXPECT_TRUE(sched.idle());
  EXPECT_EQ(kv.num_used_blocks(), 0);
  EXPECT_EQ(kv.stats().filled_slots, 0);
  res.steps = step;
  res.preemptions = sched.stats().preemptions;
  res.kv_waste = allocated == 0 ? 0.0 : double(wasted) / double(allocated);
  res.hit_rate = kv.stats().prefix_hit_rate();
  return res;
}

void print(const char* name, const SimResult& r) {
  std::printf(
      "[%s] steps=%llu finished=%llu aborted=%llu expired=%llu rejected=%llu preemptions=%llu "
      "copies=%llu max_wait_steps=%llu max_latency_steps=%llu kv_waste=%.2f%% hit_rate=%.1f%%\n",
      name, (unsigned long long)r.steps, (unsigned long long)r.finished_requests,
      (unsigned long long)r.aborted_requests, (unsigned long long)r.expired_requests,
      (unsigned long long)r.rejected, (unsigned long long)r.preemptions,
      (unsigned long long)r.copies, (unsigned long long)r.max_wait_steps,
      (unsigned long long)r.max_latency_steps, 100.0 * r.kv_waste, 100.0 * r.hit_rate);
}

void expect_accounted(const SimConfig& c, const SimResult& r) {
  EXPECT_EQ(r.finished_requests + r.aborted_requests + r.expired_requests + r.rejected,
            uint64_t(c.num_requests));
}

// Tiny pool: preemption is constant; aborts, n > 1, shared prefixes, salts.
SimConfig tiny_pool() {
  SimConfig c;
  c.num_requests = 10000;
  c.num_blocks = 24;
  c.block_size = 8;  // 192 slots; requests up to 140 tokens
  c.sched = {.max_num_batched_tokens = 64, .max_num_seqs = 16, .starvation_steps = 400};
  c.target_live = 12;
  return c;
}

TEST(SchedulerSimulation, TinyPoolForcedPreemption) {
  SimConfig c = tiny_pool();
  SimResult r = simulate(c);
  print("tiny pool", r);
  expect_accounted(c, r);
  EXPECT_GT(r.preemptions, 1000u);
  EXPECT_GT(r.copies, 0u);
  EXPECT_GT(r.hit_rate, 0.05);
  EXPECT_LE(r.max_wait_steps, 3u * 400u);
}

// Several weighted tenants with priorities, preemption, forks and aborts: the
// same invariants after every step, and waiting stays bounded.
TEST(SchedulerSimulation, WeightedTenantsTinyPool) {
  SimConfig c = tiny_pool();
  c.num_tenants = 4;
  c.seed = 7;
  SimResult r = simulate(c);
  print("tiny pool, 4 weighted tenants", r);
  expect_accounted(c, r);
  EXPECT_GT(r.preemptions, 1000u);
  EXPECT_LE(r.max_wait_steps, 3u * 400u);
}

TEST(SchedulerSimulation, ModeratePoolWithDeadlinesNoPrefixCaching) {
  SimConfig c;
  c.num_requests = 10000;
  c.num_blocks = 96;
  c.block_size = 16;
  c.prefix_caching = false;
  c.deadline_prob = 0.2;
  c.abort_prob = 0.02;
  c.sched = {.max_num_batched_tokens = 128, .max_num_seqs = 32, .starvation_steps = 300};
  SimResult r = simulate(c);
  print("moderate, deadlines, no prefix cache", r);
  expect_accounted(c, r);
  EXPECT_GT(r.expired_requests, 0u);
  EXPECT_EQ(r.hit_rate, 0.0);
  EXPECT_LE(r.max_wait_steps, 3u * 300u);
}

TEST(SchedulerSimulation, BlockSizeOneAndNoChunking) {
  SimConfig c;
  c.num_requests = 10000;
  c.num_blocks = 300;
  c.block_size = 1;
  c.sched = {.max_num_batched_tokens = 160, .max_num_seqs = 8, .enable_chunked_prefill = false,
             .starvation_steps = 200};
  c.check_every_step = false;
  SimResult r = simulate(c);
  print("block size 1, no chunking", r);
  expect_accounted(c, r);
  EXPECT_LE(r.max_wait_steps, 3u * 200u);
}

// KV waste under a ShareGPT-like length distribution at block size 16, with a
// pool large enough that the workload runs at ~64-128 concurrent requests.
TEST(SchedulerSimulation, KvWasteShareGpt) {
  SimConfig c;
  c.num_requests = 10000;
  c.num_blocks = 8192;
  c.block_size = 16;
  c.sharegpt = true;
  c.abort_prob = 0.0;
  c.max_n_prob = 0.0;
  c.target_live = 96;
  c.max_arrivals_per_step = 8;
  c.sched = {.max_num_batched_tokens = 2048, .max_num_seqs = 128};
  c.check_every_step = false;
  SimResult r = simulate(c);
  print("ShareGPT-like, block 16", r);
  std::printf("KV waste (ShareGPT-like lengths, block size 16): %.2f%%\n", 100.0 * r.kv_waste);
  expect_accounted(c, r);
  EXPECT_LT(r.kv_waste, 0.04);
}

}  // namespace
}  // namespace loom
