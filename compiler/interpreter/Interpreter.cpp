#include "compiler/interpreter/Interpreter.h"

#include "compiler/interpreter/Collectives.h"
#include "compiler/interpreter/ReferenceOps.h"
#include "dialects/kiln/KilnOps.h"
#include "runtime/safetensors/NonFinite.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Shard/IR/ShardOps.h"
#include "mlir/IR/SymbolTable.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/TypeSwitch.h"
#include "llvm/Support/raw_ostream.h"

#include <functional>
#include <memory>

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
  mlir::RankedTensorType type = op.getResult().getType();
  auto shape = type.getShape();
  if (value.shape != std::vector<int64_t>(shape.begin(), shape.end())) {
    std::string declared;
    llvm::raw_string_ostream(declared) << type;
    throw InterpreterError("weight '" + op.getName().str() + "' is " + value.shapeString() +
                           " in the checkpoint but the graph declares " + declared);
  }
}

double f64(mlir::FloatAttr attr) { return attr.getValueAsDouble(); }

// One rank's values. Shared pointers let every rank hold the same weight
// without a copy.
using ValueMap = llvm::DenseMap<mlir::Value, std::shared_ptr<const HostTensor>>;

// Executes one non-collective op on one rank. Returns false for ops it does
// not know (the caller reports them).
bool execute(mlir::Operation &op, ValueMap &values, int64_t rank, LinearInputs linearInputs,
             AttentionInputs attentionInputs) {
  auto in = [&](mlir::Value v) -> const HostTensor & { return *values.find(v)->second; };
  auto set = [&](mlir::Value v, HostTensor t) {
    values[v] = std::make_shared<const HostTensor>(std::move(t));
  };
  bool known = true;
  llvm::TypeSwitch<mlir::Operation *>(&op)
      .Case([&](Nvfp4DequantOp o) {
        set(o.getResult(), nvfp4Dequant(in(o.getPacked()), in(o.getScales()), in(o.getGlobal())));
      })
      .Case([&](EmbedOp o) { set(o.getResult(), embed(in(o.getTable()), in(o.getIds()))); })
      .Case([&](RmsNormOp o) {
        set(o.getResult(), rmsNorm(in(o.getInput()), in(o.getWeight()), f64(o.getEpsAttr())));
      })
      .Case([&](HeadNormOp o) {
        set(o.getResult(), rmsNorm(in(o.getInput()), in(o.getWeight()), f64(o.getEpsAttr())));
      })
      .Case([&](MulOp o) { set(o.getResult(), mul(in(o.getLhs()), in(o.getRhs()))); })
      .Case([&](AddOp o) { set(o.getResult(), add(in(o.getLhs()), in(o.getRhs()))); })
      .Case([&](LinearOp o) {
        const HostTensor &x = in(o.getInput());
        set(o.getResult(), linearInputs == LinearInputs::Bf16 && !isRouterLogits(o)
                               ? linear(roundToBf16(x), in(o.getWeight()))
                               : linear(x, in(o.getWeight())));
      })
      .Case([&](SplitHeadsOp o) {
        const HostTensor &x = in(o.getInput());
        int64_t heads = o.getResult().getType().getDimSize(1);
        set(o.getResult(), reshape(x, {x.dim(0), heads, x.dim(1) / heads}));
      })
      .Case([&](MergeHeadsOp o) {
        const HostTensor &x = in(o.getInput());
        set(o.getResult(), reshape(x, {x.dim(0), x.dim(1) * x.dim(2)}));
      })
      .Case([&](RopeOp o) {
        set(o.getResult(), rope(in(o.getInput()), in(o.getPositions()), f64(o.getThetaAttr())));
      })
      .Case([&](HeadNormRopeOp o) {
        set(o.getResult(), rope(rmsNorm(in(o.getInput()), in(o.getWeight()), f64(o.getEpsAttr())),
                                in(o.getPositions()), f64(o.getThetaAttr())));
      })
      .Case([&](AttentionOp o) {
        const HostTensor &k = in(o.getK()), &v = in(o.getV());
        // Keys and values as the KV cache holds them.
        std::optional<mlir::Type> kvType = o.getKvType();
        auto cached = [&](const HostTensor &x, int which) -> HostTensor {
          if (!kvType || kvType->isF32())
            return x;
          if (kvType->isBF16())
            return roundToBf16(x);
          std::optional<llvm::ArrayRef<double>> scales = o.getKvScales();
          return roundToE4m3(x, scales ? static_cast<float>((*scales)[which]) : 1.0f);
        };
        set(o.getResult(), attention(in(o.getQ()), cached(k, 0), cached(v, 1), in(o.getPositions()),
                                     f64(o.getScaleAttr()), o.getWindow(),
                                     attentionInputs == AttentionInputs::Bf16));
      })
      .Case([&](RouterTopKOp o) {
        TopK topk = routerTopK(in(o.getLogits()), o.getK());
        set(o.getWeights(), std::move(topk.weights));
        set(o.getIndices(), std::move(topk.indices));
      })
      .Case([&](ExpertSwiGLUOp o) {
        set(o.getResult(),
            expertSwiGLU(in(o.getInput()), in(o.getIndices()), in(o.getGate()), in(o.getUp()),
                         in(o.getDown()), linearInputs == LinearInputs::Bf16));
      })
      .Case([&](ExpertNormOp o) {
        set(o.getResult(), expertNorm(in(o.getInput()), in(o.getIndices()), in(o.getWeight()),
                                      f64(o.getEpsAttr())));
      })
      .Case([&](CombineOp o) { set(o.getResult(), combine(in(o.getInput()), in(o.getWeights()))); })
      .Case([&](LogitsOp o) {
        set(o.getResult(), logits(in(o.getInput()), in(o.getHead()), o.getLastOnly()));
      })
      .Case([&](NormResidualOp o) {
        auto [h, y] = normResidual(in(o.getResidual()), in(o.getUpdate()), in(o.getPostWeight()),
                                   in(o.getGate()), in(o.getNextWeight()), f64(o.getPostEpsAttr()),
                                   f64(o.getNextEpsAttr()));
        set(o.getNewResidual(), std::move(h));
        set(o.getNormed(), std::move(y));
      })
      .Case([&](MegaMoEOp o) {
        if (o.getGridAttr()) {
          known = false; // spans ranks: executeCollective runs it
          return;
        }
        ExpertStacks all{&in(o.getGate()), &in(o.getUp()), &in(o.getDown()), &in(o.getPostNorm())};
        set(o.getResult(),
            megaMoE(in(o.getInput()), in(o.getIndices()), in(o.getWeights()), {all},
                    o.getNumExperts(), f64(o.getEpsAttr()), linearInputs == LinearInputs::Bf16));
      })
      .Case([&](mlir::shard::ProcessLinearIndexOp o) {
        set(o.getResult(), HostTensor::ints({}, {static_cast<int32_t>(rank)}));
      })
      .Default([&](mlir::Operation *) { known = false; });
  return known;
}

// The grid a collective names, checked against the number of ranks.
std::vector<int64_t> gridShape(mlir::Operation *op, mlir::FlatSymbolRefAttr name, int64_t ranks) {
  auto grid = mlir::SymbolTable::lookupNearestSymbolFrom<mlir::shard::GridOp>(op, name);
  if (!grid)
    throw InterpreterError("no shard.grid named " + name.getValue().str());
  std::vector<int64_t> shape(grid.getShape().begin(), grid.getShape().end());
  int64_t size = 1;
  for (int64_t d : shape) {
    if (d <= 0)
      throw InterpreterError("grid @" + name.getValue().str() + " has a dynamic axis");
    size *= d;
  }
  if (size != ranks)
    throw InterpreterError("grid @" + name.getValue().str() + " has " + std::to_string(size) +
                           " devices but " + std::to_string(ranks) + " ranks are simulated");
  return shape;
}

Reduction reductionOf(mlir::shard::ReductionKind kind) {
  switch (kind) {
  case mlir::shard::ReductionKind::Sum:
    return Reduction::Sum;
  case mlir::shard::ReductionKind::Max:
    return Reduction::Max;
  case mlir::shard::ReductionKind::Min:
    return Reduction::Min;
  case mlir::shard::ReductionKind::Product:
    return Reduction::Product;
  default:
    throw InterpreterError("unsupported reduction " +
                           mlir::shard::stringifyReductionKind(kind).str());
  }
}

// Executes a collective across all ranks at once. Returns false if `op` is
// not a collective.
bool executeCollective(mlir::Operation &op, std::vector<ValueMap> &ranks) {
  int64_t world = static_cast<int64_t>(ranks.size());
  auto run = [&](mlir::FlatSymbolRefAttr grid, llvm::ArrayRef<int16_t> axes, mlir::Value input,
                 mlir::Value result,
                 const std::function<HostTensor(const std::vector<const HostTensor *> &, int64_t)>
                     &combine) {
    std::vector<int64_t> shape = gridShape(&op, grid, world);
    std::vector<int64_t> gridAxes(axes.begin(), axes.end());
    std::vector<std::shared_ptr<const HostTensor>> out(world);
    for (int64_t r = 0; r < world; ++r) {
      std::vector<int64_t> group = groupOf(shape, gridAxes, r);
      std::vector<const HostTensor *> members;
      for (int64_t m : group)
        members.push_back(ranks[m].find(input)->second.get());
      int64_t self = std::find(group.begin(), group.end(), r) - group.begin();
      out[r] = std::make_shared<const HostTensor>(combine(members, self));
    }
    for (int64_t r = 0; r < world; ++r)
      ranks[r][result] = out[r];
  };
  bool known = true;
  llvm::TypeSwitch<mlir::Operation *>(&op)
      .Case([&](mlir::shard::AllReduceOp o) {
        Reduction kind = reductionOf(o.getReduction());
        run(o.getGridAttr(), o.getGridAxes(), o.getInput(), o.getResult(),
            [&](const auto &members, int64_t) { return reduceAll(members, kind); });
      })
      .Case([&](mlir::shard::AllGatherOp o) {
        int64_t axis = o.getGatherAxis().getSExtValue();
        run(o.getGridAttr(), o.getGridAxes(), o.getInput(), o.getResult(),
            [&](const auto &members, int64_t) { return concatAxis(members, axis); });
      })
      .Case([&](mlir::shard::ReduceScatterOp o) {
        Reduction kind = reductionOf(o.getReduction());
        int64_t axis = o.getScatterAxis().getSExtValue();
        run(o.getGridAttr(), o.getGridAxes(), o.getInput(), o.getResult(),
            [&](const auto &members, int64_t self) {
              return sliceAxis(reduceAll(members, kind), axis, self, members.size());
            });
      })
      .Case([&](mlir::shard::AllToAllOp o) {
        int64_t split = o.getSplitAxis().getSExtValue();
        int64_t concat = o.getConcatAxis().getSExtValue();
        run(o.getGridAttr(), o.getGridAxes(), o.getInput(), o.getResult(),
            [&](const auto &members, int64_t self) {
              std::vector<HostTensor> pieces;
              for (const HostTensor *m : members)
                pieces.push_back(sliceAxis(*m, split, self, members.size()));
              std::vector<const HostTensor *> parts;
              for (const HostTensor &p : pieces)
                parts.push_back(&p);
              return concatAxis(parts, concat);
            });
      })
      .Case([&](LocalExpertsOp o) {
        int64_t experts = o.getNumExperts();
        run(o.getGridAttr(), o.getGridAxes(), o.getIndices(), o.getResult(),
            [&](const auto &members, int64_t self) {
              return localExperts(*members[self], experts, self, members.size());
            });
      })
      .Case([&](MegaMoEOp o) {
        if (!o.getGridAttr()) {
          known = false;
          return;
        }
        // Every rank's stacks, by rank, for the owners of each group.
        std::vector<int64_t> shape = gridShape(&op, o.getGridAttr(), world);
        std::vector<int64_t> axes(o.getGridAxes()->begin(), o.getGridAxes()->end());
        std::vector<std::shared_ptr<const HostTensor>> out(world);
        for (int64_t r = 0; r < world; ++r) {
          std::vector<ExpertStacks> owners;
          for (int64_t m : groupOf(shape, axes, r)) {
            auto at = [&](mlir::Value v) { return ranks[m].find(v)->second.get(); };
            owners.push_back(
                {at(o.getGate()), at(o.getUp()), at(o.getDown()), at(o.getPostNorm())});
          }
          auto mine = [&](mlir::Value v) -> const HostTensor & {
            return *ranks[r].find(v)->second;
          };
          out[r] = std::make_shared<const HostTensor>(
              megaMoE(mine(o.getInput()), mine(o.getIndices()), mine(o.getWeights()), owners,
                      o.getNumExperts(), o.getEps().convertToDouble()));
        }
        for (int64_t r = 0; r < world; ++r)
          ranks[r][o.getResult()] = out[r];
      })
      .Case([&](mlir::shard::AllSliceOp o) {
        int64_t axis = o.getSliceAxis().getSExtValue();
        run(o.getGridAttr(), o.getGridAxes(), o.getInput(), o.getResult(),
            [&](const auto &members, int64_t self) {
              return sliceAxis(*members[self], axis, self, members.size());
            });
      })
      .Default([&](mlir::Operation *) { known = false; });
  return known;
}

} // namespace

std::vector<HostTensor> Interpreter::run(mlir::func::FuncOp func,
                                         const std::vector<HostTensor> &inputs) {
  return runRanks(func, {inputs}).front();
}

std::vector<std::vector<HostTensor>>
Interpreter::runRanks(mlir::func::FuncOp func,
                      const std::vector<std::vector<HostTensor>> &inputsPerRank) {
  int64_t world = static_cast<int64_t>(inputsPerRank.size());
  if (world < 1)
    throw InterpreterError("at least one rank is needed");
  std::vector<ValueMap> ranks(world);
  for (int64_t r = 0; r < world; ++r) {
    const std::vector<HostTensor> &inputs = inputsPerRank[r];
    if (inputs.size() != func.getNumArguments())
      throw InterpreterError("@" + func.getName().str() + " takes " +
                             std::to_string(func.getNumArguments()) + " inputs, rank " +
                             std::to_string(r) + " has " + std::to_string(inputs.size()));
    for (auto [arg, input] : llvm::zip(func.getArguments(), inputs))
      ranks[r][arg] = std::make_shared<const HostTensor>(input);
  }

  std::vector<std::vector<HostTensor>> results(world);
  for (mlir::Operation &op : func.getBody().front()) {
    if (auto weight = llvm::dyn_cast<WeightOp>(op)) {
      // Loaded once, shared by every rank and kept for the next run.
      std::shared_ptr<const HostTensor> &value = weightCache[weight.getName().str()];
      if (!value)
        value = std::make_shared<const HostTensor>(loadWeight(weights, weight));
      checkShape(weight, *value);
      for (ValueMap &values : ranks)
        values[weight.getResult()] = value;
      continue;
    }
    if (auto ret = llvm::dyn_cast<mlir::func::ReturnOp>(op)) {
      for (int64_t r = 0; r < world; ++r)
        for (mlir::Value v : ret.getOperands())
          results[r].push_back(*ranks[r].find(v)->second);
      continue;
    }
    if (executeCollective(op, ranks))
      continue;
    if (attentionObserver && llvm::isa<AttentionOp>(op))
      for (ValueMap &values : ranks)
        attentionObserver(&op, *values.find(op.getOperand(1))->second,
                          *values.find(op.getOperand(2))->second);
    for (int64_t r = 0; r < world; ++r)
      if (!execute(op, ranks[r], r, linearInputs, attentionInputs))
        throw InterpreterError("the interpreter has no semantics for '" +
                               op.getName().getStringRef().str() + "'");
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
    std::vector<HostTensor> out =
        interpreter.run(forward, {HostTensor::ints({n}, tokens), HostTensor::ints({n}, positions)});
    const HostTensor &logits = out.at(0);
    int64_t vocab = logits.dim(1);
    const float *last = &logits.f[logits.f.size() - vocab];
    if (std::string found = nonFiniteLogits(last, static_cast<size_t>(vocab)); !found.empty())
      throw InterpreterError("greedy step " + std::to_string(step) + ": " + found +
                             ": a weight or the computation is not finite");
    int32_t next = argmax(last, vocab);
    generated.push_back(next);
    tokens.push_back(next);
  }
  return generated;
}

} // namespace kiln::interp
