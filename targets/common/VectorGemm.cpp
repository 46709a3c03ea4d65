// The vector GEMM every target has: each part computes whole output columns
// (one weight row each) for every requested row of the input, in
// vector<16xf32> steps along k when k allows. Targets with matrix tiles use
// their tiled GEMM where its shapes fit (TargetHooks::tiledGemm). Built as
// typed IR (KernelBuilder.h).
#include "targets/common/Generators.h"
#include "targets/common/KernelBuilder.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"

namespace kiln::kernels {

using namespace mlir;

KernelSpec linearVector(int64_t n, int64_t k) {
  const int64_t lanes = k % 16 == 0 ? 16 : 1;
  std::string name = "linear_vec_" + std::to_string(n) + "x" + std::to_string(k);
  Tiling tiling;
  tiling.set("kind", "vector").set("lanes", lanes).set("parallel", "n");
  // x [?, k] f32, W [n, k] bf16, y [?, n] f32; the first row of x, the rows.
  auto args = [&](Builder &b) -> std::vector<Type> {
    const int64_t dynamic = ShapedType::kDynamic;
    return {MemRefType::get({dynamic, k}, b.getF32Type()), MemRefType::get({n, k}, b.getBF16Type()),
            MemRefType::get({dynamic, n}, b.getF32Type()), b.getI64Type(), b.getI64Type()};
  };
  return buildKernel(name, "kiln.linear", tiling, args, [&](KernelScope &s) {
    ImplicitLocOpBuilder &b = s.b;
    auto vf = VectorType::get({lanes}, b.getF32Type());
    auto vbf = VectorType::get({lanes}, b.getBF16Type());
    Value x = s.arg(0), w = s.arg(1), y = s.arg(2);
    Value c0 = s.index(0), c1 = s.index(1), step = s.index(lanes), kdim = s.index(k);
    Value ndim = s.index(n);
    Value rows = s.argIndex(4);
    Value first = s.argIndex(3);
    Value o = forEachRowOfPart(s, ndim);
    auto rowLoop = scf::ForOp::create(b, c0, rows, c1);
    b.setInsertionPointToStart(rowLoop.getBody());
    Value r = rowLoop.getInductionVar();
    Value zero = arith::ConstantOp::create(b, vf, DenseElementsAttr::get(vf, 0.0f));
    auto acc = scf::ForOp::create(b, c0, kdim, step, ValueRange{zero});
    {
      OpBuilder::InsertionGuard guard(b);
      b.setInsertionPointToStart(acc.getBody());
      Value kk = acc.getInductionVar();
      Value xr = arith::AddIOp::create(b, first, r);
      Value xv = vector::LoadOp::create(b, vf, x, ValueRange{xr, kk});
      Value wb = vector::LoadOp::create(b, vbf, w, ValueRange{o, kk});
      Value wv = arith::ExtFOp::create(b, vf, wb);
      Value p = arith::MulFOp::create(b, xv, wv);
      Value t = arith::AddFOp::create(b, acc.getRegionIterArgs()[0], p);
      scf::YieldOp::create(b, ValueRange{t});
    }
    Value sum = vector::ReductionOp::create(b, vector::CombiningKind::ADD, acc.getResult(0));
    memref::StoreOp::create(b, sum, y, ValueRange{r, o});
  });
}

} // namespace kiln::kernels
