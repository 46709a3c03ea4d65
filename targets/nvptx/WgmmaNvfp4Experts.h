// The MegaMoE expert GEMMs of prefill with NVFP4 weights on Hopper (sm_90a),
// their weights as wgmma's A operand from registers: C^T = W x^T, M the
// weights' output rows, N the tile's items, K the input.
//
// Hopper has no FP4 tensor cores, so the codes must become bf16 somewhere.
// Decoded by a producer into shared memory (the first design), each stage's
// weights were written there and then read by both consumers, beside the
// rows: at 128 items an expert that was more shared-memory traffic a FLOP
// than the SM has (70% of it busy with the tensor pipe under half). Here
// each consumer thread loads the raw codes of its own fragment straight from
// global memory, two k steps ahead, decodes them (Nvfp4Bf16) into the four
// registers a k16 product takes, and the shared memory carries only the
// tile's rows, brought once by the TMA and read by both consumers. A
// consumer decodes a step once its last step's products are done (their A
// registers are read until then); the two consumers take turns, one
// decoding while the other's products run.
//
// Fragment order. A thread of m64nNk16's A fragment holds, of its rows g
// and g + 8, k 2t, 2t + 1, 2t + 8 and 2t + 9 of each k16 (t its lane % 4):
// sixteen values of a 64-k step, four bytes apart in memory. The rows the
// GEMMs read as B are therefore stored with each step's 64 values permuted:
// position 16q + 8h + 2t + e holds k 16t + 4q + 2h + e (q the k16, h the
// half, e the element of a pair), so that a thread's sixteen are the eight
// contiguous bytes 8t .. 8t + 7 of its rows' codes, under one E4M3 scale.
// The rows kernel writes x so, gate/up writes h so; nothing else reads them.
//
// A block of three warpgroups a (tile, column tile): the producer's first
// thread has the TMA bring the tile's live 64-row blocks a stage; consumer c
// takes 64 weight rows against all of the tile's computed rows (64 to 256,
// one loop of its own for each, the accumulators N / 2 a thread):
//   gate/up: 32 intermediate columns, each warp's 16 rows gate's 8 then
//            up's same 8, so a thread holds gate and up of one column and
//            writes silu(gate) * up, two items' pair with its neighbour's;
//   down:    64 latent columns, stored at each item's place.
#pragma once

#include "targets/nvptx/WgmmaExpertTiles.h"

#include <string>

namespace kiln::nvptx::expert_tiles {

// The weight rows a block computes: gate/up 64 intermediate columns, down
// 128 latent columns.
int64_t nvfp4BlockCols(Product p);
// Whether the shape fits: the input a multiple of the k step, the output of
// the block's columns.
bool nvfp4ExpertsFit(const kernels::ExpertTileShape &s);
wgmma::RingLayout nvfp4RingLayout();

// Builds the GEMM's body (kSteps k steps) into `k`, whose dynamic shared
// memory is `smemName`.
void buildNvfp4ExpertGemm(kernels::KernelScope &k, const kernels::ExpertTileShape &s, Product p,
                          int64_t kSteps, const std::string &smemName);

// The position k `m` (0 <= m < 64) of a step takes in fragment order.
mlir::Value fragmentOrderPosition(kernels::KernelScope &k, mlir::Value m);

} // namespace kiln::nvptx::expert_tiles
