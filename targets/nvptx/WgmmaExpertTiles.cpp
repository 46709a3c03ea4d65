#include "targets/nvptx/WgmmaExpertTiles.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"

namespace kiln::nvptx::expert_tiles {

using namespace mlir;
using kernels::ExpertTileShape;

int64_t outCols(const ExpertTileShape &s, Product p) {
  return p == Product::GateUp ? s.intermediate : s.latent;
}
int64_t inDim(const ExpertTileShape &s, Product p) {
  return p == Product::GateUp ? s.latent : s.intermediate;
}

TileOfBlock tileOfBlock(kernels::KernelScope &k, const ExpertTileShape &s, Value tile, Value meta,
                        Value tiles) {
  ImplicitLocOpBuilder &b = k.b;
  auto load = [&](Value ref, Value at) {
    Value v = memref::LoadOp::create(b, ref, ValueRange{at});
    return arith::IndexCastOp::create(b, b.getIndexType(), v).getResult();
  };
  Value count = load(meta, k.index(s.experts + 1));
  auto ifLive = scf::IfOp::create(
      b, arith::CmpIOp::create(b, arith::CmpIPredicate::ult, tile, count), /*withElse=*/false);
  b.setInsertionPointToStart(&ifLive.getThenRegion().front());
  TileOfBlock t;
  t.tile = tile;
  Value at = arith::MulIOp::create(b, tile, k.index(2));
  t.expert = load(tiles, at);
  Value r0 = load(tiles, arith::AddIOp::create(b, at, k.index(1)));
  Value first = load(meta, t.expert);
  Value end = load(meta, arith::AddIOp::create(b, t.expert, k.index(1)));
  t.base = arith::AddIOp::create(b, first, r0);
  t.rowsIn = arith::MinUIOp::create(b, arith::SubIOp::create(b, end, t.base), k.index(kTileRows));
  return t;
}

Value computedRows(kernels::KernelScope &k, Value rowsIn) {
  ImplicitLocOpBuilder &b = k.b;
  Value blocks =
      arith::DivUIOp::create(b, arith::AddIOp::create(b, rowsIn, k.index(wgmma::kConsumerRows - 1)),
                             k.index(wgmma::kConsumerRows));
  return arith::MulIOp::create(b, blocks, k.index(wgmma::kConsumerRows));
}

Value warpUniform(kernels::KernelScope &k, Value predicate) {
  ImplicitLocOpBuilder &b = k.b;
  Type i32 = b.getI32Type();
  Value word = arith::ExtUIOp::create(b, i32, predicate);
  Value lane0 = gpu::ShuffleOp::create(b, word, 0, 32, gpu::ShuffleMode::IDX).getShuffleResult();
  return arith::CmpIOp::create(b, arith::CmpIPredicate::ne, lane0, k.i32(0));
}

namespace {

// The bytes of the tile's rows a stage holds: its live 64-row blocks' (i32).
Value liveRowBytes(kernels::KernelScope &k, const TileOfBlock &t) {
  ImplicitLocOpBuilder &b = k.b;
  return arith::IndexCastOp::create(
      b, b.getI32Type(),
      arith::MulIOp::create(b, computedRows(k, t.rowsIn), k.index(wgmma::kRowBytes)));
}

// The TMA copies of the tile's rows for k `kk` into `dst` (a shared
// pointer), one box of 64 rows for each block that holds items.
void copyTileRows(kernels::KernelScope &k, wgmma::Ring &ring, const TileOfBlock &t, Value map,
                  Value dst, Value kk, Value fullAt) {
  ImplicitLocOpBuilder &b = k.b;
  Value first = arith::MulIOp::create(b, t.tile, k.index(kTileRows));
  for (int64_t block = 0; block < kTileRows / wgmma::kConsumerRows; ++block) {
    Value row0 = k.index(block * wgmma::kConsumerRows);
    auto ifLive = scf::IfOp::create(
        b, arith::CmpIOp::create(b, arith::CmpIPredicate::ult, row0, t.rowsIn), false);
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(&ifLive.getThenRegion().front());
    Value at = LLVM::GEPOp::create(
        b, dst.getType(), b.getI8Type(), dst,
        ArrayRef<LLVM::GEPArg>{int32_t(block * wgmma::kConsumerRows * wgmma::kRowBytes)});
    ring.copy(at, map, kk, {arith::AddIOp::create(b, first, row0)}, fullAt);
  }
}

} // namespace

void produceTileRows(kernels::KernelScope &k, wgmma::Ring &ring, const TileOfBlock &t,
                     Value inGroup, unsigned rowsMap, int64_t steps, const ExtraCopies *extra) {
  ImplicitLocOpBuilder &b = k.b;
  auto issuer = scf::IfOp::create(
      b, arith::CmpIOp::create(b, arith::CmpIPredicate::eq, inGroup, k.index(0)), false);
  b.setInsertionPointToStart(&issuer.getThenRegion().front());
  Value rows = tensorMapArg(k, rowsMap);
  SmallVector<Value> maps;
  if (extra)
    for (unsigned arg : extra->maps)
      maps.push_back(tensorMapArg(k, arg));
  ring.acquireTensorMap(rows);
  for (Value map : maps)
    ring.acquireTensorMap(map);
  auto loop = scf::ForOp::create(b, k.index(0), k.index(steps), k.index(1));
  b.setInsertionPointToStart(loop.getBody());
  Value step = loop.getInductionVar();
  auto [stage, fullAt] = ring.claim(step);
  Value bytes = liveRowBytes(k, t);
  if (extra)
    bytes = arith::AddIOp::create(b, bytes, k.i32(int32_t(extra->bytes)));
  ring.expectBytes(fullAt, bytes);
  Value kk = arith::IndexCastOp::create(b, b.getI32Type(),
                                        arith::MulIOp::create(b, step, k.index(wgmma::kTileK)));
  copyTileRows(k, ring, t, rows, ring.aTile(stage), kk, fullAt);
  if (extra)
    extra->copy(maps, stage, kk, fullAt);
}

ItemPlace itemOfRow(kernels::KernelScope &k, const ExpertTileShape &s, const TileOfBlock &t,
                    Value row) {
  ImplicitLocOpBuilder &b = k.b;
  auto ifItem = scf::IfOp::create(
      b, arith::CmpIOp::create(b, arith::CmpIPredicate::ult, row, t.rowsIn), false);
  b.setInsertionPointToStart(&ifItem.getThenRegion().front());
  Value item = arith::IndexCastOp::create(
      b, b.getIndexType(),
      memref::LoadOp::create(b, k.arg(3), ValueRange{arith::AddIOp::create(b, t.base, row)}));
  return {arith::DivUIOp::create(b, item, k.index(s.k)),
          arith::RemUIOp::create(b, item, k.index(s.k))};
}

Value tensorMapArg(kernels::KernelScope &k, unsigned arg) {
  return LLVM::IntToPtrOp::create(k.b, LLVM::LLVMPointerType::get(k.b.getContext()), k.arg(arg));
}

} // namespace kiln::nvptx::expert_tiles
