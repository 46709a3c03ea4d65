// The x86 kernel generators, one per graph op (and per fused op). Each
// returns MLIR specialised to the op's static sizes; the token count T, the
// cached tokens and the launch part arrive as i64 arguments (docs/runtime-abi.md).
// Activations are f32; weights bf16 (a target's tile layout for its tiled
// GEMMs) or NVFP4; the KV cache f32 or bf16 (AttentionShape.h). Kernels are func.func ops whose
// last two arguments are the i64 %part and %parts: on a GPU target they become the thread's global
// index and the thread count (targets/nvptx).
#pragma once

#include "targets/common/AttentionShape.h"
#include "targets/common/KernelSpec.h"

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace mlir {
class Builder;
class ImplicitLocOpBuilder;
class Type;
class Value;
} // namespace mlir

namespace kiln::kernels {

// The name suffix of a batched entry's attention kernels ("_b8" for 8
// conversations, nothing for sequential ones).
std::string batchSuffix(SequenceLayout sequences);
// "_eps10000" for eps 1e-5: a norm kernel's name suffix.
std::string epsSuffix(double eps);
// An f64/f32 literal MLIR parses back to the same value.
std::string floatLiteral(double value);

// Synthetic weights generated where they live, bit for bit the host's
// (SynthesisKernels.cpp; the runtime launches them, no plan step does).
KernelSpec synthesizeBf16();
KernelSpec synthesizeNvfp4Amax();
KernelSpec synthesizeNvfp4Quant();

// GPU greedy decoding (GreedyKernel.cpp; the runtime launches it): each row
// of the logits' best entry as a 64-bit key in keys[row] (zeroed first),
// ordered like (logit, -index).
KernelSpec greedyKeys();

// Elementwise and norms (ElementwiseKernels.cpp).
KernelSpec castToBf16(int64_t width);
// The same on a GPU (GpuCastKernel.cpp): a thread per 8 elements of the T
// rows (x, x_bf16; T), launched as castBf16ThreadsWork.
bool castBf16ThreadsFit(int64_t width);
struct Work;
Work castBf16ThreadsWork(int64_t width);
KernelSpec castBf16Threads(int64_t width);
KernelSpec embed(int64_t vocab, int64_t hidden);
KernelSpec rmsNorm(int64_t width, double eps);
// RMSNorm of every [t, h, :] row of a [tokens, heads, headDim] tensor.
KernelSpec headNorm(int64_t heads, int64_t headDim, double eps);
KernelSpec normResidual(int64_t width, double postEps, double nextEps);
KernelSpec binary(const std::string &kind, int64_t width, bool rhsIsWeight, bool rhsIsVector);

// The vector GEMM (VectorGemm.cpp) every target has: y[r] = x[first + r] ·
// Wᵀ for r < count, weights [n, k] bf16 as the checkpoint has them. Targets
// with matrix tiles add their own (targets/x86/AmxGemm.h).
KernelSpec linearVector(int64_t n, int64_t k);

// Attention (AttentionKernels.cpp). Rotary embedding is a row stage
// (HeadRowKernels.h).
KernelSpec attention(const AttentionShape &shape, SequenceLayout sequences = {});

// Latent MoE (MoEKernels.cpp).
KernelSpec routerTopK(int64_t experts, int64_t k);
// Every router kernel's arguments (before %part, %parts): logits [T, E] f32,
// weights [T, k] f32, indices [T, k] i32, and T.
std::vector<mlir::Type> routerTopKArgs(mlir::Builder &b, int64_t experts, int64_t k);
KernelSpec megaMoE(int64_t experts, int64_t k, int64_t intermediate, int64_t latent, double eps,
                   bool nvfp4);

// The expert stage op by op (UnfusedMoEKernels.cpp), for unfused graphs.
KernelSpec expertSwiGLU(int64_t experts, int64_t k, int64_t intermediate, int64_t latent);
KernelSpec expertNorm(int64_t experts, int64_t k, int64_t latent, double eps);
KernelSpec combine(int64_t k, int64_t latent);
// Expert parallelism: idx [T, k] global expert ids -> this rank's local ids
// (id - member * localCount for its block, -1 for other ranks' experts);
// scalars: tokens, the rank's index in its expert group (group:N).
KernelSpec localExperts(int64_t k, int64_t localCount);
// Sequence parallelism: out [T, width] = rows member * T .. member * T + T - 1
// of the whole sequence `in`; scalars: tokens (T), the rank's index in its
// TP group (group:N).
KernelSpec sliceRows(int64_t width);
// Decodes a stack of NVFP4 matrices into bf16 (the dequantised weight that
// an unfused expert stage reads).
KernelSpec nvfp4Dequant(int64_t matrices, int64_t rows, int64_t cols);

// GPU kernels a warp at a time (WarpGemv.cpp, WarpAttention.cpp): their
// %part/%parts are a thread's global index and the thread count, and a launch
// gives each output element (row, token-head) a warp of 32 threads.
bool warpGemvFits(int64_t k);
bool warpMoEFits(int64_t intermediate, int64_t latent);
KernelSpec linearWarp(int64_t n, int64_t k);
// The same for a few tokens at once (batched decode): a warp per output row
// over `tokens` rows of x, each weight load shared by all of them.
KernelSpec linearWarpTokens(int64_t n, int64_t k, int64_t tokens);
// Batched decode (BlockGemv.cpp): a block of 8 warps per 32 output rows for up
// to kBlockGemvTokens tokens, x staged in shared memory once per block.
constexpr int64_t kBlockGemvTokens = 8;
bool blockGemvFits(int64_t k, int64_t tokens);
int64_t blockGemvRows();
KernelSpec linearBlockTokens(int64_t n, int64_t k, int64_t tokens);
// Few rows (n < 4096): a block of four warps per row, each a quarter of k;
// one row of x over many rows of weights (n >= 2048, k a multiple of 2048):
// a block of kWideSplits warps per row, each a whole number of 256-element
// chunks.
bool splitGemvFits(int64_t n, int64_t k);
constexpr int64_t kWideSplits = 8;
bool wideSplitGemvFits(int64_t n, int64_t k);
KernelSpec linearSplitBlock(int64_t n, int64_t k, int64_t splits = 4);
// Two such products of one x (a layer's k and v projections: x, w0, w1, y0,
// y1; first row, rows): 2n blocks, one launch. `broken`: the second product
// reads w0 (a fault the GPU checks must catch).
KernelSpec linearSplitBlockPair(int64_t n, int64_t k, bool broken = false);
// The MegaMoE stage's products: h = silu(gate z) * up z for every (token,
// selected expert, row), then y = down h.
KernelSpec expertGateUpWarp(int64_t experts, int64_t k, int64_t intermediate, int64_t latent,
                            bool nvfp4);
KernelSpec expertDownWarp(int64_t experts, int64_t k, int64_t intermediate, int64_t latent,
                          bool nvfp4);
// The same with NVFP4 weights for one token at a time (StagedExperts.cpp):
// blocks of warps whose items share one vector, staged once in shared
// memory in the lanes' order; launched as stagedGateUpWork / stagedDownWork.
bool stagedExpertsFit(int64_t intermediate, int64_t latent);
Work stagedGateUpWork(int64_t k, int64_t intermediate);
Work stagedDownWork(int64_t k, int64_t latent);
// Two E4M3 bytes (an i16, the first in its low byte) as vector<2xf16>
// (element 0 from the low byte), exactly: a target's conversion, with which
// the staged kernels compute in packed f16 pairs (PackedStagedDot.h).
using E4m3PairToF16 = std::function<mlir::Value(mlir::ImplicitLocOpBuilder &, mlir::Value)>;
// `dropLastChunk`: broken on purpose, its dots one 1024-element chunk short.
// `toF16`: the target's pair conversion, or null (f32 products).
KernelSpec expertGateUpStaged(int64_t experts, int64_t k, int64_t intermediate, int64_t latent,
                              bool dropLastChunk = false, const E4m3PairToF16 *toF16 = nullptr);
KernelSpec expertDownStaged(int64_t experts, int64_t k, int64_t intermediate, int64_t latent,
                            const E4m3PairToF16 *toF16 = nullptr);
// Row-wise ops on a GPU (GpuRowKernels.cpp): a block per token row for the
// RMSNorms of a hidden state, a warp per
// (token, head) for head norms and rotary embedding, a thread per 4 elements
// for the embedding gather and the experts' weighted sum.
bool gpuRowsFit(int64_t width);
// The threads of a row block for a row of `width` (up to 1024, 4 elements
// each per step); launch it as Work{0, threads, threads}.
int64_t rowBlockThreads(int64_t width);
// With `bf16Copy`, the normed row also as bf16 (an argument before rows):
// the copy a matrix-core GEMM reads, which spares it a cast kernel.
KernelSpec rmsNormBlock(int64_t width, double eps, bool bf16Copy = false);
KernelSpec normResidualBlock(int64_t width, double postEps, double nextEps, bool bf16Copy = false);
KernelSpec embedThreads(int64_t vocab, int64_t hidden);
// scale[t, j] = weight[t, j] / rms(y[t, j]), then out[t] = sum_j scale[t, j]
// * post_norm[e_j] * y[t, j].
KernelSpec expertScalesBlock(int64_t k, int64_t latent, double eps);
// The softmax top-k router a warp per token (experts % 32 == 0).
bool routerWarpFits(int64_t experts);
KernelSpec routerTopKWarp(int64_t experts, int64_t k);
KernelSpec expertCombineThreads(int64_t experts, int64_t k, int64_t latent);
// The two above as one kernel, a block per token that reads y once (its k
// rows held in registers across their sums of squares); the same arguments
// as expertCombineThreads with the router's weights for the scales. Where
// the rows divide evenly among the block's threads and hold in a few
// registers.
bool expertCombineBlockFits(int64_t k, int64_t latent);
KernelSpec expertCombineBlock(int64_t experts, int64_t k, int64_t latent, double eps,
                              bool broken = false);
// Attention as split-KV partials (one warp per token, query head and split),
// their merge, and the append of the new K/V to the cache. With `sequences`
// > 0 (batched decode) token t continues conversation t of `sequences`, at
// positions[t]; the kernels then also take the positions input.
bool warpAttentionFits(int64_t headDim);
// Query heads a split warp takes (a divisor of qHeads / kvHeads, at most 4):
// its launch is Work{0, 32 * qHeads / that * splits}.
int64_t attentionHeadsPerWarp(int64_t qHeads, int64_t kvHeads);
KernelSpec attentionSplitWarp(const AttentionShape &shape, int64_t splits,
                              SequenceLayout sequences = {});
KernelSpec attentionMergeWarp(int64_t qHeads, int64_t headDim, int64_t splits);
KernelSpec kvAppendWarp(const AttentionShape &shape, SequenceLayout sequences = {});

} // namespace kiln::kernels
