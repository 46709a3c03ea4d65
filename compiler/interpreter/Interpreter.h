// The reference interpreter: runs a kiln graph function on the CPU in fp32,
// op by op, with the semantics of ReferenceOps.h. Slow and obvious on
// purpose: it is what passes and code generators are checked against.
#pragma once

#include "compiler/interpreter/HostTensor.h"
#include "compiler/interpreter/WeightSource.h"

#include <vector>

namespace mlir::func {
class FuncOp;
} // namespace mlir::func

namespace kiln::interp {

class Interpreter {
public:
  explicit Interpreter(WeightSource &weights) : weights(weights) {}

  // Runs `func` on `inputs` (one per argument). Shapes come from the values,
  // so a graph built with dynamic token counts runs on any prompt length.
  // Throws InterpreterError on a value the graph cannot take.
  std::vector<HostTensor> run(mlir::func::FuncOp func, const std::vector<HostTensor> &inputs);

private:
  WeightSource &weights;
};

// Greedy generation on a `@forward(ids, positions) -> logits` graph with a
// dynamic token count: recomputes the whole prefix each step.
std::vector<int32_t> generateGreedy(Interpreter &interpreter, mlir::func::FuncOp forward,
                                    std::vector<int32_t> prompt, int64_t newTokens);

// Index of the largest value (the lowest index on ties).
int32_t argmax(const float *values, int64_t n);

} // namespace kiln::interp
