// CudaBackend::paged_attention: checks the step's shapes and metadata, then
// launches the flash prefill kernel for sequences with several new tokens and
// the split-KV decode kernel for the rest (kernels/attention/).
#include <algorithm>
#include <bit>

#include "backend/cuda/cuda_backend_impl.h"
#include "backend/cuda/kernels/kernels.h"

namespace loom::cuda {
namespace {

bool aligned16(const void* p) {
  return (reinterpret_cast<uintptr_t>(p) & 15u) == 0;
}

int64_t ceil_div(int64_t a, int64_t b) {
  return (a + b - 1) / b;
}

}  // namespace

AttentionSplit attention_split_from_env() {
  AttentionSplit s;
  s.max_partition_keys =
      env_int("LOOM_ATTN_PARTITION_KEYS", 32, int64_t{1} << 30, s.max_partition_keys);
  s.blocks_per_sm = static_cast<int>(env_int("LOOM_ATTN_BLOCKS_PER_SM", 0, 64, s.blocks_per_sm));
  s.max_heads_per_block =
      static_cast<int>(env_int("LOOM_ATTN_HEADS_PER_BLOCK", 1, 8, s.max_heads_per_block));
  LOOM_CHECK(std::has_single_bit(static_cast<unsigned>(s.max_heads_per_block)),
             "LOOM_ATTN_HEADS_PER_BLOCK={} must be 1, 2, 4 or 8", s.max_heads_per_block);
  s.heads_first = env_int("LOOM_ATTN_HEADS_FIRST", 0, 1, s.heads_first ? 1 : 0) == 1;
  s.l2_prefetch = env_l2_prefetch("LOOM_ATTN_L2_PREFETCH", s.l2_prefetch);
  s.bf16_mma = static_cast<int>(env_int("LOOM_ATTN_BF16_MMA", 0, 2, s.bf16_mma));
  return s;
}

DecodePartitions decode_partitions(int64_t max_keys, int64_t items, int64_t concurrent,
                                   const AttentionSplit& split) {
  // A partition walks at least a tile or two of keys: shorter ones cost more
  // in set-up and merging than they gain in parallelism.
  constexpr int64_t kMinPartition = 32;
  // Splitting stops at about this many waves of blocks: past that the waves
  // are balanced anyway, and the partials (rows of head_dim floats per
  // partition) stay bounded whatever the token count (a long prefill on this
  // kernel is not split at all).
  constexpr int64_t kMaxWaves = 8;
  max_keys = std::max<int64_t>(max_keys, 1);
  items = std::max<int64_t>(items, 1);
  concurrent = std::max<int64_t>(concurrent, 1);
  int64_t keys = max_keys;
  // Fill the GPU: at most one wave of blocks (a second, nearly empty wave
  // would cost more than the blocks per SM it adds).
  if (items < concurrent) keys = ceil_div(max_keys, concurrent / items);
  keys = std::min(keys, split.max_partition_keys);  // long contexts: several balanced waves
  keys = std::max({keys, ceil_div(max_keys, ceil_div(kMaxWaves * concurrent, items)), kMinPartition,
                   ceil_div(max_keys, cuda::kMaxAttnPartitions)});
  keys = ceil_div(keys, 32) * 32;
  const int64_t count = ceil_div(max_keys, keys);
  if (count <= 1) return {max_keys, 1};
  return {keys, count};
}

int CudaBackend::attention_blocks_per_sm(int64_t head_dim, bool fp8, int heads_per_block,
                                         bool bf16_mma) {
  const int64_t key = (head_dim * 64 + (fp8 ? 32 : 0) + heads_per_block) * 2 + (bf16_mma ? 1 : 0);
  for (const auto& [k, blocks] : attn_occupancy_)
    if (k == key) return blocks;
  // The occupancy query is no stream work, but a recording thread may only
  // make it in relaxed capture mode.
  cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
  if (capturing_) LOOM_CUDA_CHECK(cudaThreadExchangeStreamCaptureMode(&mode));
  int blocks = cuda::paged_attention_blocks_per_sm(head_dim, fp8, heads_per_block, bf16_mma);
  if (capturing_) LOOM_CUDA_CHECK(cudaThreadExchangeStreamCaptureMode(&mode));
  cudaGetLastError();           // a failed query leaves no error behind for the next launch check
  if (blocks <= 0) blocks = 4;  // the query failed: the usual figure for these kernels
  attn_occupancy_.emplace_back(key, blocks);
  return blocks;
}

void CudaBackend::paged_attention(const Tensor& q, const KvLayerCache& cache,
                                  const AttentionMetadata& meta, const AttentionParams& params,
                                  Tensor& out) {
  const bool fp8 = check_cache(cache);
  check_cuda_tensor(q, DType::BF16, "attention q");
  check_cuda_tensor(out, DType::BF16, "attention out");
  LOOM_CHECK(q.ndim() == 3, "attention q must be [T, heads, head_dim], got {}",
             shape_str(q.shape()));
  const int64_t t = q.dim(0), heads = q.dim(1), hd = q.dim(2);
  const int64_t num_blocks = cache.k.dim(0), bs = cache.k.dim(1), kvh = cache.k.dim(2);
  LOOM_CHECK(cache.k.dim(3) == hd, "cache head_dim {} != q head_dim {}", cache.k.dim(3), hd);
  LOOM_CHECK(cuda::paged_attention_supports_head_dim(hd),
             "CUDA attention supports head_dim a multiple of 8 in [8, 256]; got {}", hd);
  LOOM_CHECK(kvh > 0 && heads % kvh == 0, "heads {} must be a multiple of kv heads {}", heads, kvh);
  LOOM_CHECK(out.numel() == q.numel() && out.dim(0) == t, "attention out {} must be like q {}",
             shape_str(out.shape()), shape_str(q.shape()));
  LOOM_CHECK(out.data() != q.data(), "attention cannot run in place");
  LOOM_CHECK(bs > 0, "block size must be > 0");
  LOOM_CHECK(aligned16(q.data()) && aligned16(out.data()) && aligned16(cache.k.data()) &&
                 aligned16(cache.v.data()),
             "attention tensors must be 16-byte aligned");
  LOOM_CHECK(t < (int64_t{1} << 31) && num_blocks * bs < (int64_t{1} << 31),
             "attention sizes overflow int32");
  if (t == 0) {
    check_attention_metadata(meta, t, bs, num_blocks);
    return;
  }
  const cuda::DeviceStepMetadata& dm = metadata_.get(meta, t, stream_);
  metadata_.validate(meta, t, bs, num_blocks);  // before any kernel reads through the block tables

  const int64_t group = heads / kvh;
  // Sequences with more than one new token go to the flash prefill kernel
  // (head sizes 64, 128, 256); the CUDA-core kernel below then covers only
  // the decode tokens (dm.decode_tokens). A step of decodes only launches the
  // CUDA-core kernel over all tokens, as recorded steps expect.
  cuda::PagedKvArgs kv_args;  // what both kernels read
  kv_args.q = q.data();
  kv_args.out = out.data();
  kv_args.k_cache = cache.k.data();
  kv_args.v_cache = cache.v.data();
  if (fp8) {
    kv_args.k_scale = cache.k_scale.data_as<const float>();
    kv_args.v_scale = cache.v_scale.data_as<const float>();
  }
  kv_args.query_start = dm.query_start;
  kv_args.context_lens = dm.context_lens;
  kv_args.block_tables = dm.block_tables;
  kv_args.max_blocks_per_seq = meta.max_blocks_per_seq;
  kv_args.num_heads = static_cast<int32_t>(heads);
  kv_args.num_kv_heads = static_cast<int32_t>(kvh);
  kv_args.head_dim = static_cast<int32_t>(hd);
  kv_args.block_size = static_cast<int32_t>(bs);
  kv_args.block_shift = (bs & (bs - 1)) == 0 ? std::countr_zero(static_cast<uint64_t>(bs)) : -1;
  kv_args.scale = params.scale;
  kv_args.softcap = params.logit_softcap;
  kv_args.sliding_window = params.sliding_window;
  const bool flash = flash_prefill_ && dm.has_prefill && cuda::flash_prefill_supports_head_dim(hd);
  if (flash) {
    LOOM_CHECK(t * heads < (int64_t{1} << 31), "attention sizes overflow int32");
    const cuda::PrefillTiles tiles =
        metadata_.prefill_tiles(meta, t, static_cast<int>(group), stream_);
    LOOM_CHECK(tiles.count * kvh < (int64_t{1} << 31), "too many flash attention tiles: {}",
               tiles.count);
    cuda::FlashPrefillArgs f;
    static_cast<cuda::PagedKvArgs&>(f) = kv_args;
    f.tiles = tiles.tiles;
    f.num_tiles = tiles.count;
    LOOM_CHECK(cuda::flash_prefill_bf16(f, stream_), "no flash attention kernel for head_dim {}",
               hd);
    check_launch();
    if (dm.num_decode_tokens == 0) return;
  }
  // Tokens the CUDA-core kernel covers (and whether a sequence is among them).
  const int64_t num_old = flash ? dm.num_decode_tokens : t;
  auto covered = [&](int s) {
    const int32_t n_new = meta.query_start[s + 1] - meta.query_start[s];
    return n_new > 0 && (!flash || n_new == 1);
  };

  // Query heads per block: the power of two covering the group, at most 8 (or
  // LOOM_ATTN_HEADS_PER_BLOCK).
  int g = 1;
  while (g < attn_split_.max_heads_per_block && g < group) g *= 2;
  const int64_t chunks = ceil_div(group, g);
  // bf16 caches: the tensor-core decode kernel (head sizes 64, 128, 256; see
  // AttentionSplit::bf16_mma) or the CUDA-core one. FP8 caches choose by
  // head size alone (cuda::paged_attention_bf16).
  const bool mma = !fp8 && (attn_split_.bf16_mma == 2 || (attn_split_.bf16_mma == 1 && group > 4));
  // Longest key range of any token (or the step's stated bound): sizes the partitions.
  int64_t max_keys = 1;
  if (meta.max_context_bound > 0) {
    max_keys = meta.max_context_bound;
    if (params.sliding_window > 0) max_keys = std::min<int64_t>(max_keys, params.sliding_window);
  }
  for (int s = 0; s < meta.num_seqs && meta.max_context_bound <= 0; ++s) {
    if (!covered(s)) continue;
    int64_t keys = meta.context_lens[s];
    if (params.sliding_window > 0) keys = std::min<int64_t>(keys, params.sliding_window);
    max_keys = std::max(max_keys, keys);
  }
  // Split the keys (see AttentionSplit): enough blocks to fill every SM, and
  // partitions of at most max_partition_keys keys at long contexts. The split
  // depends on the step's longest context and its token count, not on the
  // values: a recorded step (max_context_bound) keeps its launch shape.
  const int64_t items = num_old * kvh * chunks;
  const int64_t per_sm = attn_split_.blocks_per_sm > 0 ? attn_split_.blocks_per_sm
                                                       : attention_blocks_per_sm(hd, fp8, g, mma);
  const cuda::DecodePartitions parts = cuda::decode_partitions(
      max_keys, items, per_sm * static_cast<int64_t>(props_.multiProcessorCount), attn_split_);

  cuda::PagedAttentionArgs a;
  static_cast<cuda::PagedKvArgs&>(a) = kv_args;
  a.token_seq = dm.token_seq;
  a.token_index = flash ? dm.decode_tokens : nullptr;
  a.num_tokens = static_cast<int32_t>(num_old);
  a.heads_per_block = g;
  a.head_chunks = static_cast<int32_t>(chunks);
  a.heads_first = attn_split_.heads_first && num_old <= 65535;  // tokens along grid y
  a.l2_prefetch = attn_split_.l2_prefetch;
  a.bf16_mma = mma;
  a.partition_keys = static_cast<int32_t>(std::min<int64_t>(parts.keys, int64_t{1} << 30));
  a.num_partitions = static_cast<int32_t>(parts.count);
  if (a.num_partitions > 1) {
    const size_t rows = static_cast<size_t>(num_old * heads * a.num_partitions);
    auto* ws =
        static_cast<float*>(attn_partials_.ensure(rows * static_cast<size_t>(hd + 2) * 4, stream_));
    a.partial_acc = ws;
    a.partial_ml = ws + rows * static_cast<size_t>(hd);
    a.partition_counters = static_cast<int32_t*>(
        attn_counters_.ensure_zeroed(static_cast<size_t>(num_old * kvh * chunks) * 4, stream_));
  }
  LOOM_CHECK(cuda::paged_attention_bf16(a, stream_), "no attention kernel for head_dim {}", hd);
  check_launch();
}

}  // namespace loom::cuda
