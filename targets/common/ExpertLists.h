// The expert stage's grouping of prefill items for matrix-core kernels: a
// kernel that lists the (token, choice) items by expert, and the tiles of
// `tileRows` (128 unless a kernel asks for more) of an expert's items that
// the targets' tile kernels then take (targets/nvptx/MmaExperts.h,
// WgmmaExperts.h, targets/amdgcn/MfmaExperts.h).
//
//   meta:  E + 2 words: each expert's first position in `items`, the total,
//          then the tile count;
//   tiles: (expert, first row) pairs;
//   items: item t*k + j, grouped by expert (their order within an expert
//          comes from shared-memory atomics; results do not depend on it).
// Choices of -1 (another rank's experts) are not listed.
#pragma once

#include "targets/common/KernelSpec.h"
#include "targets/common/TargetHooks.h"

#include <cstdint>
#include <string>
#include <vector>

#include "mlir/IR/ImplicitLocOpBuilder.h"
#include "mlir/IR/Value.h"

namespace kiln::kernels {

constexpr int64_t kExpertTileRows = 128;

struct ExpertTileShape {
  int64_t experts, k, intermediate, latent;
  bool nvfp4;
  int64_t maxTokens;
  // Items a tile: an expert's items fill tiles of this many rows, its last
  // one partial.
  int64_t tileRows = kExpertTileRows;
  int64_t maxItems() const { return maxTokens * k; }
  // Tiles an expert grouping can need: every expert may end with a partial
  // tile.
  int64_t maxTiles() const { return (maxItems() + tileRows - 1) / tileRows + experts; }
};

// "64e_top8_1024x1024_t64_nvfp4": the shape in kernel names.
std::string expertShapeSuffix(const ExpertTileShape &shape);
// The lists as kernel arguments, appended to `types`: meta [E + 2], tiles
// [2 maxTiles], items [maxItems], all i32.
void appendExpertListTypes(mlir::Builder &b, const ExpertTileShape &shape,
                           std::vector<mlir::Type> &types);
// An expert projection [E, out, in] as kernel arguments, appended to
// `types`: bf16, or NVFP4 codes [E, out, in / 2] i8, scales [E, out, in / 16]
// i8 (E4M3) and global scales [E] f32; projectionArgCount of them.
void appendProjectionTypes(mlir::Builder &b, const ExpertTileShape &shape, int64_t out, int64_t in,
                           std::vector<mlir::Type> &types);
inline int64_t projectionArgCount(const ExpertTileShape &shape) { return shape.nvfp4 ? 3 : 1; }
// Those arguments in a kernel: bf16 weights, or NVFP4 codes, block scales
// and per-expert global scales.
struct ExpertProjection {
  mlir::Value w, scales, globals;
  // The global scale of expert `e` (NVFP4; a null Value for bf16).
  mlir::Value loadGlobal(mlir::ImplicitLocOpBuilder &b, mlir::Value e) const;
};
// The projection whose first argument is `args`[first].
ExpertProjection expertProjection(mlir::ValueRange args, unsigned first, bool nvfp4);
// The arguments of the per-token expert kernels (T tokens, each its own
// choices): gate/up's z [T, latent] f32, the choices [T, k] i32, gate and up,
// h [T, k, intermediate] f32 and T; down's h, the choices, down, y [T, k,
// latent] f32 and T.
std::vector<mlir::Type> expertGateUpArgTypes(mlir::Builder &b, const ExpertTileShape &shape);
std::vector<mlir::Type> expertDownArgTypes(mlir::Builder &b, const ExpertTileShape &shape);
// Expert `j` of token `t`'s choices (`idx` [T, k] i32) as an index; -1
// (another rank's expert, weight 0) reads expert 0.
mlir::Value chosenExpert(mlir::ImplicitLocOpBuilder &b, mlir::Value idx, mlir::Value t,
                         mlir::Value j);
// The lists kernel (one block of 1024 threads) and whether it fits.
bool expertListsFit(const ExpertTileShape &shape);
KernelSpec expertLists(const ExpertTileShape &shape);
Work expertListsWork(const ExpertTileShape &shape);

} // namespace kiln::kernels
