// The token and copy ops (tests/backend/token_ops_cases.h) on the CUDA
// backend: argmax_rows_to, sample_rows_to (against ref::sample_row),
// resolve_token_ids, download_tokens, copy and copy_kv_blocks (bf16 cache).
// Exact. Skipped without a GPU.
#include "../backend/token_ops_cases.h"
#include "cuda_test_util.h"

namespace loom {
namespace {

class CudaTokenOpsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    LOOM_REQUIRE_GPU();
    be_ = make_cuda_backend(0);
  }
  std::unique_ptr<Backend> be_;
};

TEST_F(CudaTokenOpsTest, ArgmaxRowsTo) {
  token_ops::argmax_rows_to(*be_);
}
TEST_F(CudaTokenOpsTest, SampleRowsTo) {
  token_ops::sample_rows_to(*be_);
}
TEST_F(CudaTokenOpsTest, ResolveTokenIds) {
  token_ops::resolve_token_ids(*be_);
}
TEST_F(CudaTokenOpsTest, DownloadTokens) {
  token_ops::download_tokens(*be_);
}
TEST_F(CudaTokenOpsTest, Copy) {
  token_ops::copy(*be_, {DType::BF16, DType::F32, DType::I32});
}
TEST_F(CudaTokenOpsTest, CopyKvBlocks) {
  token_ops::copy_kv_blocks(*be_, DType::BF16);
}

}  // namespace
}  // namespace loom
