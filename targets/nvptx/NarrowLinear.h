// The linear products of batched decode on tensor cores: y[T, n] = x[T, k] ·
// Wᵀ for 2 to 64 rows (a step of a few dozen conversations), bf16 weights [n, k]
// as the checkpoint has them, through the narrow k loop (NarrowMma.h): a
// warp takes 32 output rows and every row of x (8 a group, each group one
// MMA column block), so each weight is read from memory once for the whole
// batch. Where n / 32 warps would leave the GPU short of loads in flight,
// the reduction is split: split s writes its sums to partial[s, T, n] and
// the mma GEMM's sum kernel (MmaGemm.h) adds the splits in order.
#pragma once

#include "targets/common/KernelSpec.h"
#include "targets/common/TargetHooks.h"

#include <cstdint>

namespace kiln::nvptx {

bool narrowLinearFits(int64_t n, int64_t k, int64_t maxTokens);
// Parts of the reduction for up to `maxTokens` rows on a chip of `sms` SMs:
// enough warps for about eight an SM, while the parts' sums stay a small
// share of the traffic.
int64_t narrowLinearSplits(int64_t n, int64_t k, int64_t maxTokens, int64_t sms);
kernels::KernelSpec narrowLinear(int64_t n, int64_t k, int64_t maxTokens, int64_t splits);
kernels::Work narrowLinearWork(int64_t n, int64_t maxTokens, int64_t splits);

} // namespace kiln::nvptx
