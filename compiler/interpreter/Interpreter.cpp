#include "compiler/interpreter/Interpreter.h"

#include "compiler/interpreter/ReferenceOps.h"
#include "dialects/kiln/KilnOps.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/TypeSwitch.h"

namespace kiln::interp {
namespace {

// A `{e}` stack: each expert's tensor, one after another.
HostTensor loadWeight(WeightSource &weights, WeightOp op) {
  if (!op.isExpertStack())
    return weights.load(op.getName().str());
  int64_t experts = op.getResult().getType().getDimSize(0);
  HostTensor stacked;
  for (int64_t e = 0; e < experts; ++e) {
    HostTensor one = weights.load(op.expandedName(e));
    if (e == 0) {
      stacked = one;
      stacked.shape.insert(stacked.shape.begin(), experts);
      stacked.f.reserve(one.f.size() * experts);
      stacked.i.reserve(one.i.size() * experts);
      continue;
    }
    if (one.shape != std::vector<int64_t>(stacked.shape.begin() + 1, stacked.shape.end()))
      throw InterpreterError("expert " + std::to_string(e) + " of '" + op.getName().str() +
                             "' is " + one.shapeString() + ", expert 0 is not");
    stacked.f.insert(stacked.f.end(), one.f.begin(), one.f.end());
    stacked.i.insert(stacked.i.end(), one.i.begin(), one.i.end());
  }
  return stacked;
}

// Checks that a loaded weight has the shape the graph declares.
void checkShape(WeightOp op, const HostTensor &value) {
  auto shape = op.getResult().getType().getShape();
  if (value.shape != std::vector<int64_t>(shape.begin(), shape.end()))
    throw InterpreterError("weight '" + op.getName().str() + "' is " + value.shapeString() +
                           " but the graph declares a different shape");
}

double f64(mlir::FloatAttr attr) { return attr.getValueAsDouble(); }

} // namespace

std::vector<HostTensor> Interpreter::run(mlir::func::FuncOp func,
                                         const std::vector<HostTensor> &inputs) {
  if (inputs.size() != func.getNumArguments())
    throw InterpreterError("@" + func.getName().str() + " takes " +
                           std::to_string(func.getNumArguments()) + " inputs, got " +
                           std::to_string(inputs.size()));
  llvm::DenseMap<mlir::Value, HostTensor> values;
  for (auto [arg, input] : llvm::zip(func.getArguments(), inputs))
    values[arg] = input;
  auto in = [&](mlir::Value v) -> const HostTensor & { return values.find(v)->second; };

  std::vector<HostTensor> results;
  for (mlir::Operation &op : func.getBody().front()) {
    llvm::TypeSwitch<mlir::Operation *>(&op)
        .Case([&](WeightOp w) {
          HostTensor value = loadWeight(weights, w);
          checkShape(w, value);
          values[w.getResult()] = std::move(value);
        })
        .Case([&](Nvfp4DequantOp o) {
          values[o.getResult()] =
              nvfp4Dequant(in(o.getPacked()), in(o.getScales()), in(o.getGlobal()));
        })
        .Case([&](EmbedOp o) { values[o.getResult()] = embed(in(o.getTable()), in(o.getIds())); })
        .Case([&](RmsNormOp o) {
          values[o.getResult()] = rmsNorm(in(o.getInput()), in(o.getWeight()), f64(o.getEpsAttr()));
        })
        .Case([&](HeadNormOp o) {
          values[o.getResult()] = rmsNorm(in(o.getInput()), in(o.getWeight()), f64(o.getEpsAttr()));
        })
        .Case([&](MulOp o) { values[o.getResult()] = mul(in(o.getLhs()), in(o.getRhs())); })
        .Case([&](AddOp o) { values[o.getResult()] = add(in(o.getLhs()), in(o.getRhs())); })
        .Case([&](LinearOp o) {
          values[o.getResult()] = linear(in(o.getInput()), in(o.getWeight()));
        })
        .Case([&](SplitHeadsOp o) {
          const HostTensor &x = in(o.getInput());
          int64_t heads = o.getResult().getType().getDimSize(1);
          values[o.getResult()] = reshape(x, {x.dim(0), heads, x.dim(1) / heads});
        })
        .Case([&](MergeHeadsOp o) {
          const HostTensor &x = in(o.getInput());
          values[o.getResult()] = reshape(x, {x.dim(0), x.dim(1) * x.dim(2)});
        })
        .Case([&](RopeOp o) {
          values[o.getResult()] = rope(in(o.getInput()), in(o.getPositions()), f64(o.getThetaAttr()));
        })
        .Case([&](AttentionOp o) {
          values[o.getResult()] = attention(in(o.getQ()), in(o.getK()), in(o.getV()),
                                            in(o.getPositions()), f64(o.getScaleAttr()),
                                            o.getWindow());
        })
        .Case([&](RouterTopKOp o) {
          TopK topk = routerTopK(in(o.getLogits()), o.getK());
          values[o.getWeights()] = std::move(topk.weights);
          values[o.getIndices()] = std::move(topk.indices);
        })
        .Case([&](ExpertSwiGLUOp o) {
          values[o.getResult()] = expertSwiGLU(in(o.getInput()), in(o.getIndices()),
                                               in(o.getGate()), in(o.getUp()), in(o.getDown()));
        })
        .Case([&](ExpertNormOp o) {
          values[o.getResult()] = expertNorm(in(o.getInput()), in(o.getIndices()),
                                             in(o.getWeight()), f64(o.getEpsAttr()));
        })
        .Case([&](CombineOp o) {
          values[o.getResult()] = combine(in(o.getInput()), in(o.getWeights()));
        })
        .Case([&](LogitsOp o) {
          values[o.getResult()] = logits(in(o.getInput()), in(o.getHead()), o.getLastOnly());
        })
        .Case([&](mlir::func::ReturnOp o) {
          for (mlir::Value v : o.getOperands())
            results.push_back(in(v));
        })
        .Default([&](mlir::Operation *other) {
          throw InterpreterError("the interpreter has no semantics for '" +
                                 other->getName().getStringRef().str() + "'");
        });
  }
  return results;
}

int32_t argmax(const float *values, int64_t n) {
  int32_t best = 0;
  for (int64_t k = 1; k < n; ++k)
    if (values[k] > values[best])
      best = static_cast<int32_t>(k);
  return best;
}

std::vector<int32_t> generateGreedy(Interpreter &interpreter, mlir::func::FuncOp forward,
                                    std::vector<int32_t> tokens, int64_t newTokens) {
  std::vector<int32_t> generated;
  for (int64_t step = 0; step < newTokens; ++step) {
    int64_t n = static_cast<int64_t>(tokens.size());
    std::vector<int32_t> positions(n);
    for (int64_t p = 0; p < n; ++p)
      positions[p] = static_cast<int32_t>(p);
    std::vector<HostTensor> out = interpreter.run(
        forward, {HostTensor::ints({n}, tokens), HostTensor::ints({n}, positions)});
    const HostTensor &logits = out.at(0);
    int64_t vocab = logits.dim(1);
    int32_t next = argmax(&logits.f[logits.f.size() - vocab], vocab);
    generated.push_back(next);
    tokens.push_back(next);
  }
  return generated;
}

} // namespace kiln::interp
