// The reference interpreter: runs a kiln graph function on the CPU in fp32,
// op by op, with the semantics of ReferenceOps.h. Slow and obvious on
// purpose: it is what passes and code generators are checked against.
//
// Sharded programs run on simulated ranks: every rank executes the same
// function (SPMD) in lockstep, and the shard dialect's collectives
// (all_reduce, all_gather, reduce_scatter, all_to_all, all_slice) combine the
// ranks' values as Collectives.h describes.
#pragma once

#include "compiler/interpreter/HostTensor.h"
#include "compiler/interpreter/WeightSource.h"

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace mlir {
class Operation;
namespace func {
class FuncOp;
} // namespace func
} // namespace mlir

namespace kiln::interp {

// The numerics the interpreter follows: exact f32 (the default), or the
// compiled GEMMs' on tensor cores and x86 matrix units, which read each
// linear's input rounded to bf16 (routers' excepted: kiln::isRouterLogits),
// and the expert products theirs (z and the SwiGLU rows).
enum class LinearInputs { F32, Bf16 };
// Attention likewise: exact f32, or as the tensor-core attention kernels
// compute it, with q, k, v and the softmax numerators rounded to bf16 before
// their products (the normalising sum stays f32).
enum class AttentionInputs { F32, Bf16 };

class Interpreter {
public:
  explicit Interpreter(WeightSource &weights, LinearInputs linearInputs = LinearInputs::F32,
                       AttentionInputs attentionInputs = AttentionInputs::F32)
      : weights(weights), linearInputs(linearInputs), attentionInputs(attentionInputs) {}

  // Runs `func` on one rank. Shapes come from the values, so a graph built
  // with dynamic token counts runs on any prompt length. Throws
  // InterpreterError on a value the graph cannot take.
  std::vector<HostTensor> run(mlir::func::FuncOp func, const std::vector<HostTensor> &inputs);

  // Runs `func` on inputsPerRank.size() simulated ranks (each rank's
  // arguments in order) and returns each rank's results. The rank count must
  // equal the size of every grid a collective names.
  std::vector<std::vector<HostTensor>>
  runRanks(mlir::func::FuncOp func, const std::vector<std::vector<HostTensor>> &inputsPerRank);

  // Called with each kiln.attention op and its keys and values (exact, before
  // the cache's rounding) as it runs, once per rank: what a KV-scale
  // calibration measures.
  using AttentionObserver =
      std::function<void(mlir::Operation *attention, const HostTensor &k, const HostTensor &v)>;
  void observeAttention(AttentionObserver observer) { attentionObserver = std::move(observer); }

private:
  WeightSource &weights;
  LinearInputs linearInputs;
  AttentionInputs attentionInputs;
  AttentionObserver attentionObserver;
  // Weights decoded once and kept for later runs (greedy generation reruns
  // the whole prefix each step), by kiln.weight name.
  std::map<std::string, std::shared_ptr<const HostTensor>> weightCache;
};

// Greedy generation on a `@forward(ids, positions) -> logits` graph with a
// dynamic token count: recomputes the whole prefix each step.
std::vector<int32_t> generateGreedy(Interpreter &interpreter, mlir::func::FuncOp forward,
                                    std::vector<int32_t> prompt, int64_t newTokens);

// Index of the largest value (the lowest index on ties).
int32_t argmax(const float *values, int64_t n);

} // namespace kiln::interp
