// Lowers a single-rank kiln graph (after the graph pipeline) to a target's
// plan: one plan.entry per entry point (prefill, decode), the kernels it
// launches and the weights and KV caches it binds. The target answers the few
// questions that differ (TargetHooks): its tiled GEMM and launch shapes.
#pragma once

#include "targets/common/KernelSpec.h"
#include "targets/common/TargetHooks.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/OwningOpRef.h"
#include "mlir/Support/LogicalResult.h"

#include "runtime/core/DType.h"

#include "targets/common/CommGroups.h"

#include <cstdint>
#include <string>
#include <vector>

namespace kiln::kernels {

struct WeightInfo {
  std::string name;           // checkpoint name, "{e}" for stacks
  int64_t stack = 0;          // experts in a stack, 0 for one tensor
  std::vector<int64_t> shape; // one tensor's checkpoint shape
  DType dtype = DType::BF16;
  Transform transform = Transform::None;
  int64_t bytes = 0; // after transform and slice
  // A rank's piece (shard.all_slice of the weight): of a stack, its block of
  // `stack` experts; of a tensor, piece i of sliceCount along sliceDim; i is
  // the rank's index in comm group sliceGroup (-1: the whole weight).
  int64_t sliceDim = -1, sliceCount = 1, sliceGroup = -1;
};

struct KvCacheInfo {
  int64_t layer = 0;
  int64_t window = 0; // 0: global
  int64_t kvHeads = 0;
  int64_t headDim = 0;
  DType dtype = DType::F32; // the cache's element type
  // A sliding layer's ring slots: the window plus the positions a verify
  // call may roll back. 0 for a global layer.
  int64_t ring = 0;
  // A global layer's page (LowerOptions::kvPageTokens); 0 unpaged.
  int64_t pageTokens = 0;
};

struct EntryInfo {
  std::string name;
  int64_t maxTokens = 1;
  bool logitsPerToken = false; // logits of every token (else the last only)
  // 0: the call's tokens continue one conversation. N: token t is a token
  // of conversation t / rowsPerSequence of N, at positions[t] (batched
  // decode: each conversation's next token; batched verify: each one's
  // last accepted token and drafts).
  int64_t sequences = 0;
  // Sequence parallelism (the "prefill_sp" entry, from the SP graph): the
  // ranks that share a call's tokens; T is each rank's share.
  int64_t split = 1;
  int64_t rowsPerSequence = 1;
};

struct LoweredModel {
  mlir::OwningOpRef<mlir::ModuleOp> plan; // plan.entry ops, offsets not yet assigned
  std::vector<KernelSpec> kernels;        // each once, in first-use order
  std::vector<WeightInfo> weights;
  std::vector<KvCacheInfo> kvCaches;
  std::vector<EntryInfo> entries;
  // Multi-rank plans: the groups collectives, slices and group:N scalars name.
  std::vector<CommGroupInfo> commGroups;
};

struct LowerOptions {
  int64_t maxPrefillTokens = 64;
  // Conversations a `decode_batch` entry point steps at once; 1: no such
  // entry.
  int64_t decodeBatch = 1;
  // Tokens of a `verify` entry point (speculative decoding: the last
  // accepted token and its drafts, logits for each); 0: no such entry. Its
  // caller may roll back all but the first, so sliding rings keep that many
  // slots beyond their window. With decodeBatch > 1 also `verify_batch`:
  // that many rows for each of the batch's conversations, where the two
  // multiply to at most 128 rows (beyond, the products would round as
  // prefill's).
  int64_t verifyTokens = 0;
  // Positions of a page of the global layers' KV caches: the caches are one
  // pool of pages, and the attention kernels take the page table (the plan's
  // input 2, i32, each conversation's pages in order); 0: unpaged.
  int64_t kvPageTokens = 0;
  // The same model after the graph pipeline with sequence parallelism: it
  // becomes a "prefill_sp" entry whose calls split their tokens over the TP
  // group (null: none).
  mlir::ModuleOp spGraph;
  // Expert parallelism's combine for few-token entry points: through the
  // expert group's peer memory inside one persistent MegaMoE kernel, where
  // the target has one (true), or as an all-reduce after separate kernels.
  bool peerExchange = true;
};

// The graph must hold one `func.func @forward(ids, positions) -> logits` with
// a dynamic token count. A sharded graph (kiln-shard) becomes one plan every
// rank runs: sliced weights, plan.collective steps for its all-reduces and
// column all-gathers, and expert-parallel kiln.megamoe as local experts plus
// an all-reduce. Emits an error on the op and fails for an op no kernel
// implements (sequence parallelism's token collectives among them).
mlir::FailureOr<LoweredModel> lowerToPlan(mlir::ModuleOp graph, const LowerOptions &options,
                                          const TargetHooks &hooks);

} // namespace kiln::kernels
