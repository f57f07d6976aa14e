// dist_tp_check: run under mpirun by tests/dist/test_tensor_parallel.cpp.
//   dist_tp_check compare MODEL...   for each fixture model: rank 0 runs the
//     same steps (two prompts prefilled together, then 16 greedy decode steps
//     batched) through a single-rank Transformer and, through ModelRunner,
//     the tensor-parallel one spread over every rank; prints one JSON line per
//     model {model, max_abs, max_rel, same_tokens, tokens_tp, tokens_ref}.
//   dist_tp_check die MODEL          rank 1 kills itself (SIGKILL) after 1 s
//   dist_tp_check stall MODEL        rank 1 stops itself (SIGSTOP) after 1 s
//     while rank 0 keeps stepping; the job must end non-zero, not hang.
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <thread>

#include "../common/paged_step.h"
#include "dist/communicator.h"
#include "model/model.h"
#include "model/model_runner.h"

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

// Rank 0's side of "compare" for one model.
void compare_model(const std::string& name, Communicator& comm, Backend& be) {
  LoadedModel m = open_model(testing::model_fixture_path(name));
  Transformer tp_model(m.config, *m.weights, be, &comm);
  ModelRunner runner(tp_model, &comm);
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
int fail_rank(const std::string& mode, const std::string& name, Communicator& comm, Backend& be) {
  LoadedModel m = open_model(testing::model_fixture_path(name));
  Transformer model(m.config, *m.weights, be, &comm);
  ModelRunner runner(model, &comm);
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
    std::fprintf(stderr, "usage: dist_tp_check compare|die|stall MODEL...\n");
    return 2;
  }
  try {
    auto comm = make_mpi_communicator();
    auto backend = make_cpu_backend(1);
    const std::string mode = argv[1];
    if (mode == "compare") {
      for (int i = 2; i < argc; ++i) compare_model(argv[i], *comm, *backend);
      return 0;
    }
    return fail_rank(mode, argv[2], *comm, *backend);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "dist_tp_check: %s\n", e.what());
    return 1;
  }
}
