// The NVPTX target's answers to the shared lowering, for one chip: the
// tensor-core GEMM for prefill-shaped products (Hopper's wgmma pipeline,
// WgmmaGemm.h, on sm_90a; mma.sync tiles, MmaGemm.h, elsewhere), and launch
// shapes for the warp and row kernels.
#pragma once

#include "runtime/core/Chip.h"
#include "targets/common/GpuHooks.h"

#include <string>
#include <utility>

namespace kiln::nvptx {

class NvptxHooks final : public kernels::GpuTargetHooks {
public:
  // `chip`: a row of the chip table (runtime/core/Chips.def); its matrix
  // cores choose the GEMMs (Wgmma: Hopper's pipeline; MmaSync: tiles).
  // `fault`: a kernel broken on purpose, for the tests that show the checks
  // catch one ("wgmma-drop-k-step"), or "".
  explicit NvptxHooks(const Chip &chip, std::string fault = "")
      : chip(chip), fault(std::move(fault)) {}
  std::string name() const override { return "nvptx"; }
  std::optional<TiledGemm> tiledGemm(int64_t, int64_t, bool) const override { return std::nullopt; }
  std::optional<MatrixGemm> matrixGemm(int64_t n, int64_t k, int64_t maxTokens,
                                       bool exactInput) const override;
  std::optional<MatrixExperts> matrixExperts(int64_t experts, int64_t k, int64_t intermediate,
                                             int64_t latent, bool nvfp4,
                                             int64_t maxTokens) const override;
  std::optional<PeerMegaMoE> peerMegaMoE(const kernels::PeerMegaMoEShape &shape) const override;
  std::optional<TileAttention> tileAttention(const kernels::AttentionShape &shape,
                                             int64_t maxTokens, bool bf16Output) const override;
  std::optional<SplitAttention> splitAttention(const kernels::AttentionShape &shape,
                                               int64_t maxTokens,
                                               kernels::SequenceLayout sequences) const override;
  kernels::LaunchShape shape(kernels::Work work, int64_t maxTokens) const override;

protected:
  MatrixExperts fewItemsExperts(const kernels::ExpertTileShape &shape) const override;
  bool stagedExpertsBroken() const override { return fault == "staged-experts-drop-chunk"; }
  bool gemvPairBroken() const override { return fault == "gemv-pair-first-weight"; }
  bool expertCombineBroken() const override { return fault == "expert-combine-drop-choice"; }
  // cvt.rn.f16x2.e4m3x2 (sm_89 and later; every chip of the table).
  std::optional<kernels::E4m3PairToF16> e4m3PairToF16() const override;

private:
  std::optional<MatrixGemm> narrowGemm(int64_t n, int64_t k, int64_t maxTokens,
                                       bool exactInput) const;
  // wgmma, TMA and setmaxnreg: the arch-specific sm_90a.
  bool hopper() const { return chip.matrix == MatrixCores::Wgmma; }
  const Chip &chip;
  std::string fault;
};

} // namespace kiln::nvptx
