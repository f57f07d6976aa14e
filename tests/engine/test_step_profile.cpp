// The engine's step profile: every step counted once under its kind, phases
// within the turn's wall time, device spans resolved without waiting (marks
// read only once the device has passed them), gaps not counted across idle
// time, the same tokens with profiling on and off, and the JSON round trip
// and interval arithmetic that `loom bench serve --profile` relies on.
#include <gtest/gtest.h>

#include <deque>
#include <random>

#include "../common/device_sampling_cpu.h"
#include "backend/backend.h"
#include "core/error.h"
#include "engine/engine.h"
#include "engine/step_profiler.h"
#include "model/model.h"
#include "model/transformer.h"

namespace loom {
namespace {

// Marks on a pretend device that has passed marks [0, passed) only; each
// mark's device time is its index in seconds. No op may run.
class PretendDevice final : public Backend {
 public:
  int passed = 0;
  int made = 0;

  struct Mark final : TimingMark {
    int index = 0;
  };
  std::unique_ptr<TimingMark> mark_time() override {
    auto m = std::make_unique<Mark>();
    m->index = made++;
    return m;
  }
  std::optional<double> seconds_between(const TimingMark& from, const TimingMark& to) override {
    const int a = dynamic_cast<const Mark&>(from).index, b = dynamic_cast<const Mark&>(to).index;
    if (a >= passed || b >= passed) return std::nullopt;
    return double(b - a);
  }
  bool marks_on_device() const override { return true; }

  Device device() const override { return Device::Cpu; }
  std::string name() const override { return "pretend"; }
  Tensor alloc(DType, std::vector<int64_t>) override { LOOM_THROW("unused"); }
  Tensor prepare_weight(const Tensor&) override { LOOM_THROW("unused"); }
  void copy_from_host(Tensor&, const void*, size_t) override { LOOM_THROW("unused"); }
  void copy_to_host(void*, const Tensor&, size_t) override { LOOM_THROW("unused"); }
  void embedding(const Tensor&, const Tensor&, float, Tensor&) override { LOOM_THROW("unused"); }
  void matmul(const Tensor&, const Tensor&, const Tensor*, Tensor&) override {
    LOOM_THROW("unused");
  }
  void rms_norm(const Tensor&, const Tensor&, float, float, Tensor&,
                const LinearWeight* = nullptr) override {
    LOOM_THROW("unused");
  }
  void add_rms_norm(const Tensor&, Tensor&, const Tensor&, float, float, Tensor&,
                    const LinearWeight* = nullptr) override {
    LOOM_THROW("unused");
  }
  void add(Tensor&, const Tensor&) override { LOOM_THROW("unused"); }
  void rope(Tensor&, const Tensor&, const Tensor&, int, bool, float) override {
    LOOM_THROW("unused");
  }
  void gated_activation(const Tensor&, const Tensor&, GatedActivation, Tensor&) override {
    LOOM_THROW("unused");
  }
  void write_kv(const Tensor&, const Tensor&, KvLayerCache&, const AttentionMetadata&) override {
    LOOM_THROW("unused");
  }
  void paged_attention(const Tensor&, const KvLayerCache&, const AttentionMetadata&,
                       const AttentionParams&, Tensor&) override {
    LOOM_THROW("unused");
  }
  void gather_rows(const Tensor&, const std::vector<int32_t>&, Tensor&) override {
    LOOM_THROW("unused");
  }
  void softcap(Tensor&, float) override { LOOM_THROW("unused"); }
};

void run_turn(StepProfiler& p, StepKind kind, bool replayed) {
  p.begin_turn();
  p.set_kind(kind);
  p.set_replayed(replayed);
  p.mark_start();
  p.add(StepPhase::Launch, 0.001);
  p.mark_end();
  p.end_turn();
}

TEST(StepProfiler, DeviceSpansResolveOnlyOnceTheDevicePassedTheMarks) {
  PretendDevice dev;
  StepProfiler p(dev);
  EXPECT_TRUE(p.profile().device_clock);
  run_turn(p, StepKind::Prefill, false);  // marks 0, 1
  run_turn(p, StepKind::Decode, true);    // marks 2, 3
  EXPECT_EQ(p.profile().at(StepKind::Prefill, false).steps, 1u);
  EXPECT_EQ(p.profile().at(StepKind::Decode, true).steps, 1u);
  EXPECT_EQ(p.profile().total().device_steps,
            0u);                        // nothing passed: nothing read, nothing waited for
  dev.passed = 3;                       // the prefill's marks and the decode's start
  run_turn(p, StepKind::Decode, true);  // marks 4, 5
  const StepTimes& prefill = p.profile().at(StepKind::Prefill, false);
  EXPECT_EQ(prefill.device_steps, 1u);
  EXPECT_DOUBLE_EQ(prefill.device_span_s, 1.0);
  EXPECT_EQ(prefill.device_gaps, 0u);  // the first step has no previous one
  EXPECT_EQ(p.profile().at(StepKind::Decode, true).device_steps, 0u);  // its end not passed yet
  dev.passed = 6;
  p.idle();
  const StepTimes& decode = p.profile().at(StepKind::Decode, true);
  EXPECT_EQ(decode.steps, 2u);
  EXPECT_EQ(decode.device_steps, 2u);
  EXPECT_DOUBLE_EQ(decode.device_span_s, 2.0);  // 2 -> 3, 4 -> 5
  EXPECT_EQ(decode.device_gaps, 2u);            // 1 -> 2, 3 -> 4
  EXPECT_DOUBLE_EQ(decode.device_gap_s, 2.0);
  // After idle time the next step's gap is not counted.
  dev.passed = 8;
  run_turn(p, StepKind::Mixed, false);  // marks 6, 7
  const StepTimes& mixed = p.profile().at(StepKind::Mixed, false);
  EXPECT_EQ(mixed.device_steps, 1u);
  EXPECT_EQ(mixed.device_gaps, 0u);
  // A turn without marks (no step) is an idle turn.
  p.begin_turn();
  p.add(StepPhase::Wait, 0.5);
  p.end_turn();
  EXPECT_EQ(p.profile().idle_turns.steps, 1u);
  EXPECT_DOUBLE_EQ(p.profile().idle_turns.phase_s[size_t(StepPhase::Wait)], 0.5);
  EXPECT_EQ(p.profile().total().steps, 4u);
  EXPECT_DOUBLE_EQ(p.profile().total().phase_s[size_t(StepPhase::Launch)], 0.004);
}

TEST(StepProfile, JsonRoundTripAndIntervals) {
  StepProfile a;
  a.enabled = true;
  a.at(StepKind::Decode, true).steps = 10;
  a.at(StepKind::Decode, true).phase_s[size_t(StepPhase::Sample)] = 0.25;
  a.at(StepKind::Mixed, false).device_gap_s = 0.125;
  a.at(StepKind::Mixed, false).device_gaps = 3;
  a.callback_batches = 7;
  a.callback_s = 0.5;
  const StepProfile back = step_profile_from_json(to_json(a));
  EXPECT_EQ(to_json(back), to_json(a));
  StepProfile b = a;
  b.at(StepKind::Decode, true).steps = 25;
  b.at(StepKind::Decode, true).phase_s[size_t(StepPhase::Sample)] = 1.0;
  b.callback_batches = 9;
  const StepProfile d = b - a;
  EXPECT_EQ(d.at(StepKind::Decode, true).steps, 15u);
  EXPECT_DOUBLE_EQ(d.at(StepKind::Decode, true).phase_s[size_t(StepPhase::Sample)], 0.75);
  EXPECT_EQ(d.at(StepKind::Mixed, false).device_gaps, 0u);
  EXPECT_EQ(d.callback_batches, 2u);
  EXPECT_THROW(step_profile_from_json(nlohmann::json{{"enabled", true}}), Error);
}

TEST(StepProfile, EngineCountsEveryStepByKindAndKeepsItsTokens) {
  auto cpu = make_cpu_backend(2);
  testing_util::DeviceSamplingCpu be(*cpu);  // async steps on the CPU too
  LoadedModel model = open_model(std::string(LOOM_SOURCE_DIR) + "/tests/fixtures/models/qwen2");
  Transformer transformer(model.config, *model.weights, be);
  std::mt19937_64 rng(3);
  std::vector<Request> reqs;
  for (int i = 0; i < 12; ++i) {
    Request r;
    r.prompt_ids.resize(size_t(20 + i * 7));
    for (auto& t : r.prompt_ids) t = int32_t(rng() % uint64_t(model.config.vocab_size));
    r.params.max_tokens = 6 + i;
    r.params.temperature = 0.0f;
    reqs.push_back(r);
  }
  auto run = [&](bool profile) {
    EngineConfig c;
    c.num_kv_blocks = 256;
    c.scheduler.max_num_batched_tokens =
        64;  // prompts in chunks beside decodes: every kind of step
    c.scheduler.max_num_seqs = 16;
    c.profile_steps = profile;
    Engine engine(transformer, nullptr, c);
    auto res = engine.generate(reqs);
    return std::make_pair(std::move(res), engine.stats());
  };
  const auto [plain, plain_stats] = run(false);
  const auto [profiled, stats] = run(true);
  EXPECT_FALSE(plain_stats.profile.enabled);
  EXPECT_EQ(plain_stats.profile.total().steps, 0u);
  ASSERT_EQ(plain.size(), profiled.size());
  for (size_t i = 0; i < plain.size(); ++i)
    EXPECT_EQ(plain[i].sequences[0].output_ids, profiled[i].sequences[0].output_ids) << i;

  const StepProfile& p = stats.profile;
  ASSERT_TRUE(p.enabled);
  EXPECT_FALSE(p.device_clock);
  EXPECT_EQ(p.total().steps + p.idle_turns.steps, stats.steps);
  for (StepKind k : {StepKind::Decode, StepKind::Prefill, StepKind::Mixed}) {
    const StepTimes& t = p.at(k, false);  // the CPU backend records nothing
    EXPECT_GT(t.steps, 0u) << step_kind_name(k);
    EXPECT_EQ(p.at(k, true).steps, 0u);
    EXPECT_EQ(t.device_steps, t.steps) << step_kind_name(k);  // host marks: known at once
    EXPECT_GT(t.phase_s[size_t(StepPhase::Launch)], 0.0);
    double phases = 0;
    for (double s : t.phase_s) phases += s;
    EXPECT_LE(phases, t.wall_s * 1.0001 + 1e-6) << step_kind_name(k);
    EXPECT_LE(t.device_span_s, t.wall_s * 1.0001 + 1e-6) << step_kind_name(k);
  }
  EXPECT_GT(stats.async_steps, 0u);
  EXPECT_GT(p.total().phase_s[size_t(StepPhase::Wait)], 0.0);
}

}  // namespace
}  // namespace loom
