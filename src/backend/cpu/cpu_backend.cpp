// CpuBackend: the Backend interface on the host, f32 activations. Memory is
// plain 64-byte-aligned host memory; weights are used where they lie (possibly
// mmapped), except Q8_0 / Q5_0 matrices, copied to their interleaved types. Ops run on the
// process-wide ThreadPool, or on a pool of the requested size when the global one already has
// another size.
#include <algorithm>
#include <cstring>
#include <memory>

#include "backend/backend.h"
#include "backend/cpu/cpu_ops.h"
#include "backend/cpu/gemm.h"
#include "backend/cpu/isa.h"
#include "backend/cpu/op_profile.h"
#include "core/error.h"

namespace loom {
namespace {

class CpuBackend final : public Backend {
 public:
  explicit CpuBackend(int num_threads) {
    // The process-wide settings from the environment, read here on the
    // caller's thread so that a malformed value throws now, not in a worker.
    (void)cpu::active_isa();
    (void)cpu::row_prefetch();
    if (num_threads > 0) ThreadPool::set_global_threads(num_threads);
    pool_ = &ThreadPool::global();
    if (num_threads > 0 && pool_->num_threads() != num_threads) {
      own_pool_ = std::make_unique<ThreadPool>(num_threads);
      pool_ = own_pool_.get();
    }
  }

  Device device() const override { return Device::Cpu; }
  std::string name() const override {
    return fmt::format("cpu ({}, {} threads)", cpu::isa_name(cpu::active_isa()),
                       pool_->num_threads());
  }

  // Zeroed like Tensor::cpu. A large buffer (the KV cache) is zeroed by the
  // pool's threads, 2 MiB apiece: its first touch, where the kernel backs and
  // clears the pages, is most of a server's start-up on a fresh machine.
  Tensor alloc(DType dtype, std::vector<int64_t> shape) override {
    Tensor t = Tensor::cpu_uninitialized(dtype, std::move(shape));
    const auto bytes = static_cast<size_t>((t.nbytes() + 63) / 64 * 64);
    auto* p = static_cast<uint8_t*>(t.data());
    constexpr size_t kPiece = size_t{2} << 20;
    if (bytes < 8 * kPiece || pool_->num_threads() < 2) {
      if (p) std::memset(p, 0, bytes);
      return t;
    }
    const auto pieces = static_cast<int64_t>((bytes + kPiece - 1) / kPiece);
    pool_->parallel_for(pieces, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) {
        const size_t at = static_cast<size_t>(i) * kPiece;
        std::memset(p + at, 0, std::min(kPiece, bytes - at));
      }
    });
    return t;
  }
  // Greedy rows of host f32 logits scanned on the pool, a row per task.
  void argmax_rows(const Tensor& logits, std::vector<int32_t>& out) override {
    if (logits.device() != Device::Cpu || logits.dtype() != DType::F32 || logits.ndim() < 1 ||
        logits.cols() <= 0 || logits.cols() > INT32_MAX) {
      Backend::argmax_rows(logits, out);  // its errors and conversions
      return;
    }
    const int64_t rows = logits.rows(), vocab = logits.cols();
    out.assign(static_cast<size_t>(rows), 0);
    const float* values = logits.data_as<const float>();
    cpu::parallel_rows(*pool_, rows, vocab, [&](int64_t b, int64_t e) {
      for (int64_t r = b; r < e; ++r)
        out[static_cast<size_t>(r)] = argmax_f32(values + r * vocab, vocab);
    });
  }
  Tensor prepare_weight(const Tensor& host_weight) override {
    LOOM_CHECK(host_weight.device() == Device::Cpu, "cpu backend weights must be in host memory");
    return cpu::interleave_weight(*pool_, host_weight);
  }
  void copy_from_host(Tensor& dst, const void* src, size_t bytes) override {
    LOOM_CHECK(bytes <= static_cast<size_t>(dst.nbytes()), "copy of {} bytes into a {}-byte tensor",
               bytes, dst.nbytes());
    if (bytes) std::memcpy(dst.data(), src, bytes);
  }
  void copy_to_host(void* dst, const Tensor& src, size_t bytes) override {
    LOOM_CHECK(bytes <= static_cast<size_t>(src.nbytes()), "copy of {} bytes from a {}-byte tensor",
               bytes, src.nbytes());
    if (bytes) std::memcpy(dst, src.data(), bytes);
  }

  void embedding(const Tensor& table, const Tensor& ids, float scale, Tensor& out) override {
    auto t = profile_.time(
        [&] { return fmt::format("embedding {} T={}", dtype_name(table.dtype()), ids.numel()); });
    cpu::embedding(*pool_, table, ids, scale, out);
  }
  void matmul(const Tensor& x, const Tensor& w, const Tensor* bias, Tensor& out) override {
    auto t = profile_.time([&] {
      return fmt::format("matmul {} M={} N={} K={}", dtype_name(w.dtype()), x.rows(), w.dim(0),
                         w.dim(1));
    });
    cpu::matmul(*pool_, x, w, bias, out);
  }
  void linear_many(const Tensor& x, const std::vector<LinearJob>& jobs) override {
    for (const LinearJob& j : jobs)
      if (j.w->fp8()) return Backend::linear_many(x, jobs);  // dequantised FP8: as linear runs it
    auto t = profile_.time([&] {
      std::string what = fmt::format("matmul x{} M={}", jobs.size(), x.rows());
      for (const LinearJob& j : jobs)
        what += fmt::format(" {}[{}]", dtype_name(j.w->weight.dtype()), j.w->weight.dim(0));
      return what;
    });
    cpu::matmul_many(*pool_, x, jobs);
  }
  void rms_norm(const Tensor& x, const Tensor& w, float eps, float weight_offset, Tensor& out,
                const LinearWeight* = nullptr) override {
    auto t = profile_.time([&] { return fmt::format("rms_norm {}", shape_str(x.shape())); });
    cpu::rms_norm(*pool_, x, w, eps, weight_offset, out);
  }
  void add_rms_norm(const Tensor& x, Tensor& residual, const Tensor& w, float eps,
                    float weight_offset, Tensor& out, const LinearWeight* = nullptr) override {
    auto t = profile_.time([&] { return fmt::format("add_rms_norm {}", shape_str(x.shape())); });
    cpu::add_rms_norm(*pool_, x, residual, w, eps, weight_offset, out);
  }
  void add(Tensor& a, const Tensor& b) override {
    auto t = profile_.time([&] { return fmt::format("add {}", shape_str(a.shape())); });
    cpu::add(*pool_, a, b);
  }
  void rope(Tensor& x, const Tensor& positions, const Tensor& inv_freq, int rotary_dim,
            bool interleaved, float mscale) override {
    auto t = profile_.time([&] { return fmt::format("rope {}", shape_str(x.shape())); });
    cpu::rope(*pool_, x, positions, inv_freq, rotary_dim, interleaved, mscale);
  }
  void gated_activation(const Tensor& gate, const Tensor& up, GatedActivation act,
                        Tensor& out) override {
    auto t =
        profile_.time([&] { return fmt::format("gated_activation {}", shape_str(gate.shape())); });
    cpu::gated_activation(*pool_, gate, up, act, out);
  }
  void write_kv(const Tensor& k, const Tensor& v, KvLayerCache& cache,
                const AttentionMetadata& meta) override {
    auto t = profile_.time([&] { return fmt::format("write_kv {}", shape_str(k.shape())); });
    cpu::write_kv(*pool_, k, v, cache, meta);
  }
  void paged_attention(const Tensor& q, const KvLayerCache& cache, const AttentionMetadata& meta,
                       const AttentionParams& params, Tensor& out) override {
    auto t = profile_.time([&] {
      return fmt::format("paged_attention {} seqs={} T={}", dtype_name(cache.k.dtype()),
                         meta.num_seqs, q.dim(0));
    });
    cpu::paged_attention(*pool_, q, cache, meta, params, out);
  }
  void gather_rows(const Tensor& x, const std::vector<int32_t>& rows, Tensor& out) override {
    cpu::gather_rows(x, rows, out);
  }
  void softcap(Tensor& x, float cap) override {
    auto t = profile_.time([&] { return fmt::format("softcap {}", shape_str(x.shape())); });
    cpu::softcap(*pool_, x, cap);
  }

 private:
  cpu::OpProfile profile_;
  ThreadPool* pool_ = nullptr;
  std::unique_ptr<ThreadPool> own_pool_;
};

}  // namespace

std::unique_ptr<Backend> make_cpu_backend(int num_threads) {
  return std::make_unique<CpuBackend>(num_threads);
}

}  // namespace loom
