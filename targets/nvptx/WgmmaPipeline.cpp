#include "targets/nvptx/WgmmaPipeline.h"

#include "targets/nvptx/DynamicShared.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/LLVMIR/NVVMDialect.h"
#include "mlir/Dialect/SCF/IR/SCF.h"

#include <cassert>

namespace kiln::nvptx::wgmma {

using namespace mlir;

void declareKernel(kernels::KernelScope &k, const std::string &smemName, int64_t threads) {
  declareDynamicShared(k, smemName, /*alignment=*/1024);
  kernels::boundLaunch(k, threads, /*blocksPerSm=*/1);
}

void splitRoles(kernels::KernelScope &k, Value tid, uint32_t producerRegs, uint32_t consumerRegs,
                function_ref<void(Value)> produce, function_ref<void(Value, Value)> consume) {
  assert(registersFit(producerRegs, consumerRegs) && "setmaxnreg counts past the block's share");
  ImplicitLocOpBuilder &b = k.b;
  Value group = arith::DivUIOp::create(b, tid, k.index(kWarpgroup));
  Value inGroup = arith::RemUIOp::create(b, tid, k.index(kWarpgroup));
  Value producer = arith::CmpIOp::create(b, arith::CmpIPredicate::eq, group, k.index(0));
  auto roles = scf::IfOp::create(b, producer, /*withElse=*/true);
  {
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(&roles.getThenRegion().front());
    NVVM::SetMaxRegisterOp::create(b, b.getLoc(), producerRegs,
                                   NVVM::SetMaxRegisterAction::decrease);
    produce(inGroup);
  }
  OpBuilder::InsertionGuard guard(b);
  b.setInsertionPointToStart(&roles.getElseRegion().front());
  NVVM::SetMaxRegisterOp::create(b, b.getLoc(), consumerRegs, NVVM::SetMaxRegisterAction::increase);
  consume(arith::SubIOp::create(b, group, k.index(1)), inGroup);
}

// Address >> 4 in bits 0-13, leading byte offset >> 4 in 16-29 (unused by
// this layout, 1 by convention), stride byte offset >> 4 in 32-45, the
// swizzle mode (1: 128 bytes) in 62-63.
Value matrixDescriptor(ImplicitLocOpBuilder &b, Value addr32) {
  Type i64 = b.getI64Type();
  auto c64 = [&](uint64_t v) { return arith::ConstantIntOp::create(b, i64, int64_t(v)); };
  Value addr = arith::ExtUIOp::create(b, i64, addr32);
  Value start = arith::ShRUIOp::create(b, arith::AndIOp::create(b, addr, c64(0x3FFFF)), c64(4));
  uint64_t fixed = (uint64_t(1) << 16) | (uint64_t(kAtomBytes >> 4) << 32) | (uint64_t(1) << 62);
  return arith::OrIOp::create(b, start, c64(fixed));
}

Value matrixDescriptorMnMajor(ImplicitLocOpBuilder &b, Value addr32, int64_t panelBytes) {
  Type i64 = b.getI64Type();
  auto c64 = [&](uint64_t v) { return arith::ConstantIntOp::create(b, i64, int64_t(v)); };
  Value addr = arith::ExtUIOp::create(b, i64, addr32);
  Value start = arith::ShRUIOp::create(b, arith::AndIOp::create(b, addr, c64(0x3FFFF)), c64(4));
  // Leading byte offset: from one MN panel to the next; stride byte offset:
  // from one 8-row (k) atom to the next.
  uint64_t fixed =
      (uint64_t(panelBytes >> 4) << 16) | (uint64_t(kAtomBytes >> 4) << 32) | (uint64_t(1) << 62);
  return arith::OrIOp::create(b, start, c64(fixed));
}

Value mmaRegisterA(ImplicitLocOpBuilder &b, Value acc, ValueRange a, Value bDesc,
                   RegisterAOptions options) {
  assert(a.size() == 4 && "four registers of bf16 pairs");
  auto type = cast<LLVM::LLVMStructType>(acc.getType());
  const int64_t count = type.getBody().size(); // m64nN: N / 2 a thread
  const int64_t n = 2 * count;
  // Outputs $0 .. count - 1, the same registers tied as inputs, then A's four
  // and B's descriptor.
  std::string text = std::string("{\n.reg .pred p;\nsetp.ne.b32 p, ") +
                     (options.accumulate ? "1" : "0") + ", 0;\nwgmma.mma_async.sync.aligned.m64n" +
                     std::to_string(n) + "k16.f32.bf16.bf16 {";
  std::string constraints;
  SmallVector<Value> operands;
  for (int64_t i = 0; i < count; ++i) {
    text += (i ? ", $" : "$") + std::to_string(i);
    constraints += (i ? ",=f" : "=f");
  }
  for (int64_t i = 0; i < count; ++i) {
    constraints += "," + std::to_string(i);
    operands.push_back(LLVM::ExtractValueOp::create(b, acc, ArrayRef<int64_t>{i}));
  }
  text += "}, {";
  for (int64_t i = 0; i < 4; ++i) {
    text += (i ? ", $" : "$") + std::to_string(2 * count + i);
    constraints += ",r";
    operands.push_back(a[i]);
  }
  // scale-d p (accumulate or not), A and B unscaled, B transposed or not.
  text += "}, $" + std::to_string(2 * count + 4) + ", p, 1, 1, " +
          (options.transposedB ? "1" : "0") + ";\n}";
  constraints += ",l";
  operands.push_back(bDesc);
  auto op = LLVM::InlineAsmOp::create(b, type, operands, text, constraints,
                                      /*has_side_effects=*/true, /*is_align_stack=*/false,
                                      LLVM::tailcallkind::TailCallKind::None,
                                      LLVM::AsmDialectAttr(), ArrayAttr());
  return op.getResult(0);
}

Ring::Ring(kernels::KernelScope &k, const RingLayout &layout, const std::string &smemName)
    : k(k), b(k.b), ring(layout), ptr3(LLVM::LLVMPointerType::get(b.getContext(), 3)),
      acc(LLVM::LLVMStructType::getLiteral(b.getContext(),
                                           SmallVector<Type>(layout.bRows / 2, b.getF32Type()))) {
  smem = LLVM::AddressOfOp::create(b, ptr3, smemName);
}

Value Ring::at(Value byteOffset) {
  Value offset = arith::IndexCastOp::create(b, b.getI32Type(), byteOffset);
  return LLVM::GEPOp::create(b, ptr3, b.getI8Type(), smem, ValueRange{offset});
}

Value Ring::aTile(Value s) { return at(arith::MulIOp::create(b, s, k.index(ring.aBytes()))); }

Value Ring::bOffset(Value s) {
  Value base = k.index(ring.stages * ring.aBytes());
  return arith::AddIOp::create(b, base, arith::MulIOp::create(b, s, k.index(ring.bBytes())));
}

Value Ring::barrier(int64_t which, Value s) {
  Value base = k.index(ring.stages * ring.stageBytes() + which * ring.stages * 8);
  return at(arith::AddIOp::create(b, base, arith::MulIOp::create(b, s, k.index(8))));
}

Value Ring::stageOf(Value step) { return arith::RemUIOp::create(b, step, k.index(ring.stages)); }

Value Ring::parity(Value step) {
  Value phase =
      arith::RemUIOp::create(b, arith::DivUIOp::create(b, step, k.index(ring.stages)), k.index(2));
  return arith::IndexCastOp::create(b, b.getI32Type(), phase);
}

void Ring::wait(Value barrierAddr, Value phase) {
  NVVM::MBarrierTryWaitParityOp::create(b, b.getLoc(), barrierAddr, phase, k.i32(10000000));
}

Value Ring::shared32(Value ptr) { return LLVM::PtrToIntOp::create(b, b.getI32Type(), ptr); }

void Ring::initBarriers(Value tid, int64_t fullArrivals, int64_t emptyArrivals) {
  Value first = arith::CmpIOp::create(b, arith::CmpIPredicate::eq, tid, k.index(0));
  auto ifFirst = scf::IfOp::create(b, first, false);
  {
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(&ifFirst.getThenRegion().front());
    for (int64_t s = 0; s < ring.stages; ++s) {
      NVVM::MBarrierInitOp::create(b, b.getLoc(), full(k.index(s)), k.i32(fullArrivals), Value());
      NVVM::MBarrierInitOp::create(b, b.getLoc(), empty(k.index(s)), k.i32(emptyArrivals), Value());
    }
    NVVM::FenceMbarrierInitOp::create(b, b.getLoc());
  }
  NVVM::Barrier0Op::create(b, b.getLoc());
}

Ring::Claim Ring::claim(Value step) {
  Value s = stageOf(step);
  Value freed = arith::XOrIOp::create(b, parity(step), k.i32(1));
  wait(empty(s), freed);
  return {s, full(s)};
}

void Ring::expectBytes(Value fullAt, int64_t bytes) {
  NVVM::MBarrierArriveExpectTxOp::create(b, b.getLoc(), Type(), fullAt, k.i32(bytes),
                                         NVVM::MemScopeKind::CTA, false, Value());
}

void Ring::expectBytes(Value fullAt, Value bytes) {
  NVVM::MBarrierArriveExpectTxOp::create(b, b.getLoc(), Type(), fullAt, bytes,
                                         NVVM::MemScopeKind::CTA, false, Value());
}

void Ring::acquireTensorMap(Value map) {
  NVVM::FenceProxyAcquireOp::create(b, b.getLoc(), NVVM::MemScopeKind::GPU, map, k.i32(128),
                                    NVVM::ProxyKind::GENERIC, NVVM::ProxyKind::TENSORMAP);
}

void Ring::copy(Value dst, Value map, Value kk, ArrayRef<Value> outer, Value fullAt) {
  auto ptr7 =
      LLVM::LLVMPointerType::get(b.getContext(), 7); // shared::cluster, as the copy names it
  Value cluster = LLVM::AddrSpaceCastOp::create(b, ptr7, dst);
  SmallVector<Value> coords = {kk};
  for (Value index : outer)
    coords.push_back(arith::IndexCastOp::create(b, b.getI32Type(), index));
  NVVM::CpAsyncBulkTensorGlobalToSharedClusterOp::create(
      b, b.getLoc(), cluster, map, coords, fullAt, ValueRange{}, Value(), Value(),
      NVVM::TMALoadMode::TILE, false, nullptr, Value());
}

Value Ring::accumulate(Value consumer, int64_t kSteps, Value inGroup) {
  return accumulateRowBlocks(ValueRange{consumer}, kSteps, inGroup)[0];
}

SmallVector<Value> Ring::accumulateRowBlocks(ValueRange rowBlocks, int64_t kSteps, Value inGroup) {
  // The first stage is its own copy of the loop's body: its first products
  // do not accumulate (scale-d 0) into undefined accumulators, so that no
  // register is zeroed between the fence and the products. Zeros carried
  // into the loop became moves between one row block's products and the
  // next's, after which ptxas injected a warpgroup.arrive, and a wait.
  assert(kSteps >= 1 && "a tile has at least one stage: the first is issued unconditionally");
  Value undefined = LLVM::UndefOp::create(b, acc);
  SmallVector<Value> first =
      accumulateStage(rowBlocks, k.index(0), SmallVector<Value>(rowBlocks.size(), undefined),
                      /*fresh=*/true, inGroup);
  auto loop = scf::ForOp::create(b, k.index(1), k.index(kSteps), k.index(1), first);
  {
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(loop.getBody());
    SmallVector<Value> sums = accumulateStage(rowBlocks, loop.getInductionVar(),
                                              loop.getRegionIterArgs(), /*fresh=*/false, inGroup);
    if (!sums.empty()) // a loop without results has its yield already
      scf::YieldOp::create(b, sums);
  }
  NVVM::WgmmaWaitGroupSyncOp::create(b, b.getLoc(), 0);
  return SmallVector<Value>(loop.getResults());
}

SmallVector<Value> Ring::accumulateStage(ValueRange rowBlocks, Value step, ValueRange carried,
                                         bool fresh, Value inGroup) {
  MLIRContext *ctx = b.getContext();
  Value s = stageOf(step);
  wait(full(s), parity(step));
  SmallVector<Value> aRows;
  for (Value block : rowBlocks)
    aRows.push_back(arith::AddIOp::create(
        b, shared32(aTile(s)),
        arith::IndexCastOp::create(
            b, b.getI32Type(),
            arith::MulIOp::create(b, block, k.index(kConsumerRows * kRowBytes)))));
  Value bRows = shared32(bTile(s));
  NVVM::WgmmaFenceAlignedOp::create(b, b.getLoc());
  SmallVector<Value> sums(carried);
  for (int64_t kk = 0; kk < kTileK / kMmaK; ++kk) {
    Value advance = k.i32(kk * kMmaK * 2); // bytes along the 128-byte row
    const bool overwrite = fresh && kk == 0;
    for (size_t i = 0; i < aRows.size(); ++i) {
      Value descA = matrixDescriptor(b, arith::AddIOp::create(b, aRows[i], advance));
      Value descB = matrixDescriptor(b, arith::AddIOp::create(b, bRows, advance));
      sums[i] = NVVM::WgmmaMmaAsyncOp::create(
          b, b.getLoc(), acc, sums[i], descA, descB,
          NVVM::MMAShapeAttr::get(ctx, kConsumerRows, ring.bRows, kMmaK), NVVM::WGMMATypes::bf16,
          NVVM::WGMMATypes::bf16, NVVM::WGMMATypes::f32,
          overwrite ? NVVM::WGMMAScaleOut::zero : NVVM::WGMMAScaleOut::one, NVVM::WGMMAScaleIn::one,
          NVVM::WGMMAScaleIn::one, NVVM::MMALayout::row, NVVM::MMALayout::col, nullptr);
    }
  }
  NVVM::WgmmaGroupSyncAlignedOp::create(b, b.getLoc());
  // The step before this one has finished reading its stage: free it.
  NVVM::WgmmaWaitGroupSyncOp::create(b, b.getLoc(), 1);
  if (fresh) // the first stage has none before it
    return sums;
  Value previous = arith::RemUIOp::create(
      b, arith::AddIOp::create(b, step, k.index(ring.stages - 1)), k.index(ring.stages));
  release(previous, arith::RemUIOp::create(b, inGroup, k.index(32)));
  return sums;
}

void Ring::release(Value s, Value lane) {
  auto ifLane0 = scf::IfOp::create(
      b, arith::CmpIOp::create(b, arith::CmpIPredicate::eq, lane, k.index(0)), false);
  OpBuilder::InsertionGuard guard(b);
  b.setInsertionPointToStart(&ifLane0.getThenRegion().front());
  NVVM::MBarrierArriveOp::create(b, b.getLoc(), Type(), empty(s), Value(), NVVM::MemScopeKind::CTA,
                                 false);
}

} // namespace kiln::nvptx::wgmma
