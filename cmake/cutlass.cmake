# CUTLASS's headers (from the nvidia-cutlass wheel scripts/setup.sh fetches
# into third_party/cutlass) for the Hopper FP8 GEMMs: 128x128 block-scaled or
# per-row scaled weights (src/backend/cuda/kernels/fp8/fp8_gemm_sm90.cuh).
# They need sm_90a (wgmma, TMA), so they are their own
# target compiled for 90a alone, built when the CUDA architectures include 90a
# (or, with "native", when the visible GPU is compute capability 9.0);
# otherwise fp8_block_gemm_none.cpp says the kernel is absent. Included from
# the CUDA block of CMakeLists.txt (loom_cuda_archs, loom_backend_cuda).
set(LOOM_CUTLASS_DIR "${PROJECT_SOURCE_DIR}/third_party/cutlass" CACHE PATH
    "CUTLASS headers: a folder with include/cutlass and include/cute (scripts/setup.sh fetches it)")
set(loom_cutlass_sm90 OFF)
if("90a" IN_LIST loom_cuda_archs)
  set(loom_cutlass_sm90 ON)
elseif(loom_cuda_archs STREQUAL "native")
  execute_process(COMMAND nvidia-smi --query-gpu=compute_cap --format=csv,noheader
                  OUTPUT_VARIABLE loom_smi_caps ERROR_QUIET)
  if(loom_smi_caps MATCHES "9\\.0")
    set(loom_cutlass_sm90 ON)
  endif()
endif()
set(loom_fp8_block_dir ${PROJECT_SOURCE_DIR}/src/backend/cuda/kernels/fp8)
if(loom_cutlass_sm90 AND EXISTS "${LOOM_CUTLASS_DIR}/include/cutlass/cutlass.h"
   AND EXISTS "${LOOM_CUTLASS_DIR}/include/cute/tensor.hpp")
  # One CUTLASS kernel per translation unit (compile time): 128x128-block
  # scales, per-row scales in four tile shapes (64x64 and 128x128 with
  # promoted or fast accumulation, 128x128 ping-pong and 128x256 with fast
  # accumulation), and per-row scales for few rows (CuTe's wgmma atoms only).
  add_library(loom_fp8_block_gemm STATIC ${loom_fp8_block_dir}/fp8_block_gemm_sm90.cu
                                         ${loom_fp8_block_dir}/fp8_row_gemm_small_sm90.cu
                                         ${loom_fp8_block_dir}/fp8_row_gemm_large_sm90.cu
                                         ${loom_fp8_block_dir}/fp8_row_gemm_small_fast_sm90.cu
                                         ${loom_fp8_block_dir}/fp8_row_gemm_large_fast_sm90.cu
                                         ${loom_fp8_block_dir}/fp8_row_gemm_pingpong_fast_sm90.cu
                                         ${loom_fp8_block_dir}/fp8_row_gemm_wide_fast_sm90.cu
                                         ${loom_fp8_block_dir}/fp8_row_split_sm90.cu)
  set_target_properties(loom_fp8_block_gemm PROPERTIES CUDA_ARCHITECTURES 90a)
  target_include_directories(loom_fp8_block_gemm PRIVATE ${PROJECT_SOURCE_DIR}/src)
  # SYSTEM: CUTLASS's own warnings are its maintainers' business.
  target_include_directories(loom_fp8_block_gemm SYSTEM PRIVATE "${LOOM_CUTLASS_DIR}/include")
  target_compile_options(loom_fp8_block_gemm PRIVATE --expt-relaxed-constexpr)
  target_link_libraries(loom_fp8_block_gemm PRIVATE CUDA::cudart)
  target_link_libraries(loom_backend_cuda PRIVATE loom_fp8_block_gemm)
  message(STATUS "loom: CUTLASS from ${LOOM_CUTLASS_DIR} (FP8 block-scaled GEMM for sm_90a on)")
else()
  target_sources(loom_backend_cuda PRIVATE ${loom_fp8_block_dir}/fp8_block_gemm_none.cpp)
  if(NOT loom_cutlass_sm90)
    message(STATUS "loom: no sm_90a in the CUDA architectures; FP8 block-scaled GEMM via CUTLASS off")
  else()
    message(STATUS "loom: no CUTLASS headers in ${LOOM_CUTLASS_DIR} (scripts/setup.sh fetches them); "
                   "FP8 block-scaled GEMM via CUTLASS off")
  endif()
endif()
