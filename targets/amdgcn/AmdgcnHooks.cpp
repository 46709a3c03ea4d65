#include "targets/amdgcn/AmdgcnHooks.h"

#include "targets/amdgcn/MfmaExperts.h"
#include "targets/amdgcn/MfmaGemm.h"

#include <algorithm>

namespace kiln::amdgcn {

namespace {

// Entry points of fewer tokens (decode, batched decode) stream the weights
// through the warp GEMVs, as on NVIDIA: a 32-row tile holding a few rows
// would be bound by its loads.
constexpr int64_t kMatrixMinTokens = 32;

} // namespace

std::optional<kernels::TargetHooks::MatrixGemm>
AmdgcnHooks::matrixGemm(int64_t n, int64_t k, int64_t maxTokens, bool) const {
  if (chip.matrix != MatrixCores::Mfma || maxTokens < kMatrixMinTokens || !mfmaGemmFits(n, k))
    return std::nullopt;
  return MatrixGemm{mfmaGemm(n, k), mfmaGemmWork(n, maxTokens)};
}

std::optional<kernels::TargetHooks::MatrixExperts>
AmdgcnHooks::matrixExperts(int64_t experts, int64_t k, int64_t intermediate, int64_t latent,
                           bool nvfp4, int64_t maxTokens) const {
  kernels::ExpertTileShape s{experts, k, intermediate, latent, nvfp4, maxTokens};
  if (chip.matrix != MatrixCores::Mfma || maxTokens < kMatrixMinTokens || !mfmaExpertsFit(s))
    return std::nullopt;
  return MatrixExperts{kernels::expertLists(s),
                       mfmaExpertGateUp(s),
                       mfmaExpertDown(s),
                       kernels::expertListsWork(s),
                       mfmaExpertGateUpWork(s),
                       mfmaExpertDownWork(s),
                       experts + 2,
                       2 * s.maxTiles(),
                       s.maxItems()};
}

// A fixed amount of work: blocks of up to four wavefronts covering it. Work
// that grows with T: one wavefront per piece per token.
kernels::LaunchShape AmdgcnHooks::shape(kernels::Work work, int64_t) const {
  const int64_t wave = chip.warp;
  kernels::LaunchShape shape;
  if (work.block > 0) { // the kernel's own block
    shape.blockThreads = work.block;
    shape.gridBlocks = kernels::Work{work.constant / work.block, work.perToken / work.block};
  } else if (work.perToken == 0) {
    int64_t items = std::max<int64_t>(1, work.constant);
    shape.blockThreads = std::min<int64_t>(4 * wave, (items + wave - 1) / wave * wave);
    shape.gridBlocks = kernels::Work{(items + shape.blockThreads - 1) / shape.blockThreads, 0};
  } else if (work.constant == 0 && work.perToken % 32 == 0 && work.perToken <= 4 * wave) {
    shape.blockThreads = work.perToken; // warp and row kernels: one block per token
    shape.gridBlocks = kernels::Work{0, 1};
  } else if (work.constant == 0 && work.perToken % (4 * wave) == 0) {
    shape.blockThreads = 4 * wave; // warp kernels: 32-lane warps, four wavefronts a block
    shape.gridBlocks = kernels::Work{0, work.perToken / (4 * wave)};
  } else {
    shape.blockThreads = wave;
    shape.gridBlocks = kernels::Work{work.constant, work.perToken};
  }
  return shape;
}

} // namespace kiln::amdgcn
