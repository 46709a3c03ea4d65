// The x86 tiled GEMM: AMX tile products on weights in VNNI blocks.
#pragma once

#include "targets/common/KernelSpec.h"

#include <cstdint>

namespace kiln::x86 {

// AMX tiles cover an [n, k] weight when n is a multiple of 16 and k of 32.
bool amxCovers(int64_t n, int64_t k);
// y[Tp, n] f32 = a[Tp, k] bf16 · Wᵀ, W in AmxVnniBf16 blocks; rows padded to 16.
kernels::KernelSpec linearAmx(int64_t n, int64_t k);

} // namespace kiln::x86
