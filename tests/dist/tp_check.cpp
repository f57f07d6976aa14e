// dist_tp_check: run under mpirun by tests/dist/test_{tensor,pipeline}_parallel.cpp.
//   dist_tp_check compare [--pp P [--micro M]] MODEL...   for each fixture
//     model: rank 0 runs the same steps (two prompts prefilled together, then
//     16 greedy decode steps batched) through a single-rank Transformer and,
//     through ModelRunner, the one spread over every rank (P pipeline stages
//     of size/P tensor-parallel ranks each; P = 1 by default); prints one JSON
//     line per model {model, max_abs, max_rel, same_tokens, tokens_tp,
//     tokens_ref}. The prefill step also runs with some logit rows only, in
//     reverse order.
//   dist_tp_check die [--pp P] MODEL     rank 1 kills itself (SIGKILL) after 1 s
//   dist_tp_check stall [--pp P] MODEL   rank 1 stops itself (SIGSTOP) after 1 s
//     while rank 0 keeps stepping; the job must end non-zero, not hang.
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <thread>

#include "../common/paged_step.h"
#include "dist/communicator.h"
#include "model/model.h"
#include "model/model_runner.h"
#include "model/pipeline_parallel.h"

namespace loom {
namespace {

constexpr int64_t kBlockSize = 4;
constexpr int64_t kNumBlocks = 64;
constexpr int kDecodeSteps = 16;

struct Diff {
  double max_abs = 0, max_ref = 0;
};

void compare(Backend& be, const Tensor& a, const Tensor& b, Diff& d) {
  const auto ra = testing::logits_to_rows(be, a), rb = testing::logits_to_rows(be, b);
  if (ra.size() != rb.size()) throw std::runtime_error("row counts differ");
  for (size_t i = 0; i < ra.size(); ++i)
    for (size_t j = 0; j < ra[i].size(); ++j) {
      d.max_abs = std::max(d.max_abs, double(std::fabs(ra[i][j] - rb[i][j])));
      d.max_ref = std::max(d.max_ref, double(std::fabs(rb[i][j])));
    }
}

std::vector<int32_t> last_row_argmax(Backend& be, const Tensor& logits,
                                     const std::vector<int32_t>& rows) {
  const auto all = testing::logits_to_rows(be, logits);
  std::vector<int32_t> out;
  for (int32_t r : rows) out.push_back(testing::argmax(all[size_t(r)]));
  return out;
}

std::string join(const std::vector<std::vector<int32_t>>& seqs) {
  std::string s = "[";
  for (size_t i = 0; i < seqs.size(); ++i) {
    s += i ? ",[" : "[";
    for (size_t j = 0; j < seqs[i].size(); ++j) {
      if (j) s += ',';
      s += std::to_string(seqs[i][j]);
    }
    s += "]";
  }
  return s + "]";
}

// This rank's part of a model spread over `world` as layout.stages stages of
// layout.tp_size ranks (one stage: tensor parallelism over every rank).
struct Spread {
  Spread(const LoadedModel& m, Communicator& world, Backend& be, const PipelineLayout& layout) {
    PipelineStage stage;
    Communicator* tp = &world;
    if (layout.stages > 1) {
      pipeline = std::make_unique<PipelineParallel>(world, layout, m.config.num_layers);
      stage = pipeline->stage();
      tp = nullptr;
      if (layout.tp_size > 1) {
        tp_comm =
            make_mpi_communicator(layout.stage_of(world.rank()), layout.tp_rank_of(world.rank()));
        tp = tp_comm.get();
      }
    }
    model = std::make_unique<Transformer>(m.config, *m.weights, be, tp, stage);
    runner = std::make_unique<ModelRunner>(*model, &world, pipeline.get());
  }
  std::unique_ptr<Communicator> tp_comm;
  std::unique_ptr<PipelineParallel> pipeline;
  std::unique_ptr<Transformer> model;
  std::unique_ptr<ModelRunner> runner;
};

// Rank 0's side of "compare" for one model.
void compare_model(const std::string& name, Communicator& comm, Backend& be,
                   const PipelineLayout& layout) {
  LoadedModel m = open_model(testing::model_fixture_path(name));
  Spread spread(m, comm, be, layout);
  ModelRunner& runner = *spread.runner;
  if (comm.rank() != 0) {
    runner.serve_worker();
    return;
  }
  Transformer ref_model(m.config, *m.weights, be);
  KvCache ref_cache = ref_model.allocate_kv_cache(kNumBlocks, kBlockSize, DType::F32);
  KvCache tp_cache = runner.allocate_kv_cache(kNumBlocks, kBlockSize, DType::F32);

  const testing::ModelReference ref = testing::load_model_reference(name);
  std::vector<std::vector<int32_t>> prompts(
      ref.prompts.begin(), ref.prompts.begin() + std::min<size_t>(2, ref.prompts.size()));
  testing::ShuffledBlockPool pool(kNumBlocks, 7);
  std::vector<testing::PagedSequence> seqs(prompts.size());
  std::vector<std::vector<int32_t>> tokens_tp(prompts.size()), tokens_ref(prompts.size());
  Diff d;
  // Step 0: every prompt at once, logits for every row; then one token each.
  std::vector<std::pair<testing::PagedSequence*, std::vector<int32_t>>> parts;
  for (size_t i = 0; i < prompts.size(); ++i) parts.push_back({&seqs[i], prompts[i]});
  for (int step_no = 0; step_no <= kDecodeSteps; ++step_no) {
    StepInput step = testing::make_paged_step(parts, pool, kBlockSize);
    const Tensor ref_logits = ref_model.forward(step, ref_cache);
    const Tensor tp_logits = runner.forward(step, tp_cache);
    compare(be, tp_logits, ref_logits, d);
    if (step_no == 0 && step.attn.num_seqs > 1) {
      // Again (the same K/V are written again), with the last rows of the
      // sequences in reverse order, then the last sequence's only.
      for (const size_t keep : {size_t(step.attn.num_seqs), size_t(1)}) {
        StepInput some = step;
        some.logit_rows.clear();
        for (int32_t s = step.attn.num_seqs - 1; s >= 0 && some.logit_rows.size() < keep; --s)
          some.logit_rows.push_back(step.attn.query_start[size_t(s) + 1] - 1);
        const Tensor ref_some = ref_model.forward(some, ref_cache);
        compare(be, runner.forward(some, tp_cache), ref_some, d);
      }
    }
    // The last row of each sequence decides its next token.
    std::vector<int32_t> last;
    for (int32_t s = 0; s < step.attn.num_seqs; ++s)
      last.push_back(step.attn.query_start[size_t(s) + 1] - 1);
    const auto next_tp = last_row_argmax(be, tp_logits, last);
    const auto next_ref = last_row_argmax(be, ref_logits, last);
    parts.clear();
    for (size_t i = 0; i < prompts.size(); ++i) {
      tokens_tp[i].push_back(next_tp[i]);
      tokens_ref[i].push_back(next_ref[i]);
      parts.push_back({&seqs[i], {next_ref[i]}});
    }
  }
  runner.shutdown();
  std::printf(
      "{\"model\":\"%s\",\"max_abs\":%.3g,\"max_rel\":%.3g,\"same_tokens\":%s,\"tokens_tp\":%s,"
      "\"tokens_ref\":%s}\n",
      name.c_str(), d.max_abs, d.max_abs / std::max(d.max_ref, 1e-30),
      tokens_tp == tokens_ref ? "true" : "false", join(tokens_tp).c_str(),
      join(tokens_ref).c_str());
  std::fflush(stdout);
}

// "die" / "stall": rank 1 leaves the group after a second; rank 0 steps
// until the job is torn down (or gives up after 60 s: exit 0, the failure
// the test looks for).
int fail_rank(const std::string& mode, const std::string& name, Communicator& comm, Backend& be,
              const PipelineLayout& layout) {
  LoadedModel m = open_model(testing::model_fixture_path(name));
  Spread spread(m, comm, be, layout);
  ModelRunner& runner = *spread.runner;
  if (comm.rank() == 1) {
    std::thread([mode] {
      std::this_thread::sleep_for(std::chrono::seconds(1));
      std::fprintf(stderr, "dist_tp_check: rank 1 %s\n",
                   mode == "die" ? "kills itself" : "stops itself");
      raise(mode == "die" ? SIGKILL : SIGSTOP);
    }).detach();
  }
  if (comm.rank() != 0) {
    runner.serve_worker();
    return 0;
  }
  KvCache cache = runner.allocate_kv_cache(kNumBlocks, kBlockSize, DType::F32);
  testing::ShuffledBlockPool pool(kNumBlocks, 7);
  testing::PagedSequence seq;
  const StepInput step =
      testing::make_paged_step({{&seq, {1, 2, 3, 4, 5, 6, 7, 8}}}, pool, kBlockSize);
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (std::chrono::steady_clock::now() < until) runner.forward(step, cache);  // same rows again
  std::printf("dist_tp_check: rank 0 was never stopped\n");
  runner.shutdown();
  return 0;
}

}  // namespace
}  // namespace loom

int main(int argc, char** argv) {
  using namespace loom;
  if (argc < 3) {
    std::fprintf(stderr, "usage: dist_tp_check compare|die|stall [--pp P] [--micro M] MODEL...\n");
    return 2;
  }
  try {
    auto comm = make_mpi_communicator();
    auto backend = make_cpu_backend(1);
    const std::string mode = argv[1];
    PipelineLayout layout;
    int arg = 2;
    for (; arg + 1 < argc && argv[arg][0] == '-'; arg += 2) {
      const std::string flag = argv[arg];
      if (flag == "--pp")
        layout.stages = std::atoi(argv[arg + 1]);
      else if (flag == "--micro")
        layout.micro_batches = std::atoi(argv[arg + 1]);
      else
        throw std::runtime_error("unknown flag " + flag);
    }
    if (layout.stages < 1 || comm->size() % layout.stages != 0)
      throw std::runtime_error("--pp must divide the rank count");
    layout.tp_size = comm->size() / layout.stages;
    if (mode == "compare") {
      for (int i = arg; i < argc; ++i) compare_model(argv[i], *comm, *backend, layout);
      return 0;
    }
    if (arg >= argc) throw std::runtime_error("no model");
    return fail_rank(mode, argv[arg], *comm, *backend, layout);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "dist_tp_check: %s\n", e.what());
    return 1;
  }
}
