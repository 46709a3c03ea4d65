// The k loop of the narrow tensor-core kernels (NarrowExperts, NarrowLinear):
// products of weight rows with a few activation rows on mma.sync
// m16n8k16, 16 weight rows as A and 8 activation rows (tokens or an expert's
// items) as B, so the weights stream from memory once whatever the batch.
//
// A warp holds two MMA tiles of 16 rows: its thread (g, t) = (lane / 4,
// lane % 4) loads rows g and g + 8 of each (four rows, `Rows`). The k range
// walks chunks of 64 x span; in each the thread takes k 16 span t .. 16 span
// (t + 1) - 1 of its rows (span NVFP4 blocks: 8 span bytes of codes and
// span E4M3 scales, or 32 bytes of bf16) and of B's row g, and both
// fragments number k the same way, so the 4 span k16 MMAs of the chunk
// cover it. NVFP4 chunks span four blocks where k allows: a thread's codes
// of a row are then two 16-byte loads and its scales one word, four times
// fewer load instructions (and L1 wavefronts) than a block at a time. A
// step's weights (one or more chunks) are loaded a step ahead. Activations
// are f32, each split into its bf16 and the bf16 of what that left (two
// MMAs): the products come within about 2^-16 of f32 GEMVs', and cost
// nothing where the weights' bytes bound the kernel.
#pragma once

#include "mlir/IR/ImplicitLocOpBuilder.h"
#include "mlir/IR/Value.h"
#include "llvm/ADT/STLFunctionalExtras.h"
#include "llvm/ADT/SmallVector.h"

#include <cstdint>

namespace kiln::kernels {
struct KernelScope;
}

namespace kiln::nvptx::narrow {

constexpr int64_t kTileRows = 16;            // an MMA's weight rows
constexpr int64_t kWarpRows = 2 * kTileRows; // a warp's
constexpr int64_t kItems = 8;                // an MMA's activation rows
constexpr int64_t kChunk = 64;               // k of a chunk
constexpr int64_t kRows = 4;                 // weight rows a thread loads

// NVFP4 blocks of 16 a thread loads of a row in a chunk: the largest of 4,
// 2, 1 whose chunk (64 x span columns) divides `in`; bf16 weights 1.
int64_t blocksPerChunk(int64_t in, bool nvfp4);
// k of a chunk: kChunk x blocksPerChunk.
int64_t chunkColumns(int64_t in, bool nvfp4);
// Chunks a k step loads ahead over `in` columns: NVFP4 256 columns (4 rows x
// 36 bytes a thread), bf16 two chunks (4 rows x 32 bytes).
int64_t chunksPerStep(int64_t in, bool nvfp4);

struct Operands {
  int64_t in = 0; // k
  bool nvfp4 = false;
  int64_t steps = 0; // k steps run (fewer than in / (chunkColumns x
                     // chunksPerStep) only for a kernel broken on purpose)
  // Thread (g, t)'s lane numbers.
  mlir::Value g, t;
  // Appends weight row r's raw values of chunk `chunk` for this thread:
  // NVFP4 codes as vector<2 span x i32> and the scales (i8 for one block,
  // vector<span x i8> for more), or bf16 as vector<8xi32>. Rows: 0 and 1
  // are rows g and g + 8 of MMA tile 0, 2 and 3 of tile 1.
  llvm::function_ref<void(int64_t r, mlir::Value chunk, llvm::SmallVectorImpl<mlir::Value> &raw)>
      loadRow;
  // Activation row `source`'s four f32 at column `col` (vector<4xf32>).
  llvm::function_ref<mlir::Value(int64_t source, mlir::Value col)> loadX;
};

// The accumulators over the whole k range for `sources` activation rows
// (source s feeding column g of MMA group s): 8 f32 per source, tile 0's
// four then tile 1's. Thread (g, t) holds, per tile, rows g (values 0, 1)
// and g + 8 (2, 3) for the group's columns 2 t (0, 2) and 2 t + 1 (1, 3).
llvm::SmallVector<mlir::Value> products(kernels::KernelScope &k, const Operands &ops,
                                        int64_t sources);

} // namespace kiln::nvptx::narrow
