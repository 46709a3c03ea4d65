// The shared body of Kiln's mma.sync tensor-core kernels on NVIDIA GPUs: a
// block of 8 warps computes a 128 x 128 tile of products of activation rows
// with weight rows through `mma.sync.m16n8k16` (bf16 in, f32 accumulate),
// walking the reduction 32 at a time. While the warps multiply the step in
// shared memory, each thread has the next step's share (16 activations, 16
// weights) loading into registers.
//
// The activations are f32 in Kiln; the kernel splits each into a bf16 high
// part and a bf16 remainder and multiplies both, so products carry about 16
// bits of the activation, not 8: greedy decoding stays identical to the f32
// reference interpreter (weights are bf16, or NVFP4 values, which bf16 holds
// exactly).
//
// A kernel supplies what differs, as typed-IR callbacks (KernelBuilder.h):
// how a block finds its tile, where its activation and weight rows come
// from, and where the results go.
#pragma once

#include "targets/common/KernelBuilder.h"

#include <array>
#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

namespace kiln::nvptx {

constexpr int64_t kMmaTileM = 128, kMmaTileN = 128, kMmaTileK = 32, kMmaThreads = 256;

// What the shared body defines for a kernel's callbacks.
struct MmaTileScope {
  kernels::KernelScope &k;
  mlir::ImplicitLocOpBuilder &b;
  // Function level: index constants, the thread and the block.
  mlir::Value c0, c1, c2, c4, c6, c8, c12, c16, c32, c64, c128;
  mlir::Value tid, bid;
  // Split-K (`setup` sets them): the block's share of the reduction,
  // kBegin .. kEnd (whole k steps), and kFinal = kEnd - 32.
  mlir::Value kBegin, kEnd, kFinal;
  // Inside the live region: the warp's place (wn its column of 4), the
  // lane's mma group g and thread t, the tile row this thread stages (lrow)
  // and its first element of a k step (lk).
  mlir::Value warp, lane, wn, g, t, lrow, lk;
  // The warp's mma tiles: rows ra[i] (c0 c1) and ra8[i] (c2 c3) of the
  // tile, weight rows rb[j] (= rbWarp[j] + g).
  std::array<mlir::Value, 4> ra, ra8, rb, rbWarp;
};

// One k step's share of a thread, as loaded: 16 activations (4 x
// vector<4xf32>) and the weight row's raw loads (bf16: the two
// vector<8xbf16> themselves).
struct MmaStaged {
  std::array<mlir::Value, 4> a;
  mlir::Value w0, w1;
};

struct MmaTileKernel {
  std::string name, op;
  kernels::Tiling tiling;
  // The arguments before %part, %parts.
  std::function<std::vector<mlir::Type>(mlir::Builder &)> args;
  int64_t k = 0; // the reduction length, a multiple of kMmaTileK
  // Split-K: `setup` sets kBegin, kEnd, kFinal; otherwise a block covers
  // 0 .. k.
  bool kRange = false;
  // Function level, after tid and bid: returns i1 live (the block has a
  // tile).
  std::function<mlir::Value(MmaTileScope &)> setup;
  // Inside the live region, before the fragment indices.
  std::function<void(MmaTileScope &)> rows;
  // This thread's loads for the k step at `at`.
  std::function<MmaStaged(MmaTileScope &, mlir::Value at)> load;
  // The raw weight loads as two vector<8xbf16> (bf16: as loaded).
  std::function<std::pair<mlir::Value, mlir::Value>(MmaTileScope &, const MmaStaged &)> finish;
  // After the loop: results[4 i + j] holds mma tile (i, j) of the warp
  // (!llvm.struct<(f32 x 4)>: c0 c1 at tile row ra[i], c2 c3 at ra8[i],
  // columns 2 t .. + 1 of weight rows rb[j] - g .. + 8).
  std::function<void(MmaTileScope &, mlir::ValueRange results)> epilogue;
};

kernels::KernelSpec buildMmaTileKernel(const MmaTileKernel &kernel);

// A `load` helper: this thread's 16 activations of row [`rowIdx`, at + lk
// ..] of the f32 memref `x`.
std::array<mlir::Value, 4> mmaActivationLoad(MmaTileScope &s, mlir::Value x,
                                             mlir::ValueRange rowIdx, mlir::Value at);

} // namespace kiln::nvptx
