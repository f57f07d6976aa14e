#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <set>
#include <sstream>
#include <string_view>
#include <thread>

#include <nlohmann/json.hpp>

#include "backend/fault_injection_backend.h"
#include "backend/registry/registry.h"
#include "core/error.h"
#include "core/host_memory.h"
#include "core/logging.h"
#include "core/thread_pool.h"
#include "engine/proposer_draft.h"
#include "model/loader/weights.h"
#include "runtime.h"
#include "tokenizer/tokenizer.h"

namespace loom::cli {

void add_runtime_options(CLI::App& app, RuntimeOptions& o) {
  app.add_option("model,--model", o.model, "a .gguf file or an HF model directory")->required();
  app.add_option("--device", o.device, "auto, cpu or cuda")
      ->check(CLI::IsMember({"auto", "cpu", "cuda"}));
  app.add_option("--threads", o.threads, "CPU threads (0: one per physical core)")
      ->check(CLI::Range(0, 1024));
  app.add_option("--kv-cache-memory", o.kv_cache_memory, "CPU KV cache budget, e.g. 2GiB");
  app.add_option("--gpu-memory-utilization", o.gpu_memory_utilization,
                 "fraction of GPU memory for weights, activations and KV cache")
      ->check(CLI::Range(0.05, 0.99));
  app.add_option("--kv-cache-dtype", o.kv_cache_dtype,
                 "auto (bf16 on a GPU, f16 on the CPU), f32, f16, bf16 or fp8 (E4M3 with the "
                 "checkpoint's per-layer scales, else 1.0)")
      ->check(CLI::IsMember({"auto", "f32", "f16", "bf16", "fp8"}));
  app.add_option("--quantization", o.quantization,
                 "none, or fp8: quantise bf16/fp16 weights to FP8 at load (per-channel scales, "
                 "dynamic per-token activations; CUDA)")
      ->check(CLI::IsMember({"none", "fp8"}));
  app.add_option("--block-size", o.block_size, "tokens per KV block")->check(CLI::Range(1, 1024));
  app.add_option("--max-num-seqs", o.max_num_seqs,
                 "sequences running at once (1,024 on a GPU of 70 GiB or more, else 256)")
      ->check(CLI::Range(1, 65536))
      ->default_str("by device");
  app.add_option("--max-num-batched-tokens", o.max_num_batched_tokens,
                 "tokens computed per step (16,384 on a GPU of 70 GiB or more, else 2,048)")
      ->check(CLI::Range(1, 1 << 20))
      ->default_str("by device");
  app.add_option("--max-model-len", o.max_model_len,
                 "prompt + output tokens limit (0: the model's)")
      ->check(CLI::Range(0, 1 << 24));
  app.add_flag("--enable-prefix-caching,!--no-enable-prefix-caching,!--no-prefix-caching",
               o.enable_prefix_caching, "automatic prefix caching");
  app.add_option("--dtype", o.dtype,
                 "activation dtype: auto (float32 on the CPU, bfloat16 on CUDA) or that same one; "
                 "weights keep their stored type")
      ->check(CLI::IsMember({"auto", "float32", "float", "bfloat16", "float16", "half"}));
  app.add_option("--chat-template", o.chat_template,
                 "chat template: a Jinja file, or the template text (default: the model's)");
  app.add_flag("--enforce-eager", o.enforce_eager,
               "GPU: run decode steps op by op (no CUDA graphs)");
  app.add_option("--max-cudagraph-capture-size", o.max_cudagraph_capture_size,
                 "GPU: the most sequences a recorded (CUDA graph) decode step holds; larger "
                 "steps run op by op")
      ->check(CLI::Range(1, 4096));
  app.add_flag("--no-async-scheduling", o.no_async_scheduling,
               "wait for each step's tokens before planning the next (no host/GPU overlap)");
  app.add_option("--speculative-method", o.speculative_method,
                 "speculative decoding: ngram (prompt lookup) or draft (--speculative-model)")
      ->check(CLI::IsMember({"ngram", "draft"}));
  app.add_option("--num-speculative-tokens", o.num_speculative_tokens,
                 "speculative decoding: the most tokens proposed per sequence and step (the policy picks 0..K "
                 "from measured step costs and acceptance)")
      ->check(CLI::Range(0, 16));
  app.add_option("--speculative-model", o.speculative_model,
                 "draft model for speculative decoding (implies --speculative-method draft)");
  app.add_option("--ngram-min", o.ngram_min, "n-gram speculation: shortest n-gram matched")
      ->check(CLI::Range(1, 64));
  app.add_option("--ngram-max", o.ngram_max, "n-gram speculation: longest n-gram matched")
      ->check(CLI::Range(1, 64));
  app.add_option("--speculative-max-batch", o.speculative_max_batch,
                 "speculate only while at most this many sequences decode (0: always)")
      ->check(CLI::Range(0, 65536));
  app.add_option("--speculative-config", o.speculative_config,
                 "vLLM's JSON form: {\"method\": \"ngram\", \"num_speculative_tokens\": 4, "
                 "\"prompt_lookup_min\": 1, \"prompt_lookup_max\": 4, \"model\": PATH}");
  app.add_flag(
      "--no-jump-forward", o.no_jump_forward,
      "structured output: do not propose the tokens a constraint forces (JSON keys, a tool "
      "call's opening) for verification in one pass; outputs are the same either way");
  app.add_option("--jump-forward-tokens", o.jump_forward_tokens,
                 "structured output: the most forced tokens proposed per sequence and step")
      ->check(CLI::Range(1, 16));
  app.add_option("--engine-seed", o.seed,
                 "seed of the engine-wide generator (requests without a seed)");
  app.add_option("--tensor-parallel-size", o.tensor_parallel_size,
                 "ranks each layer is split over (start with mpirun -np N)")
      ->check(CLI::Range(1, 4096));
  app.add_option("--pipeline-parallel-size", o.pipeline_parallel_size,
                 "stages the layers are split over (mpirun -np tensor x pipeline size)")
      ->check(CLI::Range(1, 4096));
  app.add_option("--pipeline-micro-batches", o.pipeline_micro_batches,
                 "micro-batches per step in the pipeline (0: one per stage)")
      ->check(CLI::Range(0, 4096));
}

int64_t parse_bytes(const std::string& text) {
  static const std::pair<const char*, double> kUnits[] = {
      {"KiB", 1024.0},
      {"MiB", 1024.0 * 1024},
      {"GiB", 1024.0 * 1024 * 1024},
      {"KB", 1e3},
      {"MB", 1e6},
      {"GB", 1e9},
      {"K", 1024.0},
      {"M", 1024.0 * 1024},
      {"G", 1024.0 * 1024 * 1024},
      {"B", 1.0},
  };
  char* end = nullptr;
  const double v = std::strtod(text.c_str(), &end);
  std::string unit = end ? std::string(end) : "";
  double mult = unit.empty() ? 1.0 : 0.0;
  for (const auto& [name, m] : kUnits)
    if (unit == name) mult = m;
  if (end == text.c_str() || mult == 0.0 || !(v > 0) || !std::isfinite(v * mult) || v * mult > 1e15)
    LOOM_THROW("'{}' is not a byte size (e.g. 512MiB, 2GiB, 1e9)", text);
  return static_cast<int64_t>(v * mult);
}

namespace {

DType parse_kv_dtype(const std::string& name, bool gpu) {
  if (name == "f32") return DType::F32;
  if (name == "f16") return DType::F16;
  if (name == "bf16") return DType::BF16;
  if (name == "fp8") return DType::F8_E4M3;
  // auto: bf16 on a GPU; f16 on the CPU (half the bytes of f32 for each
  // decode step's attention to read, twice the tokens in the same memory).
  return gpu ? DType::BF16 : DType::F16;
}

// The speculative-decoding flags, vLLM's --speculative-config JSON merged
// under them (a flag given on the command line wins).
SpeculativeConfig speculative_config(const RuntimeOptions& o) {
  std::string method = o.speculative_method, model = o.speculative_model;
  int32_t k = o.num_speculative_tokens, lo = o.ngram_min, hi = o.ngram_max;
  bool always = false;
  if (!o.speculative_config.empty()) {
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(o.speculative_config);
    } catch (const std::exception& e) {
      LOOM_THROW("--speculative-config is not JSON: {}", e.what());
    }
    if (!j.is_object()) LOOM_THROW("--speculative-config must be a JSON object");
    for (const auto& [key, value] : j.items()) {
      auto as_int = [&](int32_t lo_v, int32_t hi_v) {
        if (!value.is_number_integer() || value.get<int64_t>() < lo_v ||
            value.get<int64_t>() > hi_v)
          LOOM_THROW("--speculative-config: {} must be an integer in [{}, {}]", key, lo_v, hi_v);
        return value.get<int32_t>();
      };
      if (key == "method") {
        if (!value.is_string()) LOOM_THROW("--speculative-config: method must be a string");
        if (method.empty()) method = value.get<std::string>();
      } else if (key == "num_speculative_tokens") {
        const int32_t v = as_int(0, 16);
        if (k == 0) k = v;
      } else if (key == "prompt_lookup_min") {
        lo = as_int(1, 64);
      } else if (key == "prompt_lookup_max") {
        hi = as_int(1, 64);
      } else if (key == "model") {
        if (!value.is_string()) LOOM_THROW("--speculative-config: model must be a string");
        if (model.empty()) model = value.get<std::string>();
      } else if (key == "policy") {  // loom's: "adaptive" (the default) or "always" (benchmarks)
        if (!value.is_string() || (value != "adaptive" && value != "always"))
          LOOM_THROW("--speculative-config: policy must be \"adaptive\" or \"always\"");
        always = value == "always";
      } else {
        LOOM_THROW(
            "--speculative-config: unknown key '{}' (method, num_speculative_tokens, "
            "prompt_lookup_min, prompt_lookup_max, model, policy)",
            key);
      }
    }
  }
  SpeculativeConfig sc;
  if (method.empty() && !model.empty()) method = "draft";
  if (method.empty()) {
    if (k > 0) LOOM_THROW("--num-speculative-tokens needs --speculative-method (ngram or draft)");
    return sc;
  }
  if (method == "ngram") {
    if (!model.empty())
      LOOM_THROW("--speculative-model is for --speculative-method draft, not ngram");
    sc.method = SpeculativeConfig::Method::Ngram;
  } else if (method == "draft" || method == "draft_model") {
    if (model.empty()) LOOM_THROW("--speculative-method draft needs --speculative-model PATH");
    sc.method = SpeculativeConfig::Method::Draft;
    sc.draft_model = model;
  } else {
    LOOM_THROW("unknown speculative method '{}' (ngram or draft)", method);
  }
  if (k < 1) LOOM_THROW("speculative decoding needs --num-speculative-tokens >= 1");
  if (lo > hi) LOOM_THROW("--ngram-min ({}) must not exceed --ngram-max ({})", lo, hi);
  sc.num_tokens = k;
  sc.ngram_min = lo;
  sc.ngram_max = hi;
  sc.max_batch = o.speculative_max_batch;
  sc.always = always;
  return sc;
}

// Every rank of the job: MPI_COMM_WORLD, which must have exactly tp * pp ranks.
std::unique_ptr<Communicator> parallel_group(int tp, int pp) {
  const std::string flags =
      pp == 1   ? fmt::format("--tensor-parallel-size {}", tp)
      : tp == 1 ? fmt::format("--pipeline-parallel-size {}", pp)
                : fmt::format("--tensor-parallel-size {} x --pipeline-parallel-size {}", tp, pp);
  const int size = tp * pp;
  if (!launched_by_mpi())
    LOOM_THROW("{} needs one process per rank: start loom with mpirun -np {} (or srun)", flags,
               size);
  auto comm = make_mpi_communicator();
  if (comm->size() != size)
    LOOM_THROW("{} but the MPI job has {} ranks (mpirun -np {})", flags, comm->size(), size);
  return comm;
}

// The GPU of this rank on its node: the launcher's local rank.
int local_rank() {
  for (const char* var : {"OMPI_COMM_WORLD_LOCAL_RANK", "SLURM_LOCALID", "MPI_LOCALRANKID"})
    if (const char* v = std::getenv(var)) return std::atoi(v);
  return 0;
}

// The weights the Transformer takes from the model (its find() calls), for
// the load progress: on a terminal a line redrawn in place (tensors, MiB);
// in logs one line when loading starts and one when it ends.
class ProgressWeights : public WeightSource {
 public:
  explicit ProgressWeights(const WeightSource& inner)
      : inner_(inner), tty_(isatty(STDERR_FILENO) != 0), start_(std::chrono::steady_clock::now()) {
    for (const auto& name : inner_.names())
      if (auto t = inner_.find(name)) {
        ++total_tensors_;
        total_bytes_ += t->nbytes();
      }
    LOOM_LOG_INFO("loom: loading weights: {} tensors, {:.0f} MiB", total_tensors_,
                  mib(total_bytes_));
  }
  std::optional<Tensor> find(const std::string& name) const override {
    auto t = inner_.find(name);
    if (t) {
      std::lock_guard<std::mutex> lk(mu_);
      if (seen_.insert(name).second) {
        bytes_ += t->nbytes();
        draw(false);
      }
    }
    return t;
  }
  std::vector<std::string> names() const override { return inner_.names(); }
  // Ends the progress line and logs the time taken.
  void finish() const {
    std::lock_guard<std::mutex> lk(mu_);
    draw(true);
    LOOM_LOG_INFO("loom: weights loaded: {} tensors, {:.0f} MiB in {:.1f} s", seen_.size(),
                  mib(bytes_), seconds());
  }

 private:
  static double mib(int64_t bytes) { return double(bytes) / (1 << 20); }
  double seconds() const {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  }
  void draw(bool last) const {
    if (!tty_) return;
    const auto now = std::chrono::steady_clock::now();
    if (!last && now - last_draw_ < std::chrono::milliseconds(100)) return;
    last_draw_ = now;
    std::fprintf(stderr, "\rloading weights: %zu/%zu tensors, %.0f/%.0f MiB%s", seen_.size(),
                 total_tensors_, mib(bytes_), mib(total_bytes_), last ? "\n" : "");
  }

  const WeightSource& inner_;
  const bool tty_;
  const std::chrono::steady_clock::time_point start_;
  size_t total_tensors_ = 0;
  int64_t total_bytes_ = 0;
  mutable std::mutex mu_;
  mutable std::set<std::string> seen_;
  mutable int64_t bytes_ = 0;
  mutable std::chrono::steady_clock::time_point last_draw_{};
};

// --dtype: each backend computes in one activation dtype; asking for another
// is refused rather than ignored.
void check_dtype(const std::string& dtype, const Backend& backend) {
  if (dtype == "auto") return;
  const DType want = dtype == "bfloat16"                     ? DType::BF16
                     : dtype == "float16" || dtype == "half" ? DType::F16
                                                             : DType::F32;
  if (backend.activation_dtype() != want)
    LOOM_THROW("--dtype {}: the {} backend computes in {}; use --dtype auto", dtype, backend.name(),
               dtype_name(backend.activation_dtype()));
}

// --chat-template: a file's contents, or the argument itself when it reads
// as a template (vLLM's rule: it contains '{', '}' or a newline).
std::string chat_template_source(const std::string& arg) {
  std::error_code ec;
  if (std::filesystem::is_regular_file(arg, ec)) {
    std::ifstream in(arg, std::ios::binary);
    std::ostringstream ss;
    ss << in.rdbuf();
    if (!in) LOOM_THROW("--chat-template {}: cannot read the file", arg);
    return ss.str();
  }
  if (arg.find_first_of("{}\n") != std::string::npos) return arg;
  LOOM_THROW(
      "--chat-template {}: no such file (and not a template: it has no '{{', '}}' or newline)",
      arg);
}

void resolve_batch_limits(RuntimeOptions& o, const std::optional<Backend::DeviceMemory>& memory) {
  // As vLLM on H100-class cards: a large GPU runs many more sequences and
  // longer prefill chunks a step before its compute, not the host, is the
  // limit (a 0.5B model over HTTP: 512 sequences served at most ~2,750
  // requests a second on an H100, 1,024 ~3,000).
  constexpr int64_t kLargeGpu = int64_t{70} << 30;
  const bool large = memory && memory->total_bytes >= kLargeGpu;
  if (o.max_num_seqs <= 0) o.max_num_seqs = large ? 1024 : 256;
  if (o.max_num_batched_tokens <= 0) o.max_num_batched_tokens = large ? 16384 : 2048;
}

}  // namespace

std::unique_ptr<ModelRuntime> build_runtime(RuntimeOptions& o) {
  auto rt = std::make_unique<ModelRuntime>();
  const int tp = o.tensor_parallel_size, pp = o.pipeline_parallel_size;
  if (tp * pp > 1) {
    rt->comm = parallel_group(tp, pp);
    if (rt->comm->rank() != 0) set_log_level("warn");  // rank 0 speaks for the job
  }
  const bool worker = rt->comm && rt->comm->rank() != 0;
  const PipelineLayout layout{pp, tp, o.pipeline_micro_batches};
  // Every rank of one stage: its tensor-parallel group (a collective call).
  if (pp > 1 && tp > 1)
    rt->tp_comm = make_mpi_communicator(layout.stage_of(rt->comm->rank()),
                                        layout.tp_rank_of(rt->comm->rank()));
  LOOM_LOG_INFO("loom: opening {}", o.model);
  rt->model = open_model(o.model);
  // An HF directory without tokenizer.json (random-weight test models) still
  // runs on token ids; the engine then produces no text.
  const bool has_tokenizer =
      rt->model.format == ModelFormat::Gguf ||
      std::filesystem::exists(std::filesystem::path(o.model) / "tokenizer.json");
  if (has_tokenizer) rt->text = load_tokenizer_bundle(o.model, rt->model.gguf);
  if (!o.chat_template.empty()) {
    if (!rt->text.tokenizer) LOOM_THROW("--chat-template: {} has no tokenizer", o.model);
    const Tokenizer& tok = *rt->text.tokenizer;
    auto token = [&](const std::optional<int32_t>& id) {
      return id && *id >= 0 && *id < tok.vocab_size() ? std::string(tok.token_text(*id)) : "";
    };
    rt->text.chat.emplace(chat_template_source(o.chat_template), token(tok.special().bos),
                          token(tok.special().eos));
  }
  LOOM_LOG_INFO("loom: {} ({} layers, hidden {}), tokenizer: {}, chat template: {}",
                rt->model.config.arch, rt->model.config.num_layers, rt->model.config.hidden_size,
                rt->text.tokenizer ? "yes" : "no",
                !rt->text.chat            ? "none"
                : o.chat_template.empty() ? "the model's"
                                          : "--chat-template");

  const BackendKind kind = choose_backend(o.device);
  const bool use_cuda = kind == BackendKind::Cuda;
  if (kind == BackendKind::Cpu) ThreadPool::set_global_threads(o.threads);
  rt->backend =
      make_backend(kind, {.cpu_threads = o.threads, .gpu_device = rt->comm ? local_rank() : 0});
  rt->device_name = rt->backend->name();
  resolve_batch_limits(o, rt->backend->device_memory());
  check_dtype(o.dtype, *rt->backend);
  if (rt->comm) {
    rt->comm = make_device_communicator(*rt->backend, std::move(rt->comm), local_rank());
    if (rt->tp_comm)
      rt->tp_comm = make_device_communicator(*rt->backend, std::move(rt->tp_comm), local_rank());
  }
  if (o.quantization == "fp8") {
    QuantizationConfig& q = rt->model.config.quantization;
    if (!use_cuda) LOOM_THROW("--quantization fp8 needs the CUDA backend (--device cuda)");
    if (q.fp8)
      LOOM_LOG_INFO("loom: {} is already quantised ({}); --quantization fp8 changes nothing",
                    o.model, q.describe());
    else
      q = online_fp8_quantization();
  }
  if (rt->model.config.quantization.fp8)
    LOOM_LOG_INFO(
        "loom: linear layers {}{}", rt->model.config.quantization.describe(),
        use_cuda ? "" : " (CPU: FP8 weights dequantised to f32 at load, activations unquantised)");
  if (!o.test_fault_file.empty()) {
    LOOM_LOG_WARN("TEST ONLY: backend faults injected on command from {}", o.test_fault_file);
    rt->backend = make_fault_injecting_backend(std::move(rt->backend), o.test_fault_file);
  }
  PipelineStage stage;
  if (pp > 1) {
    rt->pipeline =
        std::make_unique<PipelineParallel>(*rt->comm, layout, rt->model.config.num_layers);
    stage = rt->pipeline->stage();
  }
  Communicator* tp_group = pp > 1 ? rt->tp_comm.get() : rt->comm.get();
  {
    const ProgressWeights weights(*rt->model.weights);
    rt->transformer =
        std::make_unique<Transformer>(rt->model.config, weights, *rt->backend, tp_group, stage);
    weights.finish();
  }
  if (!o.enforce_eager) {
    rt->transformer->enable_step_graphs(std::min(o.max_num_seqs, o.max_cudagraph_capture_size));
    // Other steps (prefill chunks, mixed steps) in recorded pieces: opt-in
    // with LOOM_PIECEWISE_STEPS=1 (on the H200 the 0.5B shape served 2-4%
    // fewer requests a second with it and the 8B offline run was 1% slower).
    const char* pieces = std::getenv("LOOM_PIECEWISE_STEPS");
    if (pieces && std::string_view(pieces) == "1" && rt->backend->supports_capture())
      rt->transformer->enable_piecewise_steps(o.max_num_batched_tokens);
  }
  rt->runner = std::make_unique<ModelRunner>(*rt->transformer, rt->comm.get(), rt->pipeline.get());
  if (worker) {
    // Rank 0 decides when the job ends (it drains requests first) and tells
    // the workers; the launcher's forwarded SIGINT/SIGTERM must not end them.
    std::signal(SIGINT, SIG_IGN);
    std::signal(SIGTERM, SIG_IGN);
    rt->runner->serve_worker();
    rt.reset();  // finalises MPI
    std::exit(0);
  }
  if (rt->comm)
    LOOM_LOG_INFO(
        "loom: {} ranks ({}): tensor parallel {} x pipeline parallel {} ({} micro-batches a step)",
        rt->comm->size(), rt->comm->name(), tp, pp,
        rt->pipeline ? rt->pipeline->layout().micro_batches : 1);

  EngineConfig ec;
  ec.block_size = o.block_size;
  ec.kv_dtype = parse_kv_dtype(o.kv_cache_dtype, use_cuda);
  rt->kv_dtype = ec.kv_dtype;
  ec.kv_cache_bytes = parse_bytes(o.kv_cache_memory);
  ec.enable_prefix_caching = o.enable_prefix_caching;
  ec.async_scheduling = !o.no_async_scheduling;
  ec.profile_steps = o.profile_steps;
  ec.seed = o.seed;
  ec.speculative = speculative_config(o);
  ec.jump_forward.enabled = !o.no_jump_forward;
  ec.jump_forward.max_tokens = o.jump_forward_tokens;
  if (ec.speculative.method == SpeculativeConfig::Method::Draft) {
    // The draft model: loaded beside the target on the same device, before
    // the KV budget is computed (its weights count as used memory; its cache
    // takes as many blocks as the target's from the same budget).
    if (rt->comm)
      LOOM_THROW("--speculative-model needs a single rank (no tensor or pipeline parallelism)");
    LOOM_LOG_INFO("loom: opening the draft model {}", ec.speculative.draft_model);
    rt->draft_model = open_model(ec.speculative.draft_model);
    {
      const ProgressWeights weights(*rt->draft_model.weights);
      rt->draft = std::make_unique<Transformer>(rt->draft_model.config, weights, *rt->backend);
      weights.finish();
    }
    // Its decode steps (one token per sequence) recorded too.
    if (!o.enforce_eager)
      rt->draft->enable_step_graphs(std::min(o.max_num_seqs, o.max_cudagraph_capture_size));
    ec.speculative.custom =
        make_draft_proposer(*rt->draft, rt->model.config.vocab_size, o.max_num_batched_tokens);
    LOOM_LOG_INFO("loom: draft model {} ({} layers, hidden {}), {} tokens proposed a step",
                  rt->draft_model.config.arch, rt->draft_model.config.num_layers,
                  rt->draft_model.config.hidden_size, ec.speculative.num_tokens);
  }
  ec.scheduler.max_num_seqs = o.max_num_seqs;
  ec.scheduler.max_num_batched_tokens = o.max_num_batched_tokens;
  ec.scheduler.max_model_len = o.max_model_len;
  ec.eos_ids = rt->model.generation.eos_token_ids;
  if (!ec.eos_ids.empty() && rt->text.tokenizer)
    for (int32_t id : rt->text.tokenizer->special().eos_ids)
      if (std::find(ec.eos_ids.begin(), ec.eos_ids.end(), id) == ec.eos_ids.end())
        ec.eos_ids.push_back(id);
  if (const auto memory = rt->backend->device_memory()) {
    // The KV pool takes what --gpu-memory-utilization leaves after the weights
    // (already resident) and an activation reserve sized by the step caps.
    const int64_t free_b = memory->free_bytes, total_b = memory->total_bytes;
    const ModelConfig& c = rt->model.config;
    const int64_t q_dim = c.num_heads * c.head_dim;
    const int64_t activations =
        2 * int64_t{o.max_num_batched_tokens} *
            (8 * c.hidden_size + 4 * c.intermediate_size + 3 * q_dim) +
        2 * 4 * int64_t{o.max_num_seqs} * c.vocab_size + (int64_t{1} << 30) +
        (c.quantization.fp8 ? 2 * int64_t{o.max_num_batched_tokens} * c.intermediate_size
                            : 0);  // FP8 inputs
    const int64_t used = static_cast<int64_t>(total_b - free_b);
    const int64_t budget =
        static_cast<int64_t>(o.gpu_memory_utilization * double(total_b)) - used - activations;
    const int64_t per_block = rt->runner->kv_cache_bytes_per_block(o.block_size, ec.kv_dtype);
    const int64_t min_blocks =
        (c.max_position > 0 ? std::min<int64_t>(c.max_position, 4096) : 4096) / o.block_size + 1;
    if (budget < per_block * min_blocks)
      LOOM_THROW(
          "not enough GPU memory: {:.1f} GiB in use after loading weights, {:.1f} GiB reserved for "
          "activations, {:.1f} GiB total at --gpu-memory-utilization {}; the KV cache needs at "
          "least "
          "{:.2f} GiB",
          used / 1073741824.0, activations / 1073741824.0, total_b / 1073741824.0,
          o.gpu_memory_utilization, per_block * min_blocks / 1073741824.0);
    ec.kv_cache_bytes = budget;
  } else if (const auto available = host_memory_available()) {
    // A budget past what the machine has left (the weights are resident by
    // now) would swap or meet the OOM killer: a clear error instead.
    if (ec.kv_cache_bytes > *available)
      LOOM_THROW(
          "not enough memory: --kv-cache-memory {} ({:.2f} GiB) is more than the {:.2f} GiB this "
          "machine has available after loading the weights (MemAvailable); lower --kv-cache-memory",
          o.kv_cache_memory, ec.kv_cache_bytes / 1073741824.0, *available / 1073741824.0);
  }
  rt->engine = std::make_unique<Engine>(*rt->runner, rt->text.tokenizer.get(), ec);
  LOOM_LOG_INFO(
      "loom: {} on {}, {} KV blocks of {} tokens ({}); up to {} sequences and {} tokens a step",
      o.model, rt->device_name, rt->engine->num_kv_blocks(), rt->engine->block_size(),
      dtype_name(ec.kv_dtype), o.max_num_seqs, o.max_num_batched_tokens);
  return rt;
}

int64_t device_memory_used(const ModelRuntime& rt) {
  if (!rt.backend) return 0;
  const auto memory = rt.backend->device_memory();
  return memory ? memory->total_bytes - memory->free_bytes : 0;
}

}  // namespace loom::cli
