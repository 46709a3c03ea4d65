// The AMX family of x86 GEMMs: tile products on weights in VNNI blocks.
#pragma once

#include "targets/common/KernelSpec.h"

#include <cstdint>

namespace kiln::x86 {

// y[rows, n] f32 = a[rows, k] bf16 · Wᵀ, W in VnniBf16 blocks (n % 16 == 0,
// k % 32 == 0), whole 16-row tiles of a (padded); arguments (a, W, y; rows,
// part, parts), parts splitting the 16-column tiles of n.
kernels::KernelSpec linearAmx(int64_t n, int64_t k);

} // namespace kiln::x86
