#include "targets/nvptx/NvptxHooks.h"

#include "targets/common/Generators.h"
#include "targets/nvptx/MmaAttention.h"
#include "targets/nvptx/MmaDecodeAttention.h"
#include "targets/nvptx/MmaExperts.h"
#include "targets/nvptx/MmaGemm.h"
#include "targets/nvptx/NarrowExperts.h"
#include "targets/nvptx/NarrowLinear.h"
#include "targets/nvptx/PeerMegaMoE.h"
#include "targets/nvptx/WgmmaAttention.h"
#include "targets/nvptx/WgmmaExperts.h"
#include "targets/nvptx/WgmmaGemm.h"

#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/LLVMIR/NVVMDialect.h"
#include "mlir/IR/ImplicitLocOpBuilder.h"

#include <algorithm>

namespace kiln::nvptx {
namespace {

// The mma.sync tiles (GEMMs, expert tiles) start at this many tokens: a
// 128-row tile that holds a handful of rows is bound by its staging loop, not
// by the tensor cores, so fewer go to the warp GEMVs (decode) or the narrow
// kernels (batched decode, below).
constexpr int64_t kMatrixMinTokens = 32;
// Up to this many rows the linears stream each weight once on tensor cores
// with the rows as the narrow side (NarrowLinear.h), where the 128-row tiles
// would stage mostly padding.
constexpr int64_t kNarrowMaxTokens = 64;

} // namespace

std::optional<kernels::TargetHooks::MatrixGemm>
NvptxHooks::matrixGemm(int64_t n, int64_t k, int64_t maxTokens, bool exactInput) const {
  if (maxTokens <= kNarrowMaxTokens)
    if (std::optional<MatrixGemm> narrow = narrowGemm(n, k, maxTokens, exactInput))
      return narrow;
  if (maxTokens < kMatrixMinTokens)
    return std::nullopt;
  // Hopper's pipeline for prefill-sized products (more than one 128-row
  // tile; below that a GEMM reads each weight once whatever it runs on, and
  // the mma.sync tiles split k over the GPU), with bf16 activations unless
  // the products must be exact.
  if (hopper() && !exactInput && maxTokens > WgmmaGemmTiling::kTileM && wgmmaGemmFits(n, k) &&
      kernels::castBf16ThreadsFit(k)) {
    MatrixGemm gemm{wgmmaGemm(n, k, fault == "wgmma-drop-k-step"), wgmmaGemmWork(n, maxTokens)};
    gemm.cast = kernels::castBf16Threads(k);
    gemm.castWork = kernels::castBf16ThreadsWork(k);
    gemm.scalars = wgmmaGemmScalars();
    return gemm;
  }
  if (!mmaGemmFits(n, k))
    return std::nullopt;
  int64_t splits = mmaGemmSplits(n, k, maxTokens, chip.units);
  MatrixGemm gemm{mmaGemm(n, k, splits), mmaGemmWork(n, maxTokens, splits)};
  if (splits > 1) {
    gemm.splits = splits;
    gemm.sum = mmaGemmSum(n, splits);
    gemm.sumWork = mmaGemmSumWork(n);
  }
  return gemm;
}

// A batched step of a few conversations: every weight once for all of them,
// on tensor cores with the rows as the narrow side (not for products that
// pick experts: the router's logits stay f32 GEMVs, as one token's are).
std::optional<kernels::TargetHooks::MatrixGemm>
NvptxHooks::narrowGemm(int64_t n, int64_t k, int64_t maxTokens, bool exactInput) const {
  if (exactInput || chip.matrix == MatrixCores::None || !narrowLinearFits(n, k, maxTokens))
    return std::nullopt;
  int64_t splits = narrowLinearSplits(n, k, maxTokens, chip.units);
  MatrixGemm gemm{narrowLinear(n, k, maxTokens, splits), narrowLinearWork(n, maxTokens, splits)};
  if (splits > 1) {
    gemm.splits = splits;
    gemm.sum = mmaGemmSum(n, splits);
    gemm.sumWork = mmaGemmSumWork(n);
  }
  return gemm;
}

std::optional<kernels::TargetHooks::MatrixExperts>
NvptxHooks::matrixExperts(int64_t experts, int64_t k, int64_t intermediate, int64_t latent,
                          bool nvfp4, int64_t maxTokens) const {
  MmaExpertsShape s{experts, k, intermediate, latent, nvfp4, maxTokens};
  // Hopper's pipeline where the entry's GEMMs already read bf16 (more than
  // one 128-row tile of tokens): the experts' rows as bf16 too.
  if (hopper() && maxTokens > WgmmaGemmTiling::kTileM && wgmmaExpertsFit(s))
    return wgmmaExperts(s, fault == "expert-drop-k-step");
  if (maxTokens < kMatrixMinTokens || !mmaExpertsFit(s))
    return std::nullopt;
  return MatrixExperts{mmaExpertLists(s),     mmaExpertGateUp(s),     mmaExpertDown(s),
                       mmaExpertListsWork(s), mmaExpertGateUpWork(s), mmaExpertDownWork(s),
                       experts + 2,           2 * s.maxTiles(),       s.maxItems()};
}

// A few items an expert (batched decode): mma.sync with the items as the
// narrow side, every chip having it.
kernels::TargetHooks::MatrixExperts
NvptxHooks::fewItemsExperts(const kernels::ExpertTileShape &shape) const {
  if (chip.matrix == MatrixCores::None || !narrowExpertsFit(shape))
    return GpuTargetHooks::fewItemsExperts(shape);
  return narrowExperts(shape, hopper() ? kHopperNvfp4BlocksPerSm : 0,
                       fault == "narrow-experts-drop-k-step");
}

std::optional<kernels::TargetHooks::PeerMegaMoE>
NvptxHooks::peerMegaMoE(const kernels::PeerMegaMoEShape &shape) const {
  if (shape.maxRows >= kMatrixMinTokens || !peerMegaMoEFits(shape))
    return std::nullopt;
  return PeerMegaMoE{nvptx::peerMegaMoE(shape), peerMegaMoEWork(shape),
                     peerSiteLayout(shape).bytes};
}

// Prefill attention on tensor cores where the entry's GEMMs already take
// bf16 activations (Hopper's wgmma entries, more than one 128-row tile): the
// split kernels on CUDA cores elsewhere, whose results match the f32
// interpreter closely.
std::optional<kernels::TargetHooks::TileAttention>
NvptxHooks::tileAttention(const kernels::AttentionShape &shape, int64_t maxTokens,
                          bool bf16Output) const {
  if (!hopper() || maxTokens <= WgmmaGemmTiling::kTileM ||
      !kernels::warpAttentionFits(shape.headDim))
    return std::nullopt;
  const bool broken = fault == "attention-drop-tile";
  // Warpgroup MMA where the head dimension is whole 128-byte panels, the
  // mma.sync kernel otherwise (tiny's 32).
  WgmmaAttentionShape wide{shape};
  if (wgmmaAttentionFits(wide)) {
    WgmmaAttentionKernels kernels = wgmmaAttention(wide, maxTokens, broken, bf16Output);
    return TileAttention{kernels.attend,        kvAppendKernel(shape, /*sequences=*/{}),
                         kernels.stage,         kernels.stagedRows,
                         kernels.attendScalars, bf16Output};
  }
  MmaAttentionShape tiles{shape};
  if (!mmaAttentionFits(tiles))
    return std::nullopt;
  return TileAttention{{mmaAttention(tiles, broken), mmaAttentionWork(tiles, maxTokens)},
                       kvAppendKernel(shape, /*sequences=*/{})};
}

// Split-KV attention over a bf16 cache on mma.sync (a KV head's query heads
// as the MMA's rows, each cached key read once for all of them); the warp
// kernels otherwise. The merge and the append stay the warp kernels.
std::optional<kernels::TargetHooks::SplitAttention>
NvptxHooks::splitAttention(const kernels::AttentionShape &shape, int64_t maxTokens,
                           kernels::SequenceLayout sequences) const {
  std::optional<SplitAttention> split = GpuTargetHooks::splitAttention(shape, maxTokens, sequences);
  if (!split || chip.matrix == MatrixCores::None || !mmaDecodeAttentionFits(shape))
    return split;
  // A batch's conversations already spread the warps over the machine:
  // fewer splits there (about kDecodeWarps warps in all), so that the
  // partials, written and read once a layer, stay small beside the cache.
  if (sequences) {
    constexpr int64_t kDecodeWarps = 4096;
    const int64_t tokens = sequences.count * sequences.rows;
    const int64_t splits = std::clamp<int64_t>(
        (kDecodeWarps + tokens * shape.kvHeads - 1) / (tokens * shape.kvHeads), 1, split->splits);
    if (splits != split->splits) {
      split->splits = splits;
      split->merge = {kernels::attentionMergeWarp(shape.qHeads, shape.headDim, splits),
                      kernels::Work{0, 32 * shape.qHeads}};
    }
  }
  split->partials = {mmaDecodeAttention(shape, split->splits, sequences),
                     mmaDecodeAttentionWork(shape, split->splits)};
  return split;
}

// A fixed amount of work: blocks of up to 128 threads covering it. Work that
// grows with T: one 32-thread block per piece per token, so the grid grows
// with T too (threads past the work find an empty range and return); work
// given in whole blocks of 128 threads per token (warp kernels) gets those.
kernels::LaunchShape NvptxHooks::shape(kernels::Work work, int64_t) const {
  kernels::LaunchShape shape;
  if (work.block > 0) { // the kernel's own block
    shape.blockThreads = work.block;
    shape.gridBlocks = kernels::Work{work.constant / work.block, work.perToken / work.block};
  } else if (work.perToken == 0) {
    int64_t items = std::max<int64_t>(1, work.constant);
    shape.blockThreads = std::min<int64_t>(128, (items + 31) / 32 * 32);
    shape.gridBlocks = kernels::Work{(items + shape.blockThreads - 1) / shape.blockThreads, 0};
  } else if (work.constant == 0 && work.perToken % 32 == 0 && work.perToken <= 128) {
    // Warp and row kernels: one block of whole warps per token.
    shape.blockThreads = work.perToken;
    shape.gridBlocks = kernels::Work{0, 1};
  } else if (work.constant == 0 && work.perToken % 128 == 0) {
    // Warp kernels: four warps a block.
    shape.blockThreads = 128;
    shape.gridBlocks = kernels::Work{0, work.perToken / 128};
  } else {
    shape.blockThreads = 32;
    shape.gridBlocks = kernels::Work{work.constant, work.perToken};
  }
  return shape;
}

std::optional<kernels::E4m3PairToF16> NvptxHooks::e4m3PairToF16() const {
  return kernels::E4m3PairToF16([](mlir::ImplicitLocOpBuilder &b, mlir::Value pair) -> mlir::Value {
    auto bytes = mlir::VectorType::get({2}, b.getI8Type());
    mlir::Value both = mlir::LLVM::BitcastOp::create(b, bytes, pair);
    return mlir::NVVM::ConvertF8x2ToF16x2Op::create(b, mlir::VectorType::get({2}, b.getF16Type()),
                                                    both, /*relu=*/false,
                                                    mlir::Float8E4M3FNType::get(b.getContext()));
  });
}

} // namespace kiln::nvptx
