// f32 activations to bf16 on a GPU, for the tensor-core kernels that read
// bf16 (targets/nvptx/WgmmaGemm): a thread per 8 contiguous elements of a
// row, rounded to nearest even. Built as typed IR (KernelBuilder.h).
#include "targets/common/Generators.h"
#include "targets/common/KernelBuilder.h"
#include "targets/common/TargetHooks.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"

namespace kiln::kernels {

using namespace mlir;

namespace {
constexpr int64_t kCastLanes = 8;
} // namespace

bool castBf16ThreadsFit(int64_t width) { return width % kCastLanes == 0; }

Work castBf16ThreadsWork(int64_t width) { return Work{0, width / kCastLanes}; }

KernelSpec castBf16Threads(int64_t width) {
  Tiling tiling;
  tiling.set("kind", "threads").set("lanes", kCastLanes);
  auto args = [&](Builder &b) -> std::vector<Type> {
    const int64_t dynamic = ShapedType::kDynamic;
    return {MemRefType::get({dynamic, width}, b.getF32Type()),
            MemRefType::get({dynamic, width}, b.getBF16Type()), b.getI64Type()};
  };
  return buildKernel("cast_bf16_threads_" + std::to_string(width), "kiln.cast_bf16", tiling, args,
                     [&](KernelScope &k) {
                       ImplicitLocOpBuilder &b = k.b;
                       Value chunks = k.index(width / kCastLanes);
                       Value count = arith::MulIOp::create(b, k.argIndex(2), chunks);
                       // Threads past the rows' chunks, and a grid with fewer threads than
                       // chunks, stride over them.
                       auto loop = scf::ForOp::create(b, k.argIndex(3), count, k.argIndex(4));
                       b.setInsertionPointToStart(loop.getBody());
                       Value i = loop.getInductionVar();
                       Value row = arith::DivUIOp::create(b, i, chunks);
                       Value col = arith::MulIOp::create(b, arith::RemUIOp::create(b, i, chunks),
                                                         k.index(kCastLanes));
                       auto f32s = VectorType::get({kCastLanes}, b.getF32Type());
                       auto bf16s = VectorType::get({kCastLanes}, b.getBF16Type());
                       // 8 elements from a multiple of 8: 32 bytes read, 16
                       // written, both 16-byte aligned (one vector access
                       // each, not eight).
                       Value v = vector::LoadOp::create(b, f32s, k.arg(0), ValueRange{row, col},
                                                        false, llvm::MaybeAlign(16));
                       vector::StoreOp::create(b, arith::TruncFOp::create(b, bf16s, v), k.arg(1),
                                               ValueRange{row, col}, false, llvm::MaybeAlign(16));
                     });
}

} // namespace kiln::kernels
