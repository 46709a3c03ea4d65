// The NVPTX tensor-core GEMM for prefill-shaped products: y[T, n] = x[T, k] ·
// Wᵀ from the f32 activations and the checkpoint's bf16 weights [n, k] as they
// are (the tile body: MmaTile.h). Blocks are ordered so that 8 neighbouring
// row tiles run over the same weight columns together, which keeps both
// operands in L2.
#pragma once

#include "targets/common/KernelSpec.h"
#include "targets/common/TargetHooks.h"

#include <cstdint>

namespace kiln::nvptx {

// Whether (n, k) fits the kernel: k a multiple of its k step, n of 8.
bool mmaGemmFits(int64_t n, int64_t k);
// How many parts the reduction is split into for up to `maxTokens` rows on a
// chip of `sms` SMs: 1 unless the tiles (rows by columns) are too few to
// fill the GPU.
int64_t mmaGemmSplits(int64_t n, int64_t k, int64_t maxTokens, int64_t sms);
// With splits > 1 the kernel writes split s's sums to y[s, T, n] (k / splits
// of the reduction each) and mmaGemmSum adds the splits in order into [T, n].
kernels::KernelSpec mmaGemm(int64_t n, int64_t k, int64_t splits = 1);
// The launch for up to `maxTokens` rows: one block per tile and split; blocks
// whose row tile starts past the call's T return at once.
kernels::Work mmaGemmWork(int64_t n, int64_t maxTokens, int64_t splits = 1);
kernels::KernelSpec mmaGemmSum(int64_t n, int64_t splits);
kernels::Work mmaGemmSumWork(int64_t n);

} // namespace kiln::nvptx
