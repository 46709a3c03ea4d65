// The shared body of Kiln's tensor-core kernels on NVIDIA GPUs: a block of 8
// warps computes a 128 x 128 tile of products of activation rows with weight
// rows through `mma.sync.m16n8k16` (bf16 in, f32 accumulate), walking the
// reduction 32 at a time. While the warps multiply the step in shared memory,
// each thread has the next step's share (16 activations, 16 weights) loading
// into registers.
//
// The activations are f32 in Kiln; the kernel splits each into a bf16 high
// part and a bf16 remainder and multiplies both, so products carry about 16
// bits of the activation, not 8: greedy decoding stays identical to the f32
// reference interpreter (weights are bf16, or NVFP4 values, which bf16 holds
// exactly).
//
// A kernel supplies what differs: how a block finds its tile, where its
// activation and weight rows come from, and where the results go.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

namespace kiln::nvptx {

constexpr int64_t kMmaTileM = 128, kMmaTileN = 128, kMmaTileK = 32, kMmaThreads = 256;

struct MmaTileKernel {
  std::string name;
  std::string args;   // the func's arguments before %part, %parts
  std::string tiling; // the kiln.tiling attribute's entries
  int64_t k = 0;      // the reduction length, a multiple of kMmaTileK
  // Function level, after %tid and %bid: defines i1 %live (the block has a
  // tile) and what `rows` needs.
  std::string setup;
  // Split-K: `setup` also defines the block's share of the reduction,
  // %k_begin .. %k_end (whole k steps), and %k_final = %k_end - 32;
  // otherwise a block covers 0 .. k.
  bool kRange = false;
  // Inside the live region, after the thread's staging slot (%lrow: tile row
  // 0..127 it stages, %lk: its first element of a k step): defines what the
  // loads below use.
  std::string rows;
  // Issues this thread's loads for the k step at index SSA `at`: 4 vector<4xf32>
  // of its activation row named `P`a0..3 (elements at + lk .. + 16) and the
  // weight row's raw loads.
  std::function<std::string(const std::string &P, const std::string &at)> load;
  // Turns the weight loads named with `P` into 2 vector<8xbf16> `P`b0, `P`b1.
  std::function<std::string(const std::string &P)> finish;
  // After the loop: %res#<4 i + j> holds mma tile (i, j) of the warp
  // (!llvm.struct<(f32 x 4)>: c0 c1 at tile row %ra<i>, c2 c3 at %ra8_<i>,
  // columns 2 %t .. + 1 of weight rows %rb<j> - %g .. + 8).
  std::string epilogue;
};

std::string mmaTileKernelText(const MmaTileKernel &kernel);

// A `load` helper: this thread's 16 activations of row [`rowIdx`, at + %lk
// ..] of `x` (memref type `xType`, f32) as 4 vector<4xf32> `P`a0..3.
std::string mmaActivationLoad(const std::string &x, const std::string &xType,
                              const std::string &rowIdx, const std::string &P,
                              const std::string &at);

} // namespace kiln::nvptx
