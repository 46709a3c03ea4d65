#include "targets/common/HeadRowKernels.h"

#include "targets/common/Generators.h"
#include "targets/common/KernelBuilder.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"

#include <cmath>

namespace kiln::kernels {

using namespace mlir;

namespace {

constexpr int64_t kWarp = 32;

VectorType f32s(Builder &b, int64_t width) { return VectorType::get({width}, b.getF32Type()); }

Value f32Const(ImplicitLocOpBuilder &b, double value) {
  return arith::ConstantFloatOp::create(b, b.getF32Type(), APFloat(float(value)));
}

// The widest of `candidates` that divides `half` and, where `lanes` > 1,
// still gives every lane a chunk.
int64_t chunkWidth(int64_t half, std::initializer_list<int64_t> candidates, int64_t lanes) {
  for (int64_t width : candidates)
    if (half % width == 0 && half / width >= lanes)
      return width;
  return 1;
}

std::string kernelName(const std::string &op, const std::string &form, int64_t heads,
                       int64_t headDim, const std::vector<HeadRowStage> &stages) {
  std::string name = (llvm::StringRef(op).starts_with("kiln.") ? op.substr(5) : op) + form + "_" +
                     std::to_string(heads) + "x" + std::to_string(headDim);
  for (const HeadRowStage &stage : stages)
    name += "_" + stage.label;
  return name;
}

// x, the stages' arguments, y, rows.
std::function<std::vector<Type>(Builder &)> kernelArgs(int64_t heads, int64_t headDim,
                                                       const std::vector<HeadRowStage> &stages) {
  return [=](Builder &b) {
    Type rows = MemRefType::get({ShapedType::kDynamic, heads, headDim}, b.getF32Type());
    std::vector<Type> types{rows};
    for (const HeadRowStage &stage : stages)
      for (Type type : stage.args(b))
        types.push_back(type);
    types.push_back(rows);
    types.push_back(b.getI64Type());
    return types;
  };
}

// Where each argument sits in a kernel built with kernelArgs().
struct ArgLayout {
  std::vector<std::vector<Value>> stageArgs;
  Value x, y;
  unsigned rows; // then part, parts
};

ArgLayout layoutArgs(KernelScope &k, const std::vector<HeadRowStage> &stages) {
  ArgLayout layout;
  layout.x = k.arg(0);
  unsigned next = 1;
  for (const HeadRowStage &stage : stages) {
    std::vector<Value> args;
    for (size_t i = 0, n = stage.args(k.b).size(); i < n; ++i)
      args.push_back(k.arg(next++));
    layout.stageArgs.push_back(std::move(args));
  }
  layout.y = k.arg(next++);
  layout.rows = next;
  return layout;
}

void runStages(HeadRowScope &scope, const std::vector<HeadRowStage> &stages,
               const ArgLayout &layout, HeadRow &row) {
  for (size_t s = 0; s < stages.size(); ++s)
    stages[s].apply(scope, layout.stageArgs[s], row);
}

// The sum over a warp's 32 lanes, in every lane.
Value warpSum(ImplicitLocOpBuilder &b, Value value) {
  return xorShuffleReduce(b, value, {16, 8, 4, 2, 1}, [&](Value own, Value other) {
    return arith::AddFOp::create(b, own, other).getResult();
  });
}

} // namespace

HeadRowStage headNormStage(int64_t headDim, double eps) {
  HeadRowStage stage;
  stage.label = "norm" + epsSuffix(eps);
  stage.args = [=](Builder &b) -> std::vector<Type> {
    return {MemRefType::get({headDim}, b.getBF16Type())};
  };
  stage.apply = [=](HeadRowScope &scope, const std::vector<Value> &args, HeadRow &row) {
    ImplicitLocOpBuilder &b = scope.b;
    VectorType vf = f32s(b, scope.width);
    auto vbf = VectorType::get({scope.width}, b.getBF16Type());
    Value squares = arith::ConstantOp::create(b, vf, DenseElementsAttr::get(vf, 0.0f));
    for (size_t i = 0; i < row.lo.size(); ++i) {
      squares = vector::FMAOp::create(b, row.lo[i], row.lo[i], squares);
      squares = vector::FMAOp::create(b, row.hi[i], row.hi[i], squares);
    }
    Value sum = scope.rowSum(vector::ReductionOp::create(b, vector::CombiningKind::ADD, squares));
    Value mean = arith::DivFOp::create(b, sum, f32Const(b, double(scope.headDim)));
    Value rms = math::SqrtOp::create(b, arith::AddFOp::create(b, mean, f32Const(b, eps)));
    Value inverse =
        vector::BroadcastOp::create(b, vf, arith::DivFOp::create(b, f32Const(b, 1.0), rms));
    Value half = arith::ConstantIndexOp::create(b, scope.headDim / 2);
    auto scaled = [&](Value v, Value at) {
      Value raw = vector::LoadOp::create(b, vbf, args[0], ValueRange{at});
      Value w = arith::ExtFOp::create(b, vf, raw);
      return arith::MulFOp::create(b, arith::MulFOp::create(b, v, inverse), w).getResult();
    };
    for (size_t i = 0; i < row.lo.size(); ++i) {
      row.lo[i] = scaled(row.lo[i], row.at[i]);
      row.hi[i] = scaled(row.hi[i], arith::AddIOp::create(b, row.at[i], half));
    }
  };
  return stage;
}

HeadRowStage ropeStage(int64_t headDim, double theta) {
  HeadRowStage stage;
  stage.label = "rope_theta" + std::to_string(static_cast<long long>(theta));
  stage.args = [](Builder &b) -> std::vector<Type> {
    return {MemRefType::get({ShapedType::kDynamic}, b.getI32Type())};
  };
  stage.apply = [=](HeadRowScope &scope, const std::vector<Value> &args, HeadRow &row) {
    ImplicitLocOpBuilder &b = scope.b;
    Type f64 = b.getF64Type(), f32 = b.getF32Type();
    Value position = arith::SIToFPOp::create(
        b, f64, memref::LoadOp::create(b, args[0], ValueRange{scope.token}).getResult());
    std::vector<double> frequencies;
    for (int64_t j = 0; j < headDim / 2; ++j)
      frequencies.push_back(std::pow(theta, -2.0 * double(j) / double(headDim)));
    const std::string name = scope.kernel.func.getName().str() + "_rope_frequencies";
    Value table =
        memref::GetGlobalOp::create(b, constantTable(scope.kernel, name, frequencies), name);
    for (size_t i = 0; i < row.lo.size(); ++i) {
      SmallVector<Value> cosines, sines;
      for (int64_t e = 0; e < scope.width; ++e) {
        Value j = arith::AddIOp::create(b, row.at[i], arith::ConstantIndexOp::create(b, e));
        Value freq = memref::LoadOp::create(b, table, ValueRange{j});
        Value angle = arith::MulFOp::create(b, position, freq);
        cosines.push_back(arith::TruncFOp::create(b, f32, math::CosOp::create(b, angle)));
        sines.push_back(arith::TruncFOp::create(b, f32, math::SinOp::create(b, angle)));
      }
      VectorType vf = f32s(b, scope.width);
      Value c = vector::FromElementsOp::create(b, vf, cosines);
      Value s = vector::FromElementsOp::create(b, vf, sines);
      Value lo = row.lo[i], hi = row.hi[i];
      row.lo[i] = arith::SubFOp::create(b, arith::MulFOp::create(b, lo, c),
                                        arith::MulFOp::create(b, hi, s));
      row.hi[i] = arith::AddFOp::create(b, arith::MulFOp::create(b, hi, c),
                                        arith::MulFOp::create(b, lo, s));
    }
  };
  return stage;
}

KernelSpec headRowThreads(const std::string &op, int64_t heads, int64_t headDim,
                          const std::vector<HeadRowStage> &stages) {
  const int64_t half = headDim / 2, width = chunkWidth(half, {8, 4, 2, 1}, 1);
  Tiling tiling;
  tiling.set("kind", "rows").set("parallel", "tokens");
  return buildKernel(
      kernelName(op, "", heads, headDim, stages), op, tiling, kernelArgs(heads, headDim, stages),
      [&](KernelScope &k) {
        ImplicitLocOpBuilder &b = k.b;
        ArgLayout layout = layoutArgs(k, stages);
        auto [begin, end] = partRange(b, k.argIndex(layout.rows), k.argIndex(layout.rows + 1),
                                      k.argIndex(layout.rows + 2));
        auto tokens = scf::ForOp::create(b, begin, end, k.index(1));
        b.setInsertionPointToStart(tokens.getBody());
        Value t = tokens.getInductionVar();
        auto headLoop = scf::ForOp::create(b, k.index(0), k.index(heads), k.index(1));
        b.setInsertionPointToStart(headLoop.getBody());
        Value h = headLoop.getInductionVar();
        VectorType vf = f32s(b, width);
        HeadRow row;
        for (int64_t j = 0; j < half; j += width) {
          row.at.push_back(k.index(j));
          row.lo.push_back(vector::LoadOp::create(b, vf, layout.x, ValueRange{t, h, k.index(j)}));
          row.hi.push_back(
              vector::LoadOp::create(b, vf, layout.x, ValueRange{t, h, k.index(j + half)}));
        }
        HeadRowScope scope{k, b, headDim, width, t, [](Value v) { return v; }};
        runStages(scope, stages, layout, row);
        for (size_t i = 0; i < row.lo.size(); ++i) {
          int64_t j = int64_t(i) * width;
          vector::StoreOp::create(b, row.lo[i], layout.y, ValueRange{t, h, k.index(j)});
          vector::StoreOp::create(b, row.hi[i], layout.y, ValueRange{t, h, k.index(j + half)});
        }
      });
}

KernelSpec headRowWarp(const std::string &op, int64_t heads, int64_t headDim,
                       const std::vector<HeadRowStage> &stages) {
  const int64_t half = headDim / 2, width = chunkWidth(half, {4, 2, 1}, kWarp);
  const int64_t chunks = (half / width + kWarp - 1) / kWarp;
  // Lanes past the row's end (head_dim < 64) hold zeros and store nothing.
  const bool ragged = chunks * kWarp * width != half;
  Tiling tiling;
  tiling.set("kind", "warp-rows").set("parallel", "tokens*heads");
  return buildKernel(
      kernelName(op, "_warp", heads, headDim, stages), op, tiling,
      kernelArgs(heads, headDim, stages), [&](KernelScope &k) {
        ImplicitLocOpBuilder &b = k.b;
        ArgLayout layout = layoutArgs(k, stages);
        Value part = k.argIndex(layout.rows + 1), parts = k.argIndex(layout.rows + 2);
        Value lane = arith::RemUIOp::create(b, part, k.index(kWarp));
        Value warp = arith::DivUIOp::create(b, part, k.index(kWarp));
        Value warps = arith::DivUIOp::create(b, parts, k.index(kWarp));
        Value items = arith::MulIOp::create(b, k.argIndex(layout.rows), k.index(heads));
        auto loop = scf::ForOp::create(b, warp, items, warps);
        b.setInsertionPointToStart(loop.getBody());
        Value item = loop.getInductionVar();
        Value t = arith::DivUIOp::create(b, item, k.index(heads));
        Value h = arith::RemUIOp::create(b, item, k.index(heads));
        VectorType vf = f32s(b, width);
        Value zeros = arith::ConstantOp::create(b, vf, DenseElementsAttr::get(vf, 0.0f));
        Value first = arith::MulIOp::create(b, lane, k.index(width));
        HeadRow row;
        std::vector<Value> active;
        for (int64_t c = 0; c < chunks; ++c) {
          Value j = arith::AddIOp::create(b, first, k.index(c * kWarp * width));
          Value at = j;
          if (ragged) {
            active.push_back(arith::CmpIOp::create(b, arith::CmpIPredicate::ult, j, k.index(half)));
            at = arith::MinUIOp::create(b, j, k.index(half - width));
          }
          Value lo = vector::LoadOp::create(b, vf, layout.x, ValueRange{t, h, at});
          Value hi = vector::LoadOp::create(
              b, vf, layout.x, ValueRange{t, h, arith::AddIOp::create(b, at, k.index(half))});
          if (ragged) {
            lo = arith::SelectOp::create(b, active.back(), lo, zeros);
            hi = arith::SelectOp::create(b, active.back(), hi, zeros);
          }
          row.at.push_back(at);
          row.lo.push_back(lo);
          row.hi.push_back(hi);
        }
        HeadRowScope scope{k, b, headDim, width, t, [&b](Value v) { return warpSum(b, v); }};
        runStages(scope, stages, layout, row);
        for (int64_t c = 0; c < chunks; ++c) {
          OpBuilder::InsertionGuard guard(b);
          if (ragged) {
            auto store = scf::IfOp::create(b, active[c], /*withElse=*/false);
            b.setInsertionPointToStart(&store.getThenRegion().front());
          }
          Value at = row.at[c];
          vector::StoreOp::create(b, row.lo[c], layout.y, ValueRange{t, h, at});
          vector::StoreOp::create(b, row.hi[c], layout.y,
                                  ValueRange{t, h, arith::AddIOp::create(b, at, k.index(half))});
        }
      });
}

} // namespace kiln::kernels
