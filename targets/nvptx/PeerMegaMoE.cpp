// Built as typed IR (KernelBuilder.h).
#include "targets/nvptx/PeerMegaMoE.h"

#include "targets/common/ExpertLists.h"
#include "targets/common/Generators.h"
#include "targets/common/KernelBuilder.h"
#include "targets/common/SwiGlu.h"
#include "targets/common/WarpDot.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"

#include <algorithm>

namespace kiln::nvptx {

using namespace mlir;
using kernels::str;
namespace warp = kernels::warp;

namespace {

constexpr int64_t kThreads = 128; // four warps a block
constexpr int64_t kWarps = kThreads / 32;

int64_t align256(int64_t n) { return (n + 255) / 256 * 256; }

// PTX through llvm.inline_asm: the memory-model operations MLIR's memref
// ops do not spell (scoped atomics, acquire loads, release stores, fences)
// and the volatile accesses of peer-written slots. Addresses are i64.
Value inlineAsm(ImplicitLocOpBuilder &b, TypeRange results, ValueRange operands,
                const std::string &text, StringRef constraints) {
  auto op = LLVM::InlineAsmOp::create(b, results, operands, text, constraints,
                                      /*has_side_effects=*/true, /*is_align_stack=*/false,
                                      LLVM::tailcallkind::TailCallKind::None,
                                      LLVM::AsmDialectAttr(), ArrayAttr());
  return op->getNumResults() ? op->getResult(0) : Value();
}

Value asmLoad64(ImplicitLocOpBuilder &b, Value address, const std::string &semantics) {
  return inlineAsm(b, b.getI64Type(), address, "ld." + semantics + ".global.u64 $0, [$1];",
                   "=l,l,~{memory}");
}

void asmStore64(ImplicitLocOpBuilder &b, Value address, Value value, const std::string &semantics) {
  inlineAsm(b, {}, ValueRange{address, value}, "st." + semantics + ".global.u64 [$0], $1;",
            "l,l,~{memory}");
}

Value asmAdd64(ImplicitLocOpBuilder &b, Value address, Value one, const std::string &semantics) {
  return inlineAsm(b, b.getI64Type(), ValueRange{address, one},
                   "atom." + semantics + ".global.add.u64 $0, [$1], $2;", "=l,l,l,~{memory}");
}

void asmFence(ImplicitLocOpBuilder &b, const std::string &scope) {
  inlineAsm(b, {}, {}, "fence.acq_rel." + scope + ";", "~{memory}");
}

// A vector<4xf32> from the 16 bytes at i64 `address`, bypassing L1.
Value loadVolatile4(ImplicitLocOpBuilder &b, Value address) {
  Type f32 = b.getF32Type();
  Type parts = LLVM::LLVMStructType::getLiteral(b.getContext(), {f32, f32, f32, f32});
  Value loaded = inlineAsm(b, parts, address, "ld.volatile.global.v4.f32 {$0, $1, $2, $3}, [$4];",
                           "=f,=f,=f,=f,l,~{memory}");
  SmallVector<Value> elems;
  for (int64_t i = 0; i < 4; ++i)
    elems.push_back(LLVM::ExtractValueOp::create(b, loaded, ArrayRef<int64_t>{i}));
  return vector::FromElementsOp::create(b, VectorType::get({4}, f32), elems);
}

// An f32 from the 4 bytes at i64 `address`, bypassing L1.
Value loadVolatile1(ImplicitLocOpBuilder &b, Value address) {
  return inlineAsm(b, b.getF32Type(), address, "ld.volatile.global.f32 $0, [$1];",
                   "=f,l,~{memory}");
}

// Waits until the u64 at `address` reaches `target` (acquire at `scope`);
// `zero` is the loop's (unused) initial value.
void spinUntil(ImplicitLocOpBuilder &b, Value address, Value target, const std::string &scope,
               Value zero) {
  Type i64 = b.getI64Type();
  Location loc = b.getLoc();
  auto before = [&](OpBuilder &nested, Location, ValueRange) {
    ImplicitLocOpBuilder ib(loc, nested);
    Value seen = asmLoad64(ib, address, "acquire." + scope);
    Value more = arith::CmpIOp::create(ib, arith::CmpIPredicate::ult, seen, target);
    scf::ConditionOp::create(ib, more, ValueRange{seen});
  };
  auto after = [&](OpBuilder &nested, Location, ValueRange args) {
    scf::YieldOp::create(nested, loc, args);
  };
  scf::WhileOp::create(b, TypeRange{i64}, ValueRange{zero}, before, after);
}

// The constants and values the phases share.
struct PeerScope {
  kernels::WarpOfPart w;
  Value c2, c3, c4;
  Value c0i32, expertsI32, firstExpert;
};

// The loop over this rank's pairs' items (warp::warpItemLoop); leaves the
// builder inside `scf.if` the pair's expert is this rank's, where `e` is the
// local expert.
struct PairItem : warp::WarpItem {
  Value e;
};
PairItem pairItemLoop(ImplicitLocOpBuilder &b, const PeerScope &p, Value idx, Value items,
                      Value perToken, Value groups, ArrayRef<Value> rowSteps) {
  PairItem it{warp::warpItemLoop(b, p.w, items, perToken, groups, rowSteps), Value()};
  Value global = memref::LoadOp::create(b, idx, ValueRange{it.t, it.j});
  Value local = arith::SubIOp::create(b, global, p.firstExpert);
  Value low = arith::CmpIOp::create(b, arith::CmpIPredicate::sge, local, p.c0i32);
  Value high = arith::CmpIOp::create(b, arith::CmpIPredicate::slt, local, p.expertsI32);
  auto mine = scf::IfOp::create(b, arith::AndIOp::create(b, low, high), false);
  b.setInsertionPointToStart(&mine.getThenRegion().front());
  it.e = arith::IndexCastOp::create(b, b.getIndexType(), local);
  return it;
}

void enterThen(ImplicitLocOpBuilder &b, scf::IfOp op) {
  b.setInsertionPointToStart(&op.getThenRegion().front());
}

} // namespace

PeerSiteLayout peerSiteLayout(const kernels::PeerMegaMoEShape &s) {
  PeerSiteLayout layout;
  int64_t pairs = s.maxRows * s.k;
  layout.flags = align256(layout.pairs + pairs * 8);
  layout.coefs = align256(layout.flags + 2 * pairs * 8);
  layout.data = align256(layout.coefs + 2 * pairs * 4);
  layout.bytes = align256(layout.data + 2 * pairs * s.latent * 4);
  return layout;
}

bool peerMegaMoEFits(const kernels::PeerMegaMoEShape &s) {
  // Warp rows of gate/up (2) and down (4); output chunks of 128 columns.
  return s.members >= 2 && s.intermediate % 32 == 0 && s.latent % 128 == 0 && s.maxRows >= 1;
}

kernels::Work peerMegaMoEWork(const kernels::PeerMegaMoEShape &s) {
  // Enough warps for the larger phase at max rows; the runtime keeps the
  // grid to what stays resident.
  int64_t items = s.maxRows * s.k * std::max(s.intermediate / 2, s.latent / 4);
  int64_t blocks = (items + kWarps - 1) / kWarps;
  return kernels::Work{blocks * kThreads, 0, kThreads};
}

kernels::KernelSpec peerMegaMoE(const kernels::PeerMegaMoEShape &s) {
  const int64_t E = s.experts, K = s.k, I = s.intermediate, L = s.latent, R = s.maxRows;
  const std::string fmt = s.nvfp4 ? "_nvfp4" : "_bf16";
  const std::string name = "megamoe_peer_" + str(E) + "e_top" + str(K) + "_" + str(I) + "x" +
                           str(L) + "_m" + str(s.members) + "_r" + str(R) +
                           kernels::epsSuffix(s.eps) + fmt;
  const PeerSiteLayout layout = peerSiteLayout(s);
  const kernels::ExpertTileShape shape{E, K, I, L, s.nvfp4, 0};
  kernels::Tiling tiling;
  tiling.set("kind", "persistent")
      .set("exchange", "peer")
      .set("members", s.members)
      .set("site_bytes", layout.bytes);
  auto args = [&](Builder &b) -> std::vector<Type> {
    Type f32 = b.getF32Type(), i64 = b.getI64Type();
    const int64_t dyn = ShapedType::kDynamic;
    std::vector<Type> types = {MemRefType::get({dyn, L}, f32),
                               MemRefType::get({dyn, K}, b.getI32Type()),
                               MemRefType::get({dyn, K}, f32)};
    kernels::appendProjectionTypes(b, shape, I, L, types); // gate
    kernels::appendProjectionTypes(b, shape, I, L, types); // up
    kernels::appendProjectionTypes(b, shape, L, I, types); // down
    types.push_back(MemRefType::get({E, L}, b.getBF16Type()));
    types.push_back(MemRefType::get({dyn, K, I}, f32));
    types.push_back(MemRefType::get({dyn, K, L / 4}, f32));
    types.push_back(MemRefType::get({s.members}, i64));
    types.push_back(MemRefType::get({dyn, L}, f32));
    types.push_back(i64); // rows
    types.push_back(i64); // member
    return types;
  };
  return kernels::buildKernel(name, "kiln.megamoe", tiling, args, [&](kernels::KernelScope &k) {
    ImplicitLocOpBuilder &b = k.b;
    const unsigned np = kernels::projectionArgCount(shape);
    ValueRange all = k.func.getArguments();
    Value z = all[0], idx = all[1], wts = all[2];
    kernels::ExpertProjection gate = kernels::expertProjection(all, 3, s.nvfp4);
    kernels::ExpertProjection up = kernels::expertProjection(all, 3 + np, s.nvfp4);
    kernels::ExpertProjection down = kernels::expertProjection(all, 3 + 2 * np, s.nvfp4);
    Value pn = all[3 + 3 * np], h = all[4 + 3 * np], ssq = all[5 + 3 * np];
    Value peers = all[6 + 3 * np], y = all[7 + 3 * np];
    Value rowsArg = all[8 + 3 * np], member = all[9 + 3 * np];
    Type f32 = b.getF32Type(), i32 = b.getI32Type(), i64 = b.getI64Type(), index = b.getIndexType();
    auto f32c = [&](double v) -> Value {
      return arith::ConstantFloatOp::create(b, b.getF32Type(), APFloat(float(v)));
    };

    PeerScope p;
    p.w = kernels::warpOfPart(k);
    const kernels::WarpOfPart &w = p.w;
    p.c2 = k.index(2);
    p.c3 = k.index(3);
    p.c4 = k.index(4);
    Value c128 = k.index(128), kk = k.index(K), mm = k.index(s.members), width = k.index(L);
    Value chunks = k.index(L / 128), per1 = k.index(K * I / 2), groups1 = k.index(I / 2);
    Value per2 = k.index(K * L / 4), groups2 = k.index(L / 4), groups2I64 = k.i64(L / 4);
    Value one = f32c(1.0), widthF = f32c(double(L)), eps = f32c(s.eps);
    auto v4f = VectorType::get({4}, f32);
    Value zeroV = arith::ConstantOp::create(b, v4f, DenseElementsAttr::get(v4f, 0.0f));
    Value zeroF = f32c(0.0);
    p.c0i32 = k.i32(0);
    Value w32 = k.i32(32), c0i64 = k.i64(0), c1i64 = k.i64(1), c2i64 = k.i64(2);
    Value c4i64 = k.i64(4), c8i64 = k.i64(8);
    Value pairsOff = k.i64(layout.pairs), flagsOff = k.i64(layout.flags);
    Value coefsOff = k.i64(layout.coefs), dataOff = k.i64(layout.data);
    Value flagsParity = k.i64(R * K * 8), coefsParity = k.i64(R * K * 4);
    Value dataParity = k.i64(R * K * L * 4);
    p.expertsI32 = k.i32(E);
    Value tid = gpu::ThreadIdOp::create(b, gpu::Dimension::x);
    Value nblocks = gpu::GridDimOp::create(b, gpu::Dimension::x);
    auto eq = [&](Value a, Value c) {
      return arith::CmpIOp::create(b, arith::CmpIPredicate::eq, a, c).getResult();
    };
    Value lead = eq(w.lane, w.c0), thread0 = eq(tid, w.c0);
    Value lane4 = arith::MulIOp::create(b, w.lane, p.c4);
    Value rows = arith::IndexCastOp::create(b, index, rowsArg);
    Value memberX = arith::IndexCastOp::create(b, index, member);
    Value memberI32 = arith::TruncIOp::create(b, i32, member);
    p.firstExpert = arith::MulIOp::create(b, memberI32, p.expertsI32);
    Value site = memref::LoadOp::create(b, peers, ValueRange{memberX});
    Value pairsAt = arith::AddIOp::create(b, site, pairsOff);
    Value ssqX = memref::ExtractAlignedPointerAsIndexOp::create(b, ssq);
    Value ssqAt = arith::IndexCastOp::create(b, i64, ssqX);
    // This site's launches so far: its grid-barrier count over the grid,
    // which no block of this launch can have completed yet.
    Value seen = asmLoad64(b, site, "relaxed.gpu");
    Value blocksI64 = arith::IndexCastOp::create(b, i64, nblocks);
    Value epoch = arith::DivUIOp::create(b, seen, blocksI64);
    Value stamp = arith::AddIOp::create(b, epoch, c1i64);
    Value parity = arith::RemUIOp::create(b, epoch, c2i64);
    auto base = [&](Value offset, Value stride) -> Value {
      return arith::AddIOp::create(b, offset, arith::MulIOp::create(b, parity, stride));
    };
    Value flagsBase = base(flagsOff, flagsParity), coefsBase = base(coefsOff, coefsParity);
    Value dataBase = base(dataOff, dataParity);
    Value items1 = arith::MulIOp::create(b, rows, per1);
    Value items2 = arith::MulIOp::create(b, rows, per2);
    Value items3 = arith::MulIOp::create(b, rows, chunks);
    // base + element x bytes, the element an i64 or an index.
    auto byteAt = [&](Value baseAt, Value element, Value bytes) -> Value {
      if (element.getType().isIndex())
        element = arith::IndexCastOp::create(b, i64, element);
      return arith::AddIOp::create(b, baseAt, arith::MulIOp::create(b, element, bytes));
    };
    // The loop over the members, its peer's site base the argument.
    auto forEachMember = [&](llvm::function_ref<void(Value)> body) {
      OpBuilder::InsertionGuard guard(b);
      auto loop = scf::ForOp::create(b, w.c0, mm, w.c1);
      b.setInsertionPointToStart(loop.getBody());
      body(memref::LoadOp::create(b, peers, ValueRange{loop.getInductionVar()}));
    };

    // 1. h = silu(gate z) * (up z) for this rank's pairs.
    {
      OpBuilder::InsertionGuard guard(b);
      PairItem it = pairItemLoop(b, p, idx, items1, per1, groups1, {w.c0, w.c1, p.c2});
      Value gateGlobal = gate.loadGlobal(b, it.e), upGlobal = up.loadGlobal(b, it.e);
      SmallVector<warp::Row> rowList = warp::projectionRows(gate, it.e, it.o, gateGlobal);
      rowList.append(warp::projectionRows(up, it.e, it.o, upGlobal));
      SmallVector<Value> sums =
          warp::warpSums(b, warp::rowsDot(b, w, rowList, s.nvfp4, z, it.t, L));
      auto leader = scf::IfOp::create(b, lead, false);
      enterThen(b, leader);
      for (int r = 0; r < 2; ++r)
        memref::StoreOp::create(b, kernels::swiGlu(b, sums[r], sums[2 + r], one), h,
                                ValueRange{it.t, it.j, it.o[r]});
    }

    // 2. Every block's h is written.
    gpu::BarrierOp::create(b);
    {
      OpBuilder::InsertionGuard guard(b);
      auto first = scf::IfOp::create(b, thread0, false);
      enterThen(b, first);
      asmAdd64(b, site, c1i64, "release.gpu");
      spinUntil(b, site, arith::MulIOp::create(b, stamp, blocksI64), "gpu", c0i64);
    }
    gpu::BarrierOp::create(b);

    // 3. Down rows, four a warp, each sent to every member as soon as it is
    // computed (times the expert's post-norm); the warp that completes a pair
    // adds its rows' sums of squares and sends the pair's coefficient
    // (routing weight / RMS) and flag.
    {
      OpBuilder::InsertionGuard guard(b);
      PairItem it = pairItemLoop(b, p, idx, items2, per2, groups2, {w.c0, w.c1, p.c2, p.c3, p.c4});
      Value global = down.loadGlobal(b, it.e);
      SmallVector<Value> ys =
          warp::warpSums(b, warp::rowsDot(b, w, warp::projectionRows(down, it.e, it.o, global),
                                          s.nvfp4, h, ValueRange{it.t, it.j}, I));
      Value pairJ = arith::AddIOp::create(b, arith::MulIOp::create(b, it.t, kk), it.j);
      Value pairI64 = arith::IndexCastOp::create(b, i64, pairJ);
      auto last = scf::IfOp::create(b, TypeRange{i32}, lead, /*withElseRegion=*/true);
      {
        OpBuilder::InsertionGuard inner(b);
        b.setInsertionPointToStart(&last.getThenRegion().front());
        Value postNorm =
            vector::LoadOp::create(b, VectorType::get({4}, b.getBF16Type()), pn,
                                   ValueRange{it.e, it.o[0]}, false, llvm::MaybeAlign(8));
        Value pf = arith::ExtFOp::create(b, v4f, postNorm);
        Value scale[4], u[4];
        for (int64_t r = 0; r < 4; ++r)
          scale[r] = vector::ExtractOp::create(b, pf, ArrayRef<int64_t>{r});
        for (int r = 0; r < 4; ++r)
          u[r] = arith::MulFOp::create(b, ys[r], scale[r]);
        Value q = arith::MulFOp::create(b, ys[0], ys[0]);
        for (int r = 1; r < 4; ++r)
          q = math::FmaOp::create(b, ys[r], ys[r], q);
        memref::StoreOp::create(b, q, ssq, ValueRange{it.t, it.j, it.group});
        Value element = arith::AddIOp::create(b, arith::MulIOp::create(b, pairJ, width), it.o[0]);
        Value to = byteAt(dataBase, element, c4i64);
        forEachMember([&](Value peer) {
          Value at = arith::AddIOp::create(b, peer, to);
          inlineAsm(b, {}, ValueRange{at, u[0], u[1], u[2], u[3]},
                    "st.global.v4.f32 [$0], {$1, $2, $3, $4};", "l,f,f,f,f,~{memory}");
        });
        Value pairAt = byteAt(pairsAt, pairI64, c8i64);
        // System scope: the rows just stored to the members come first.
        Value old = asmAdd64(b, pairAt, c1i64, "acq_rel.sys");
        Value count = arith::AddIOp::create(b, old, c1i64);
        Value full = eq(count, groups2I64);
        {
          OpBuilder::InsertionGuard reset(b);
          enterThen(b, scf::IfOp::create(b, full, false));
          asmStore64(b, pairAt, c0i64, "relaxed.gpu");
        }
        scf::YieldOp::create(b, ValueRange{arith::ExtUIOp::create(b, i32, full)});
        b.setInsertionPointToStart(&last.getElseRegion().front());
        scf::YieldOp::create(b, ValueRange{p.c0i32});
      }
      Value lastW =
          gpu::ShuffleOp::create(b, last.getResult(0), p.c0i32, w32, gpu::ShuffleMode::IDX)
              .getShuffleResult();
      Value isLast = arith::CmpIOp::create(b, arith::CmpIPredicate::ne, lastW, p.c0i32);
      enterThen(b, scf::IfOp::create(b, isLast, false));
      asmFence(b, "gpu");
      Value sqRow = arith::MulIOp::create(b, pairJ, groups2);
      auto squares = scf::ForOp::create(b, w.lane, groups2, w.c32, ValueRange{zeroF});
      {
        OpBuilder::InsertionGuard inner(b);
        b.setInsertionPointToStart(squares.getBody());
        Value g = arith::AddIOp::create(b, sqRow, squares.getInductionVar());
        Value v = loadVolatile1(b, byteAt(ssqAt, g, c4i64));
        scf::YieldOp::create(
            b, ValueRange{arith::AddFOp::create(b, squares.getRegionIterArgs()[0], v)});
      }
      Value ss = warp::warpSum(b, squares.getResult(0));
      Value mean = arith::DivFOp::create(b, ss, widthF);
      Value rms = math::SqrtOp::create(b, arith::AddFOp::create(b, mean, eps));
      Value inv = arith::DivFOp::create(b, one, rms);
      Value wj = memref::LoadOp::create(b, wts, ValueRange{it.t, it.j});
      Value coef = arith::MulFOp::create(b, wj, inv);
      enterThen(b, scf::IfOp::create(b, lead, false));
      Value coefAt = byteAt(coefsBase, pairI64, c4i64);
      forEachMember([&](Value peer) {
        Value at = arith::AddIOp::create(b, peer, coefAt);
        inlineAsm(b, {}, ValueRange{at, coef}, "st.global.f32 [$0], $1;", "l,f,~{memory}");
      });
      asmFence(b, "sys");
      Value flagAt = byteAt(flagsBase, pairI64, c8i64);
      forEachMember([&](Value peer) {
        asmStore64(b, arith::AddIOp::create(b, peer, flagAt), stamp, "relaxed.sys");
      });
    }

    // 4. y = sum over a token's k choices, in order, of coefficient x rows.
    auto outs = scf::ForOp::create(b, w.warp, items3, w.warps);
    b.setInsertionPointToStart(outs.getBody());
    Value t = arith::DivUIOp::create(b, outs.getInductionVar(), chunks);
    Value chunk = arith::RemUIOp::create(b, outs.getInductionVar(), chunks);
    Value c = arith::AddIOp::create(b, arith::MulIOp::create(b, chunk, c128), lane4);
    Value tk = arith::MulIOp::create(b, t, kk);
    {
      OpBuilder::InsertionGuard guard(b);
      enterThen(b, scf::IfOp::create(b, lead, false));
      auto choices = scf::ForOp::create(b, w.c0, kk, w.c1);
      b.setInsertionPointToStart(choices.getBody());
      Value pj = arith::AddIOp::create(b, tk, choices.getInductionVar());
      Value flag = arith::AddIOp::create(b, site, byteAt(flagsBase, pj, c8i64));
      spinUntil(b, flag, stamp, "sys", c0i64);
    }
    inlineAsm(b, {}, {}, "bar.warp.sync 0xffffffff;", "~{memory}");
    auto sum = scf::ForOp::create(b, w.c0, kk, w.c1, ValueRange{zeroV});
    {
      OpBuilder::InsertionGuard guard(b);
      b.setInsertionPointToStart(sum.getBody());
      Value pj = arith::AddIOp::create(b, tk, sum.getInductionVar());
      Value coefAt = arith::AddIOp::create(b, site, byteAt(coefsBase, pj, c4i64));
      Value cv = vector::BroadcastOp::create(b, v4f, loadVolatile1(b, coefAt));
      Value element = arith::AddIOp::create(b, arith::MulIOp::create(b, pj, width), c);
      Value rowAt = arith::AddIOp::create(b, site, byteAt(dataBase, element, c4i64));
      Value rv = loadVolatile4(b, rowAt);
      scf::YieldOp::create(
          b, ValueRange{vector::FMAOp::create(b, rv, cv, sum.getRegionIterArgs()[0])});
    }
    vector::StoreOp::create(b, sum.getResult(0), y, ValueRange{t, c}, false, llvm::MaybeAlign(16));
  });
}

} // namespace kiln::nvptx
