// Kernels that synthesise `synthetic:SEED` weights where they live (on the
// GPU: no host generation and upload of tens of GiB a rank), bit for bit what
// models/muse_spark/SyntheticWeights.cpp writes on the host: the same
// counter-based splitmix64 stream per tensor, the same f64 shaping into a
// normal sample, the same bf16 rounding, and for NVFP4 expert projections the
// same quantisation (runtime/quant/Nvfp4.cpp: one amax per module, an E4M3
// scale per 16 values, E2M1 codes). The host passes what depends on names
// (the stream's key, the distribution) as i64 scalars; doubles as their bits.
// Every part takes elements part, part + parts, ...: on a GPU consecutive
// threads write consecutive elements. Built as typed IR (KernelBuilder.h).
#include "targets/common/Generators.h"
#include "targets/common/KernelBuilder.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"

#include <cstdint>

namespace kiln::kernels {

using namespace mlir;

namespace {

// The constants every synthesis kernel uses, and the distribution's mean
// and standard deviation from their bits.
struct Stream {
  Value key, golden, mixA, mixB, s16, s27, s30, s31, s32, s48, m16, one, two, centre, normalScale,
      bf16Half, s16i32, one32, mean, stddev;
};

Stream streamConstants(ImplicitLocOpBuilder &b, Value key, Value meanBits, Value stdBits) {
  Type i64 = b.getI64Type(), i32 = b.getI32Type();
  auto c64 = [&](uint64_t v) {
    return arith::ConstantIntOp::create(b, i64, int64_t(v)).getResult();
  };
  auto c32 = [&](int64_t v) { return arith::ConstantIntOp::create(b, i32, v).getResult(); };
  Stream s;
  s.key = key;
  s.golden = c64(0x9e3779b97f4a7c15ull);
  s.mixA = c64(0xbf58476d1ce4e5b9ull);
  s.mixB = c64(0x94d049bb133111ebull);
  s.s16 = c64(16);
  s.s27 = c64(27);
  s.s30 = c64(30);
  s.s31 = c64(31);
  s.s32 = c64(32);
  s.s48 = c64(48);
  s.m16 = c64(65535);
  s.one = c64(1);
  s.two = c64(2);
  s.centre = c64(524280);
  // The normal's scale: sqrt(1.5) / 2^17, as the host computes it in f64.
  s.normalScale =
      arith::ConstantFloatOp::create(b, b.getF64Type(), APFloat(1.2247448713915890491 / 131072.0));
  s.bf16Half = c32(32767);
  s.s16i32 = c32(16);
  s.one32 = c32(1);
  s.mean = arith::BitcastOp::create(b, b.getF64Type(), meanBits);
  s.stddev = arith::BitcastOp::create(b, b.getF64Type(), stdBits);
  return s;
}

// splitmix64's finaliser.
Value mix64(ImplicitLocOpBuilder &b, const Stream &s, Value in) {
  Value x = arith::XOrIOp::create(b, in, arith::ShRUIOp::create(b, in, s.s30));
  x = arith::MulIOp::create(b, x, s.mixA);
  x = arith::XOrIOp::create(b, x, arith::ShRUIOp::create(b, x, s.s27));
  x = arith::MulIOp::create(b, x, s.mixB);
  return arith::XOrIOp::create(b, x, arith::ShRUIOp::create(b, x, s.s31));
}

// The sum of a word's four 16-bit lanes.
Value lanes16(ImplicitLocOpBuilder &b, const Stream &s, Value w) {
  Value l0 = arith::AndIOp::create(b, w, s.m16);
  Value l1 = arith::AndIOp::create(b, arith::ShRUIOp::create(b, w, s.s16), s.m16);
  Value l2 = arith::AndIOp::create(b, arith::ShRUIOp::create(b, w, s.s32), s.m16);
  Value l3 = arith::ShRUIOp::create(b, w, s.s48);
  Value l01 = arith::AddIOp::create(b, l0, l1);
  Value l23 = arith::AddIOp::create(b, l2, l3);
  return arith::AddIOp::create(b, l01, l23);
}

// Element `index` (i64) of the stream: f32 mean + stddev * normal, rounded
// to bf16 (RNE): the bf16's bits (i16 in an i32), the same in the high half
// of an i32, and its f32 value.
struct Sample {
  Value high, bits, value;
};

Sample sample(ImplicitLocOpBuilder &b, const Stream &s, Value index) {
  Type f32 = b.getF32Type(), f64 = b.getF64Type(), i32 = b.getI32Type();
  Value i1 = arith::AddIOp::create(b, arith::MulIOp::create(b, index, s.two), s.one);
  Value i2 = arith::AddIOp::create(b, i1, s.one);
  Value k1 = arith::MulIOp::create(b, i1, s.golden);
  Value k2 = arith::MulIOp::create(b, i2, s.golden);
  Value x1 = arith::AddIOp::create(b, s.key, k1);
  Value x2 = arith::AddIOp::create(b, s.key, k2);
  Value m1 = mix64(b, s, x1);
  Value m2 = mix64(b, s, x2);
  Value l1 = lanes16(b, s, m1);
  Value l2 = lanes16(b, s, m2);
  Value sum = arith::AddIOp::create(b, l1, l2);
  Value centred = arith::SubIOp::create(b, arith::MulIOp::create(b, sum, s.two), s.centre);
  Value normal = arith::MulFOp::create(b, arith::SIToFPOp::create(b, f64, centred), s.normalScale);
  Value scaled = arith::MulFOp::create(b, s.stddev, normal);
  Value d = arith::AddFOp::create(b, s.mean, scaled);
  Value fb = arith::BitcastOp::create(b, i32, arith::TruncFOp::create(b, f32, d));
  Value lsb = arith::AndIOp::create(b, arith::ShRUIOp::create(b, fb, s.s16i32), s.one32);
  Value r = arith::AddIOp::create(b, arith::AddIOp::create(b, fb, s.bf16Half), lsb);
  Sample out;
  out.high = arith::ShRUIOp::create(b, r, s.s16i32);
  out.bits = arith::ShLIOp::create(b, out.high, s.s16i32);
  out.value = arith::BitcastOp::create(b, f32, out.bits);
  return out;
}

// Where a piece at (row0, col0) of a tensor `fullCols` wide sits: the full
// tensor's index of the piece's element (r, c).
struct Piece {
  Value fullCols, row0, col0;
  Value index(ImplicitLocOpBuilder &b, Value r, Value c) const {
    Value rc = arith::MulIOp::create(b, arith::AddIOp::create(b, r, row0), fullCols);
    return arith::AddIOp::create(b, rc, arith::AddIOp::create(b, c, col0));
  }
};

// A loop of this part's elements, part, part + parts, .. < count (i64), with
// the builder left inside; returns the element.
Value forEachOfPart(KernelScope &k, Value count, ValueRange init = {}) {
  unsigned n = k.func.getNumArguments();
  auto loop = scf::ForOp::create(k.b, k.arg(n - 2), count, k.arg(n - 1), init);
  k.b.setInsertionPointToStart(loop.getBody());
  return loop.getInductionVar();
}

Tiling synthesisTiling() {
  Tiling tiling;
  tiling.set("kind", "synthesis");
  return tiling;
}

} // namespace

KernelSpec synthesizeBf16() {
  auto args = [](Builder &b) -> std::vector<Type> {
    Type i64 = b.getI64Type();
    return {MemRefType::get({ShapedType::kDynamic}, b.getI16Type()),
            i64,
            i64,
            i64,
            i64,
            i64,
            i64,
            i64,
            i64};
  };
  // (out, key, rows, cols, full_cols, row0, col0, mean_bits, std_bits)
  return buildKernel("synth_bf16", "kiln.synthesize", synthesisTiling(), args, [](KernelScope &k) {
    ImplicitLocOpBuilder &b = k.b;
    Stream s = streamConstants(b, k.arg(1), k.arg(7), k.arg(8));
    Piece piece{k.arg(4), k.arg(5), k.arg(6)};
    Value cols = k.arg(3);
    Value count = arith::MulIOp::create(b, k.arg(2), cols);
    Value i = forEachOfPart(k, count);
    Value r = arith::DivUIOp::create(b, i, cols);
    Value c = arith::RemUIOp::create(b, i, cols);
    Sample v = sample(b, s, piece.index(b, r, c));
    Value h = arith::TruncIOp::create(b, b.getI16Type(), v.high);
    Value at = arith::IndexCastOp::create(b, b.getIndexType(), i);
    memref::StoreOp::create(b, h, k.arg(0), ValueRange{at});
    b.setInsertionPointAfter(i.getParentBlock()->getParentOp());
  });
}

KernelSpec synthesizeNvfp4Amax() {
  // The module's amax as f32 bits (non-negative floats order as their bits):
  // each part's maximum, then an atomic max into amax[0] (zeroed first).
  auto args = [](Builder &b) -> std::vector<Type> {
    Type i64 = b.getI64Type();
    return {MemRefType::get({1}, b.getI32Type()), i64, i64, i64, i64};
  };
  // (amax, key, count, mean_bits, std_bits)
  return buildKernel(
      "synth_nvfp4_amax", "kiln.synthesize", synthesisTiling(), args, [](KernelScope &k) {
        ImplicitLocOpBuilder &b = k.b;
        Type i32 = b.getI32Type();
        Stream s = streamConstants(b, k.arg(1), k.arg(3), k.arg(4));
        Value c0 = k.index(0);
        Value zero = arith::ConstantIntOp::create(b, i32, 0);
        Value absMask = arith::ConstantIntOp::create(b, i32, 2147483647);
        Value i = forEachOfPart(k, k.arg(2), ValueRange{zero});
        auto loop = llvm::cast<scf::ForOp>(i.getParentBlock()->getParentOp());
        Sample v = sample(b, s, i);
        Value mag = arith::AndIOp::create(b, v.bits, absMask);
        scf::YieldOp::create(
            b, ValueRange{arith::MaxUIOp::create(b, loop.getRegionIterArgs()[0], mag)});
        b.setInsertionPointAfter(loop);
        memref::AtomicRMWOp::create(b, arith::AtomicRMWKind::maxu, loop.getResult(0), k.arg(0),
                                    ValueRange{c0});
      });
}

KernelSpec synthesizeNvfp4Quant() {
  // Block b of 16 values of the piece: its E4M3 scale (blockAmax / 6 /
  // global, saturating RNE) and eight bytes of E2M1 codes (value / scale,
  // ties to even), low nibble first; part 0 also writes the global scale.
  auto args = [](Builder &b) -> std::vector<Type> {
    Type i64 = b.getI64Type();
    Type bytes = MemRefType::get({ShapedType::kDynamic}, b.getI8Type());
    return {bytes,
            bytes,
            MemRefType::get({1}, b.getF32Type()),
            MemRefType::get({1}, b.getI32Type()),
            i64,
            i64,
            i64,
            i64,
            i64,
            i64,
            i64,
            i64};
  };
  // (codes, scales, global, amax, key, rows, cols, full_cols, row0, col0,
  // mean_bits, std_bits)
  return buildKernel(
      "synth_nvfp4_quant", "kiln.synthesize", synthesisTiling(), args, [](KernelScope &k) {
        ImplicitLocOpBuilder &b = k.b;
        Type i8 = b.getI8Type(), i32 = b.getI32Type(), i64 = b.getI64Type();
        FloatType f32 = b.getF32Type(), f64 = b.getF64Type();
        Stream s = streamConstants(b, k.arg(4), k.arg(10), k.arg(11));
        Piece piece{k.arg(7), k.arg(8), k.arg(9)};
        auto f = [&](float v) {
          return arith::ConstantFloatOp::create(b, f32, APFloat(v)).getResult();
        };
        auto c8b = [&](int64_t v) { return arith::ConstantIntOp::create(b, i8, v).getResult(); };
        auto c32 = [&](int64_t v) { return arith::ConstantIntOp::create(b, i32, v).getResult(); };
        auto c64 = [&](int64_t v) { return arith::ConstantIntOp::create(b, i64, v).getResult(); };
        Value c0 = k.index(0), c8 = k.index(8);
        Value zeroF = f(0.0f), oneF = f(1.0f), six = f(6.0f), e4m3Max = f(448.0f),
              gridMax = f(2688.0f);
        Value zeroI8 = c8b(0), threeI8 = c8b(3), fourI8 = c8b(4);
        Value s31 = c32(31);
        // E2M1's rounding thresholds: codes 1 to 7 from these up (ties to
        // even: strictly above for the odd codes' lower bounds).
        Value e2[7] = {f(0.25f), f(0.75f), f(1.25f), f(1.75f), f(2.5f), f(3.5f), f(5.0f)};
        Value c16 = c64(16), zeroI64 = c64(0);
        Value s23 = c32(23), m8 = c32(255), bias = c32(127), minExp = c32(-6), three = c32(3),
              seven = c32(7), eight = c32(8), fifteen = c32(15), maxCode = c32(126),
              zeroI32 = c32(0);
        Value f64Bias = c64(1023), s52 = c64(52);
        Value f32BiasM10 = c32(117);
        Value twoM9 = f(0.001953125f);
        // The module's global scale; an all-zero module (or an amax whose
        // scale underflows) keeps 1 and zero codes, as the host's quantiser
        // does.
        Value amaxF =
            arith::BitcastOp::create(b, f32, memref::LoadOp::create(b, k.arg(3), ValueRange{c0}));
        Value g0 = arith::DivFOp::create(b, amaxF, gridMax);
        Value amaxZero = arith::CmpFOp::create(b, arith::CmpFPredicate::OEQ, amaxF, zeroF);
        Value gZero = arith::CmpFOp::create(b, arith::CmpFPredicate::OEQ, g0, zeroF);
        Value degenerate = arith::OrIOp::create(b, amaxZero, gZero);
        Value glob = arith::SelectOp::create(b, degenerate, oneF, g0);
        unsigned n = k.func.getNumArguments();
        Value first = arith::CmpIOp::create(b, arith::CmpIPredicate::eq, k.arg(n - 2), zeroI64);
        {
          auto ifFirst = scf::IfOp::create(b, first, /*withElse=*/false);
          OpBuilder::InsertionGuard guard(b);
          b.setInsertionPointToStart(&ifFirst.getThenRegion().front());
          memref::StoreOp::create(b, glob, k.arg(2), ValueRange{c0});
        }
        Value blocksRow = arith::DivUIOp::create(b, k.arg(6), c16);
        Value blocks = arith::MulIOp::create(b, k.arg(5), blocksRow);
        Value block = forEachOfPart(k, blocks);
        Value r = arith::DivUIOp::create(b, block, blocksRow);
        Value cb16 = arith::MulIOp::create(b, arith::RemUIOp::create(b, block, blocksRow), c16);
        Value values[16];
        Value amax = zeroF;
        for (int64_t j = 0; j < 16; ++j) {
          Value col = arith::AddIOp::create(b, cb16, c64(j));
          values[j] = sample(b, s, piece.index(b, r, col)).value;
          amax = arith::MaximumFOp::create(b, amax, math::AbsFOp::create(b, values[j]));
        }
        // E4M3 of blockAmax / 6 / global: saturating, ties to even.
        Value m = arith::DivFOp::create(b, arith::DivFOp::create(b, amax, six), glob);
        Value over = arith::CmpFOp::create(b, arith::CmpFPredicate::OGT, m, e4m3Max);
        Value isZero = arith::CmpFOp::create(b, arith::CmpFPredicate::OEQ, m, zeroF);
        Value mb = arith::BitcastOp::create(b, i32, m);
        Value be = arith::AndIOp::create(b, arith::ShRUIOp::create(b, mb, s23), m8);
        Value e = arith::MaxSIOp::create(b, arith::SubIOp::create(b, be, bias), minExp);
        Value shift = arith::ExtSIOp::create(b, i64, arith::SubIOp::create(b, three, e));
        Value pbits = arith::ShLIOp::create(b, arith::AddIOp::create(b, f64Bias, shift), s52);
        Value pow = arith::BitcastOp::create(b, f64, pbits);
        Value scaled = arith::MulFOp::create(b, arith::ExtFOp::create(b, f64, m), pow);
        Value units = arith::FPToUIOp::create(b, i32, math::RoundEvenOp::create(b, scaled));
        Value atMin = arith::CmpIOp::create(b, arith::CmpIPredicate::eq, e, minExp);
        Value small = arith::CmpIOp::create(b, arith::CmpIPredicate::ult, units, eight);
        Value sub = arith::AndIOp::create(b, atMin, small);
        Value eb3 = arith::ShLIOp::create(b, arith::AddIOp::create(b, e, seven), three);
        Value normalCode = arith::AddIOp::create(b, eb3, arith::SubIOp::create(b, units, eight));
        Value sc = arith::SelectOp::create(b, sub, units, normalCode);
        sc = arith::MinUIOp::create(b, sc, maxCode);
        sc = arith::SelectOp::create(b, isZero, zeroI32, sc);
        sc = arith::SelectOp::create(b, over, maxCode, sc);
        Value scode = arith::SelectOp::create(b, degenerate, zeroI32, sc);
        // Its value times the global scale: the block's scale.
        Value sx = arith::AndIOp::create(b, arith::ShRUIOp::create(b, scode, three), fifteen);
        Value sm = arith::AndIOp::create(b, scode, seven);
        Value subV = arith::MulFOp::create(b, arith::UIToFPOp::create(b, f32, sm), twoM9);
        Value sm8 = arith::UIToFPOp::create(b, f32, arith::AddIOp::create(b, sm, eight));
        Value peBits = arith::ShLIOp::create(b, arith::AddIOp::create(b, sx, f32BiasM10), s23);
        Value normV = arith::MulFOp::create(b, sm8, arith::BitcastOp::create(b, f32, peBits));
        Value sxZero = arith::CmpIOp::create(b, arith::CmpIPredicate::eq, sx, zeroI32);
        Value scale =
            arith::MulFOp::create(b, arith::SelectOp::create(b, sxZero, subV, normV), glob);
        Value scaleZero = arith::CmpFOp::create(b, arith::CmpFPredicate::OEQ, scale, zeroF);
        Value dead = arith::OrIOp::create(b, scaleZero, degenerate);
        Value live =
            arith::XOrIOp::create(b, dead, arith::ConstantIntOp::create(b, b.getI1Type(), 1));
        Value scode8 = arith::TruncIOp::create(b, i8, scode);
        Value bx = arith::IndexCastOp::create(b, b.getIndexType(), block);
        memref::StoreOp::create(b, scode8, k.arg(1), ValueRange{bx});
        Value codes[16];
        const arith::CmpFPredicate above[7] = {arith::CmpFPredicate::OGT, arith::CmpFPredicate::OGE,
                                               arith::CmpFPredicate::OGT, arith::CmpFPredicate::OGE,
                                               arith::CmpFPredicate::OGT, arith::CmpFPredicate::OGE,
                                               arith::CmpFPredicate::OGT};
        for (int64_t j = 0; j < 16; ++j) {
          Value q = arith::DivFOp::create(b, values[j], scale);
          Value qa = math::AbsFOp::create(b, q);
          Value qs = arith::ShRUIOp::create(b, arith::BitcastOp::create(b, i32, q), s31);
          Value sign = arith::ShLIOp::create(b, arith::TruncIOp::create(b, i8, qs), threeI8);
          Value t[7], u[7];
          for (int64_t c = 0; c < 7; ++c)
            t[c] = arith::CmpFOp::create(b, above[c], qa, e2[c]);
          for (int64_t c = 0; c < 7; ++c)
            u[c] = arith::ExtUIOp::create(b, i8, t[c]);
          Value w01 = arith::AddIOp::create(b, u[0], u[1]);
          Value w23 = arith::AddIOp::create(b, u[2], u[3]);
          Value w45 = arith::AddIOp::create(b, u[4], u[5]);
          Value w03 = arith::AddIOp::create(b, w01, w23);
          Value w46 = arith::AddIOp::create(b, w45, u[6]);
          codes[j] = arith::OrIOp::create(b, arith::AddIOp::create(b, w03, w46), sign);
        }
        Value codeAt = arith::MulIOp::create(b, bx, c8);
        for (int64_t p = 0; p < 8; ++p) {
          Value hi = arith::ShLIOp::create(b, codes[2 * p + 1], fourI8);
          Value byte = arith::OrIOp::create(b, codes[2 * p], hi);
          Value kept = arith::SelectOp::create(b, live, byte, zeroI8);
          Value at = arith::AddIOp::create(b, codeAt, k.index(p));
          memref::StoreOp::create(b, kept, k.arg(0), ValueRange{at});
        }
        b.setInsertionPointAfter(block.getParentBlock()->getParentOp());
      });
}

} // namespace kiln::kernels
