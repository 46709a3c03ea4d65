// What the wgmma expert GEMMs (WgmmaExperts: bf16 weights by TMA;
// WgmmaNvfp4Experts: NVFP4 weights decoded into registers) share about the
// tiles of items: a block's (tile, column tile), the tile's 64-row blocks
// that hold items, its rows brought by the TMA, and the kernels' argument
// positions. Items are grouped by expert into tiles of kTileRows
// (ExpertLists.h); tile i's rows are kTileRows i .. kTileRows i + 255 of the
// tile-ordered rows buffer.
#pragma once

#include "targets/common/ExpertLists.h"
#include "targets/common/KernelBuilder.h"
#include "targets/nvptx/WgmmaPipeline.h"

#include "llvm/ADT/STLFunctionalExtras.h"
#include "llvm/ADT/SmallVector.h"

#include <cstdint>

namespace kiln::nvptx::expert_tiles {

constexpr int64_t kTileRows = 256;
constexpr int64_t kThreads = 3 * wgmma::kWarpgroup; // producer + two consumers
constexpr int64_t kConsumerWarps = 8;

enum class Product { GateUp, Down };

int64_t outCols(const kernels::ExpertTileShape &s, Product p);
int64_t inDim(const kernels::ExpertTileShape &s, Product p);
inline int64_t matrices(Product p) { return p == Product::GateUp ? 2 : 1; }

// Argument positions: rows, meta, tiles, items, the projections, the
// output, then the scalars (tensor maps: the rows' first).
struct GemmArgs {
  const kernels::ExpertTileShape &s;
  Product product;
  unsigned weight(int64_t matrix) const {
    return 4 + unsigned(matrix * kernels::projectionArgCount(s));
  }
  unsigned out() const { return weight(matrices(product)); }
  unsigned map(int64_t which) const { return out() + 1 + unsigned(which); }
};

// The tile a block works on, from the lists: its index, expert, first item
// position and how many of its rows hold items.
struct TileOfBlock {
  mlir::Value tile, expert, base, rowsIn;
};

// Reads the tile count (meta[E + 1]) and leaves the builder inside an
// scf.if on tile `tile`'s existence, where it reads the tile's expert and
// items.
TileOfBlock tileOfBlock(kernels::KernelScope &k, const kernels::ExpertTileShape &s,
                        mlir::Value tile, mlir::Value meta, mlir::Value tiles);

// The rows of a tile's 64-row blocks that hold items: `rowsIn` rounded up
// to 64. The GEMMs compute and copy those rows only.
mlir::Value computedRows(kernels::KernelScope &k, mlir::Value rowsIn);

// `predicate` as lane 0 of the warp sees it: every lane does, but ptxas,
// told so by the shuffle, then knows the branches on it are not divergent,
// where wgmma must not be.
mlir::Value warpUniform(kernels::KernelScope &k, mlir::Value predicate);

// Copies a stage takes besides the tile's rows (the bf16 GEMMs' weights):
// the tensor maps (kernel arguments) acquired with the rows', the bytes they
// add to a stage, and the copies of k `kk` (i32) into `stage`, counted on
// `fullAt`, given those maps as pointers.
struct ExtraCopies {
  llvm::SmallVector<unsigned> maps;
  int64_t bytes = 0;
  llvm::function_ref<void(llvm::ArrayRef<mlir::Value> maps, mlir::Value stage, mlir::Value kk,
                          mlir::Value fullAt)>
      copy;
};

// The producer warpgroup of an expert GEMM: its first thread (`inGroup` 0)
// claims each of `steps` k steps' stage and has the TMA bring the tile's
// rows that hold items (tensor map argument `rowsMap`: a box of 64 rows for
// each such block, the others never read) and `extra`'s copies into it.
// Leaves the builder inside the loop (splitRoles's guard restores it).
void produceTileRows(kernels::KernelScope &k, wgmma::Ring &ring, const TileOfBlock &t,
                     mlir::Value inGroup, unsigned rowsMap, int64_t steps,
                     const ExtraCopies *extra = nullptr);

// Where the tile's row `row` (an index) puts its product: opens an scf.if on
// the row holding an item and leaves the builder inside (hold an
// InsertionGuard), where it reads the item t * k + j and returns t and j.
struct ItemPlace {
  mlir::Value token, choice;
};
ItemPlace itemOfRow(kernels::KernelScope &k, const kernels::ExpertTileShape &s,
                    const TileOfBlock &t, mlir::Value row);

// The tensor map kernel argument `arg` as a generic pointer.
mlir::Value tensorMapArg(kernels::KernelScope &k, unsigned arg);

} // namespace kiln::nvptx::expert_tiles
