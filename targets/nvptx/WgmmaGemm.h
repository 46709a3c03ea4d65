// Hopper's GEMM for prefill-shaped products (sm_90a): y[T, n] f32 =
// x[T, k] bf16 · Wᵀ, W the checkpoint's bf16 [n, k]. A block of three
// warpgroups computes a 128 x 256 tile of y: the first (the producer) waits
// for a free stage of a ring of shared-memory stages and has the TMA copy
// engine bring the stage's 128 x 64 slice of x and 256 x 64 slice of W into
// it (tensor maps with the 128-byte swizzle, completion counted on the
// stage's mbarrier); the other two (the consumers) each take 64 rows of the
// tile: they wait for a stage, run four wgmma.mma_async m64n256k16 on it
// (bf16 in, f32 accumulators in registers), and release the stage to the
// producer once those have read it. The producer gives up registers
// (setmaxnreg) to the consumers, whose 128 accumulators a thread need them.
// Blocks take their tiles in groups of 16 row tiles, down each column tile
// in turn, so that the blocks resident at once share x and W tiles in L2.
//
// Arguments (x bf16 [T, k], W bf16 [n, k], y f32 [T, n]; T, x's tensor map,
// W's tensor map): the maps are Launch tensor maps of the x and W buffers
// (docs/runtime-abi.md), passed as device addresses. Rows past T are zeros
// to the TMA and never stored.
#pragma once

#include "targets/common/KernelSpec.h"
#include "targets/common/TargetHooks.h"

#include <cstdint>
#include <string>
#include <vector>

namespace kiln::nvptx {

struct WgmmaGemmTiling {
  static constexpr int64_t kTileM = 128, kTileN = 256, kTileK = 64;
  static constexpr int64_t kThreads = 384; // producer + two consumer warpgroups
  int64_t stages = 4;                      // of the shared-memory ring
  int64_t stageBytes() const { return (kTileM + kTileN) * kTileK * 2; }
  // The ring, then a full and an empty mbarrier a stage.
  int64_t sharedBytes() const { return stages * stageBytes() + stages * 16; }
};

// Whether (n, k) fits: k a multiple of the 64-wide k step, n of 8.
bool wgmmaGemmFits(int64_t n, int64_t k);
// `dropLastStep`: a deliberately broken kernel that skips the last k step,
// for the test that shows the GPU checks catch a wrong kernel.
kernels::KernelSpec wgmmaGemm(int64_t n, int64_t k, bool dropLastStep = false);
// One block per 128 x 256 tile at up to `maxTokens` rows.
kernels::Work wgmmaGemmWork(int64_t n, int64_t maxTokens);
// The launch's scalars: T, then x's and W's tensor maps (buffers 0 and 1).
std::vector<std::string> wgmmaGemmScalars();

} // namespace kiln::nvptx
