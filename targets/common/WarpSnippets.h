// MLIR text pieces the GPU warp kernels share: a warp's lane and index from
// the %part/%parts convention, the butterfly sum across a warp, and the
// product of one weight row (bf16, or NVFP4 decoded in registers) with an f32
// vector, each lane covering its own 16-byte slices of the row so that a
// warp's loads are contiguous.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace kiln::kernels {

// Decimal text of a size, for kernel names and MLIR constants.
inline std::string str(int64_t value) { return std::to_string(value); }

} // namespace kiln::kernels

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

// One weight row of a multi-row dot: its memref and type, and the row's
// leading indices ("%e, %o"). NVFP4 rows also name their E4M3 block scales
// (memref and type, same leading indices) and the f32 SSA value of their
// global scale.
struct WeightRow {
  std::string w, type, rowIdx;
  std::string scales, scalesType, global;
  // The row of the vector this product reads, if not the shared one (a token
  // of several: one weight row against several vectors).
  std::string xIdx = "";
};

// Lane layouts of an NVFP4 chunk (512 code bytes, 1024 elements).
// Contiguous: lane l takes elements 32 l .. 32 l + 31, one 16-byte load of
// codes and one of scales, but each of a warp's 8 loads of the vector then
// spans 32 cache lines. Grouped: lane l takes 8 groups of 4 elements, group m
// at 128 m + 4 l, so each load of the vector is 512 contiguous bytes across
// the warp, at the price of 8 two-byte loads of codes and 8 of scales a row.
// Grouped pays where few weight rows share each vector (a warp over several
// tokens' vectors: GroupedExperts.h); Contiguous where many rows share one.
enum class Nvfp4Lanes { Contiguous, Grouped };

// This lane's part of the dot of each row with one f32 vector (memref `xType`
// at leading indices `xIdx`, `k` wide), defining f32 `%outs[r]`. The rows
// share the vector's loads, so a warp reads it once for all of them. BF16:
// needs k % 8 == 0 (lane l covers elements 256 c + 8 l .. +8); NVFP4: needs
// k % 32 == 0, lanes as `lanes` says (Grouped where k % 1024 == 0, else
// Contiguous).
// With `offset` (an index SSA value), the dot covers columns offset ..
// offset + k of longer rows.
std::string rowsDot(const std::vector<WeightRow> &rows, bool nvfp4, const std::string &x,
                    const std::string &xType, const std::string &xIdx, int64_t k,
                    const std::vector<std::string> &outs, const std::string &offset = "",
                    Nvfp4Lanes lanes = Nvfp4Lanes::Contiguous);

// The arguments of one expert projection stack [E, out, in] (bf16, or NVFP4
// codes, block scales and per-expert global scales, named after `w`) and a
// WeightRow (%e, o) for each o in `rowNames`; NVFP4 adds `globalLoad`, the
// line that defines %<w>_glob for expert %e.
struct ExpertProjection {
  std::string args;
  std::vector<WeightRow> rows;
  std::string globalLoad;
};
ExpertProjection expertProjection(const std::string &w, int64_t experts, int64_t out, int64_t in,
                                  bool nvfp4, const std::vector<std::string> &rowNames);

// SwiGLU of a warp's two gate rows %g0, %g1 and up rows %u0, %u1: stores
// silu(g) * u to `h`[%t, %j, %o0] and [.., %o1]; needs %one_f (1.0 : f32).
std::string swiGluStore(const std::string &h, const std::string &hType);

} // namespace kiln::kernels::warp
