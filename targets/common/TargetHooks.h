// What the shared kernel lowering asks a target: which kernel each graph op
// gets and how it is launched. The defaults are the generic kernels every
// target can run (one launch part a token, or the vector GEMM); the GPU
// targets share their warp and block kernels through GpuTargetHooks
// (GpuHooks.h), and each target adds its matrix-core kernels. The shared
// lowering (LowerToPlan.cpp) builds buffers and launches and never asks what
// kind of target it lowers for.
#pragma once

#include "targets/common/AttentionShape.h"
#include "targets/common/KernelSpec.h"
#include "targets/common/WeightTransform.h"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace kiln::kernels {

// How many independent pieces of work a launch has: constant + perToken * T.
// A GPU kernel that shares data across a block (shared memory, barriers)
// names the block it was written for: `block` threads, which divide the work.
struct Work {
  int64_t constant = 0;
  int64_t perToken = 0;
  int64_t block = 0;
};

// A launch's shape: CPU parts, or GPU blocks of threads.
struct LaunchShape {
  int64_t maxParts = 1;           // CPU: parts the runtime may run at once
  std::optional<Work> gridBlocks; // GPU: blocks (may grow with T)
  int64_t blockThreads = 0;       // GPU: threads per block
};

// A MegaMoE stage split over an expert group: `experts` of them on each of
// `members` ranks, for entry points of up to `maxRows` tokens.
struct PeerMegaMoEShape {
  int64_t experts, k, intermediate, latent;
  double eps;
  bool nvfp4;
  int64_t members, maxRows;
};

// A kernel with the launch it needs.
struct KernelLaunch {
  KernelSpec kernel;
  Work work;
};

class TargetHooks {
public:
  virtual ~TargetHooks() = default;
  virtual std::string name() const = 0;

  // Row-wise ops, over every token row (arguments as Generators.h lists them
  // for the generic kernel of the same name; scalars tokens, part, parts).
  virtual KernelLaunch embedKernel(int64_t vocab, int64_t hidden) const;
  virtual KernelLaunch rmsNormKernel(int64_t width, double eps) const;
  virtual KernelLaunch headNormKernel(int64_t heads, int64_t headDim, double eps) const;
  virtual KernelLaunch ropeKernel(int64_t heads, int64_t headDim, double theta) const;
  // kiln.head_norm_rope: (x, weight, positions, y; tokens, part, parts). The
  // defaults compose the two ops' row stages (HeadRowKernels.h).
  virtual KernelLaunch headNormRopeKernel(int64_t heads, int64_t headDim, double eps,
                                          double theta) const;
  virtual KernelLaunch normResidualKernel(int64_t width, double postEps, double nextEps) const;
  // The two norms writing their normed rows also as bf16, an argument after
  // the f32 result (the copy a matrix GEMM's `cast` would make, exactly):
  // none by default.
  virtual std::optional<KernelLaunch> rmsNormKernelWithBf16(int64_t width, double eps) const {
    return std::nullopt;
  }
  virtual std::optional<KernelLaunch> normResidualKernelWithBf16(int64_t width, double postEps,
                                                                 double nextEps) const {
    return std::nullopt;
  }
  virtual KernelLaunch routerTopKKernel(int64_t experts, int64_t k) const;

  // y = x · Wᵀ for bf16 W [n, k] as the checkpoint has it (x, W, y), where no
  // matrix or tiled GEMM serves: over `count` rows from `first` (scalars
  // first, count, part, parts) or, with `everyRow`, over all T rows (scalars
  // tokens, part, parts). `maxRows`: the most rows one launch sees (1 where
  // only one row is read); `splitRows`: a product of few output rows may
  // spread each row over several warps.
  struct Gemv {
    KernelSpec kernel;
    Work work;
    bool everyRow = false;
  };
  virtual Gemv gemv(int64_t n, int64_t k, int64_t maxRows, bool splitRows) const;
  // Two such products of one x with two weights of one shape (x, W0, W1, y0,
  // y1; scalars first, count, part, parts), in one launch where the target
  // has a kernel for it, each y exactly gemv's: the few-row products a
  // decode step runs side by side (a layer's k and v projections), whose
  // launches are short enough that their latency, not their bytes, is what
  // they cost. None otherwise.
  virtual std::optional<Gemv> gemvPair(int64_t /*n*/, int64_t /*k*/) const { return std::nullopt; }
  // A tiled GEMM y[rows, n] = x'[rows, k] · Wᵀ for bf16 weights, with its
  // launch: arguments (x', W, y; rows, part, parts), x' padded to a multiple
  // of 16 rows; or none, and the vector GEMM serves. The target says how it
  // reads them: the weights' layout (x86's AMX tiles and vector dot products
  // read VNNI blocks), and the kernel writing x' from the f32 activations
  // (x, x'; first row, part, parts), a bf16 copy on x86.
  struct TiledGemm {
    KernelSpec kernel;
    Work work;
    Transform weights = Transform::None;
    KernelSpec cast;
    Work castWork;
  };
  // `decodeStep`: a GEMM of a decode step's entry (decode, batched decode,
  // verify), whose results must be the decode entry's bit for bit (greedy
  // speculation and batching give decode's tokens), so all of them take one
  // kernel family; a prefill entry's may take another.
  virtual std::optional<TiledGemm> tiledGemm(int64_t n, int64_t k, bool decodeStep) const = 0;
  // A matrix-core GEMM for prefill-shaped products (entry points of up to
  // `maxTokens` > 1 tokens): y[T, n] = x[T, k] · Wᵀ straight from the f32
  // activations and the checkpoint's bf16 weights, with the launch it needs;
  // or none, and the target's GEMV serves.
  struct MatrixGemm {
    KernelSpec kernel;
    Work work;
    // Split-K (splits > 1): the kernel writes [splits, T, n] partial sums
    // (x, W, partial; T) and `sum` adds them into y (partial, y; T).
    int64_t splits = 1;
    std::optional<KernelSpec> sum;
    Work sumWork;
    // With `cast`, the kernel reads a bf16 copy of x that `cast` writes (x,
    // x_bf16; T) instead of x.
    std::optional<KernelSpec> cast;
    Work castWork;
    // The kernel's scalars after its buffers.
    std::vector<std::string> scalars = {"tokens:0", "part", "parts"};
  };
  // `exactInput`: the products decide something discrete (a router's
  // logits pick experts), so x must reach them unrounded (as f32, or split
  // into bf16 halves), not as bf16.
  virtual std::optional<MatrixGemm> matrixGemm(int64_t /*n*/, int64_t /*k*/, int64_t /*maxTokens*/,
                                               bool /*exactInput*/) const {
    return std::nullopt;
  }
  // The MegaMoE expert stage of prefill on matrix cores (entry points of up
  // to `maxTokens` > 1 tokens): a kernel that groups the (token, expert)
  // items by expert into i32 buffers of `metaWords`, `tileWords` and
  // `itemWords` (idx, the buffers; T), then grouped gate/up with SwiGLU (z,
  // buffers, gate and up weights, h) and down (h, buffers, down weights, y),
  // each with its launch; or none, and the GEMVs serve.
  struct MatrixExperts {
    KernelSpec lists, gateUp, down;
    Work listsWork, gateUpWork, downWork;
    int64_t metaWords = 0, tileWords = 0, itemWords = 0;
    // Kernels that read their rows as bf16 in tile order (Hopper's wgmma,
    // whose TMA copies whole tiles): `rows` (z, buffers, x) first writes the
    // items' z rows into x [tileRows + k T, latent] bf16, gate/up reads x
    // instead of z and writes h as [tileRows + k T, intermediate] bf16 in
    // the same order, and down reads that h.
    std::optional<KernelLaunch> rows;
    int64_t tileRows = 0;
    std::vector<std::string> gateUpScalars = {"part", "parts"};
    std::vector<std::string> downScalars = {"part", "parts"};
  };
  virtual std::optional<MatrixExperts> matrixExperts(int64_t /*experts*/, int64_t /*k*/,
                                                     int64_t /*intermediate*/, int64_t /*latent*/,
                                                     bool /*nvfp4*/, int64_t /*maxTokens*/) const {
    return std::nullopt;
  }
  // Expert parallelism's MegaMoE stage for entry points of few tokens as one
  // persistent kernel per rank that also combines across the expert group
  // through peer memory (targets/nvptx/PeerMegaMoE.h): its arguments are
  // (z, idx with global expert ids, weights, gate, up, down, post_norm, h,
  // [T, k, latent / 4] f32 scratch, the members' exchange addresses, y; T,
  // this rank's index in the
  // group), it needs `siteBytes` of exchange memory a launch site; or none,
  // and the separate kernels plus an all-reduce serve.
  struct PeerMegaMoE {
    KernelSpec kernel;
    Work work;
    int64_t siteBytes = 0;
  };
  virtual std::optional<PeerMegaMoE> peerMegaMoE(const PeerMegaMoEShape & /*shape*/) const {
    return std::nullopt;
  }
  // Prefill attention as one kernel over tiles of queries and keys (q, k, v,
  // k cache, v cache, y; tokens, past, part, parts), then the split path's
  // append of the new K/V to the cache; or none, and split attention (or the
  // generic kernel) serves. `maxTokens`: the entry's most tokens.
  //
  // With `stage`, this call's K/V are first written as bf16 by it (k, v,
  // keys and values [kvHeads, stagedRows, D] each; tokens, part, parts),
  // and `attend` also takes the two staged buffers after y, and
  // `attendScalars` (tokens, past, then its own, such as tensor maps over
  // them or over the caches).
  //
  // `bf16Output`: asked for where y's one reader is a GEMM that would cast
  // it to bf16; where the target's kernel writes y as bf16 (rounded to
  // nearest even, as the cast would), it says so in `bf16Output` and y is
  // bf16.
  struct TileAttention {
    KernelLaunch attend, append;
    std::optional<KernelLaunch> stage;
    int64_t stagedRows = 0;
    std::vector<std::string> attendScalars;
    bool bf16Output = false;
  };
  virtual std::optional<TileAttention> tileAttention(const AttentionShape & /*shape*/,
                                                     int64_t /*maxTokens*/,
                                                     bool /*bf16Output*/) const {
    return std::nullopt;
  }
  // Attention in three launches: per (token, query heads, split of the visible
  // keys) partials (q, k, v, k cache, v cache, [positions,] partials [T,
  // qHeads, splits, headDim + 4]; tokens, past, part, parts), their merge
  // (partials, y; tokens, part, parts) and the append of the new K/V to the
  // cache (k, v, k cache, v cache[, positions]; tokens, past, part, parts);
  // or none, and the generic attention kernel serves. `maxTokens`: the most
  // tokens of one conversation a launch sees (1 for decode, batched or not;
  // a batched verify's rows); `sequences`: how tokens map to conversations.
  struct SplitAttention {
    KernelLaunch partials, merge, append;
    int64_t splits = 1;
  };
  virtual std::optional<SplitAttention> splitAttention(const AttentionShape & /*shape*/,
                                                       int64_t /*maxTokens*/,
                                                       SequenceLayout /*sequences*/) const {
    return std::nullopt;
  }

  // The MegaMoE expert stage as separate launches: the products, by lists of
  // items per expert (`listed`, as matrixExperts gives them) or per item
  // (gateUp: z, idx, gate, up, h; down: h, idx, down, y; scalars tokens,
  // part, parts), then the experts' scales (y [T, k, latent], weights,
  // scales) and their weighted sum (y, idx, scales, post_norm, out), or
  // without `scales` a combine that computes them itself (y, idx, weights,
  // post_norm, out); or none, and the generic fused MegaMoE kernel serves.
  // `members`: the ranks of the expert group (each holding `experts`).
  struct ExpertStage {
    std::optional<MatrixExperts> listed;
    std::optional<KernelLaunch> gateUp, down, scales;
    KernelLaunch combine;
  };
  virtual std::optional<ExpertStage> expertStage(int64_t /*experts*/, int64_t /*k*/,
                                                 int64_t /*intermediate*/, int64_t /*latent*/,
                                                 double /*eps*/, bool /*nvfp4*/,
                                                 int64_t /*maxTokens*/, int64_t /*members*/) const {
    return std::nullopt;
  }

  // The kernel that picks greedy tokens where the logits are (Generators.h's
  // greedyKeys), for the runtime to launch; or none, and the host picks.
  virtual std::optional<KernelSpec> greedyKernel() const { return std::nullopt; }

  // The shape of a launch with `work` pieces, for entry points of up to
  // `maxTokens` tokens.
  virtual LaunchShape shape(Work work, int64_t maxTokens) const = 0;
};

} // namespace kiln::kernels
