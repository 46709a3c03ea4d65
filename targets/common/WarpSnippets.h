// MLIR text pieces the GPU warp kernels share: a warp's lane and index from
// the %part/%parts convention, the butterfly sum across a warp, and the
// product of one weight row (bf16, or NVFP4 decoded in registers) with an f32
// vector, each lane covering its own 16-byte slices of the row so that a
// warp's loads are contiguous.
#pragma once

#include <cstdint>
#include <string>

namespace kiln::kernels::warp {

constexpr int64_t kWarp = 32;

// Defines %lane, %warp and %warps (index) from %part and %parts; also the
// index constants %c0, %c1, %c32.
std::string warpIds();

// Sums f32 `%in` over the lanes whose index differs from this lane's only in
// bits `firstOffset` .. `width`/2 (gpu.shuffle xor): with the defaults, the
// whole warp. Defines `%out` (every lane holds the sum).
std::string warpSum(const std::string &in, const std::string &out, int64_t firstOffset = 1,
                    int64_t width = kWarp);

// A bf16 row (memref `type`, the row's leading indices `rowIdx`, `k` wide)
// times an f32 vector (memref `xType` at leading indices `xIdx`): defines f32
// `%out`, this lane's part of the dot. Needs k % 8 == 0.
std::string bf16RowDot(const std::string &w, const std::string &type, const std::string &rowIdx,
                       const std::string &x, const std::string &xType, const std::string &xIdx,
                       int64_t k, const std::string &out);

// The same for an NVFP4 row: `w` holds k/2 bytes of E2M1 pairs, `scales` one
// E4M3 byte per 16 elements, `global` the f32 scale applied to the sum.
// Needs k % 32 == 0.
std::string nvfp4RowDot(const std::string &w, const std::string &type, const std::string &scales,
                        const std::string &scalesType, const std::string &rowIdx,
                        const std::string &global, const std::string &x, const std::string &xType,
                        const std::string &xIdx, int64_t k, const std::string &out);

} // namespace kiln::kernels::warp
