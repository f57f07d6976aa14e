// ModelRuntime: what `loom generate`, `loom bench` and `loom serve` share — a
// model opened from a path, its tokenizer and chat template, a backend (CPU,
// or CUDA when built with it and a GPU is present), the Transformer and an
// Engine sized by the flags. Built once at start-up; start-up errors (bad
// path, model too large for memory) are loom::Error with one clear line.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <memory>
#include <string>

#include "backend/backend.h"
#include "dist/communicator.h"
#include "engine/engine.h"
#include "model/model_runner.h"
#include "model/transformer.h"
#include "model/model.h"
#include "model/pipeline_parallel.h"
#include "tokenizer/chat.h"

namespace loom::cli {

struct RuntimeOptions {
  std::string model;
  std::string device = "auto";  // auto | cpu | cuda
  int threads = 0;               // CPU threads; 0: all cores
  std::string kv_cache_memory = "1GiB";  // CPU KV pool budget
  double gpu_memory_utilization = 0.9;   // GPU: fraction of device memory loom may use
  std::string kv_cache_dtype = "auto";   // auto (f16 on CPU, bf16 on GPU) | f32 | f16 | bf16 | fp8
  std::string quantization = "none";     // none | fp8 (quantise bf16/fp16 weights to FP8 at load)
  int32_t block_size = 16;
  // 0: by device (build_runtime): 1,024 sequences and 16,384 tokens a step on
  // a GPU of 70 GiB or more, 256 and 2,048 elsewhere.
  int32_t max_num_seqs = 0;
  int32_t max_num_batched_tokens = 0;
  int32_t max_model_len = 0;
  bool enable_prefix_caching = true;
  std::string dtype = "auto";            // activations: auto (the backend's) or that same dtype
  std::string chat_template;             // a file, or the template itself; "": the model's
  bool enforce_eager = false;            // GPU: no CUDA graphs for decode steps
  int32_t max_cudagraph_capture_size = 1024;  // GPU: decode steps of more sequences run op by op
  bool no_async_scheduling =
      false;  // every step waits for its tokens (EngineConfig::async_scheduling)
  uint64_t seed = 0x10011;
  bool profile_steps = false;  // EngineConfig::profile_steps (set by the commands that report it)
  // Speculative decoding: --speculative-method ngram|draft, or vLLM's
  // --speculative-config JSON ({"method", "num_speculative_tokens",
  // "prompt_lookup_min", "prompt_lookup_max", "model"}).
  std::string speculative_method;
  int32_t num_speculative_tokens = 0;
  std::string speculative_model;
  int32_t ngram_min = 1;
  int32_t ngram_max = 4;
  int32_t speculative_max_batch = 16;
  std::string speculative_config;
  // Jump-forward of constraints' forced tokens (EngineConfig::jump_forward).
  bool no_jump_forward = false;
  int32_t jump_forward_tokens = 8;
  int tensor_parallel_size = 1;  // > 1: one rank per process, started by mpirun
  int pipeline_parallel_size = 1;  // stages; the job has tensor x pipeline ranks
  int pipeline_micro_batches = 0;  // per step; 0: one per stage
  // Tests only: the backend fails or stalls steps on command from this file
  // (backend/fault_injection_backend.h); set by `loom serve --test-fault-file`.
  std::string test_fault_file;
};

// Adds the model (positional or --model), --device, --threads,
// --kv-cache-memory, ... to `app`, with vLLM's spellings where it has them.
void add_runtime_options(CLI::App& app, RuntimeOptions& options);

// Parses "1GiB", "512MiB", "1e9", "2048" into bytes; throws loom::Error.
int64_t parse_bytes(const std::string& text);

// With --tensor-parallel-size T and --pipeline-parallel-size P (under mpirun
// -np T*P) only rank 0 returns from build_runtime; the other ranks run rank
// 0's forward steps on their shards until rank 0's runtime is destroyed, then
// exit the process (status 0).
struct ModelRuntime {
  std::unique_ptr<Communicator> comm;  // every rank of the job; null: one process (destroyed last)
  std::unique_ptr<Communicator> tp_comm;       // this stage's ranks when P > 1 and T > 1
  std::unique_ptr<PipelineParallel> pipeline;  // P > 1
  LoadedModel model;
  TokenizerBundle text;
  std::unique_ptr<Backend> backend;
  std::unique_ptr<Transformer> transformer;
  std::unique_ptr<ModelRunner> runner;  // broadcasts steps to the other ranks
  LoadedModel draft_model;              // --speculative-model (outlives the engine)
  std::unique_ptr<Transformer> draft;
  std::unique_ptr<Engine> engine;
  std::string device_name;
  DType kv_dtype = DType::F32;  // the KV cache's element type
};

// Logs one line per start-up stage (open, tokenizer, weights, KV cache); on a
// terminal the weights' progress (tensors, bytes) is redrawn in place. Limits
// left to the device (0) are filled in `options` as they are run.
std::unique_ptr<ModelRuntime> build_runtime(RuntimeOptions& options);

// Bytes of GPU memory in use on the runtime's GPU (0 on the CPU).
int64_t device_memory_used(const ModelRuntime& rt);

}  // namespace loom::cli
