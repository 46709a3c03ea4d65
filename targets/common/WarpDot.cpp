#include "targets/common/WarpDot.h"

#include "targets/common/ExpertLists.h"
#include "targets/common/KernelBuilder.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/Support/ErrorHandling.h"

#include <algorithm>
#include <array>
#include <optional>
#include <utility>
#include <vector>

namespace kiln::kernels::warp {

using namespace mlir;

Value warpSum(ImplicitLocOpBuilder &b, Value value) {
  Value width = arith::ConstantIntOp::create(b, 32, 32);
  for (int32_t offset = 1; offset < 32; offset *= 2) {
    Value distance = arith::ConstantIntOp::create(b, offset, 32);
    Value other =
        gpu::ShuffleOp::create(b, value, distance, width, gpu::ShuffleMode::XOR).getShuffleResult();
    value = arith::AddFOp::create(b, value, other);
  }
  return value;
}

SmallVector<Value, 2> concat(ValueRange lead, Value last) {
  SmallVector<Value, 2> all(lead.begin(), lead.end());
  all.push_back(last);
  return all;
}

namespace {

using Indices = SmallVector<Value, 2>;

// Values loaded once per chunk and shared by the rows that read them: the
// vector's rows (by index) and the weight rows (by memref and index).
template <typename Loaded> class ChunkCache {
public:
  // The entry for `key`, and whether it is new (to be loaded now).
  std::pair<Loaded *, bool> find(const Indices &key) {
    for (auto &[k, v] : entries)
      if (llvm::equal(k, key))
        return {&v, false};
    entries.emplace_back(key, Loaded());
    return {&entries.back().second, true};
  }

private:
  std::vector<std::pair<Indices, Loaded>> entries;
};

Indices weightKey(const Row &row) { return concat(row.at, row.w); }

// The constants of the NVFP4 decoding in registers: an E2M1 code s|e1 e0|m
// placed in an f16 as s at bit 15 and e1 e0 m at bits 11..9 is the code's
// value times 2^-14; an E4M3 byte placed as s at bit 15 and its other bits at
// 14..7 is its value times 2^-8. Both factors fold into one constant, 2^22,
// applied at the end.
struct Nvfp4Constants {
  Value c2, c8, loMask, hiMask, sh9, sh12;
  Value scaleSign, scaleMag, scaleSh8, scaleSh7; // vector<2xi16>
  Value groupSign, groupMag, groupSh8, groupSh7; // vector<8xi16>
  Value fold, shiftNibbles[4];                   // [1..3]: 4, 8, 12
  Value zero;                                    // dense 0 : vector<8xf32>

  Nvfp4Constants(ImplicitLocOpBuilder &b, Value zeroVector) : zero(zeroVector) {
    auto splat = [&](int64_t lanes, Type elem, int64_t value) -> Value {
      auto type = VectorType::get({lanes}, elem);
      return arith::ConstantOp::create(b, type,
                                       DenseElementsAttr::get(type, b.getIntegerAttr(elem, value)));
    };
    Type i32 = b.getI32Type(), i16 = b.getI16Type();
    c2 = arith::ConstantIndexOp::create(b, 2);
    c8 = arith::ConstantIndexOp::create(b, 8);
    loMask = splat(4, i32, 0x70007);
    hiMask = splat(4, i32, 0x80008);
    sh9 = splat(4, i32, 9);
    sh12 = splat(4, i32, 12);
    scaleSign = splat(2, i16, 128);
    scaleMag = splat(2, i16, 127);
    scaleSh8 = splat(2, i16, 8);
    scaleSh7 = splat(2, i16, 7);
    groupSign = splat(8, i16, 128);
    groupMag = splat(8, i16, 127);
    groupSh8 = splat(8, i16, 8);
    groupSh7 = splat(8, i16, 7);
    fold = arith::ConstantOp::create(b, b.getF32FloatAttr(4194304.0f));
    for (int i = 1; i < 4; ++i)
      shiftNibbles[i] = splat(4, i32, 4 * i);
  }
};

// E4M3 bytes (vector<Nxi8>) as f32, times 2^8: the byte's sign at bit 15 of
// an f16 and its other bits at 14..7.
Value e4m3Decode(ImplicitLocOpBuilder &b, Value bytes, Value sign, Value mag, Value sh8,
                 Value sh7) {
  int64_t n = llvm::cast<VectorType>(bytes.getType()).getNumElements();
  Value wide = arith::ExtUIOp::create(b, VectorType::get({n}, b.getI16Type()), bytes);
  Value signBit = arith::ShLIOp::create(b, arith::AndIOp::create(b, wide, sign), sh8);
  Value rest = arith::ShLIOp::create(b, arith::AndIOp::create(b, wide, mag), sh7);
  Value bits = arith::OrIOp::create(b, signBit, rest);
  Value half = arith::BitcastOp::create(b, VectorType::get({n}, b.getF16Type()), bits);
  return arith::ExtFOp::create(b, VectorType::get({n}, b.getF32Type()), half);
}

// A row's decoded chunk: 4 vectors of 8 f32 codes (times 2^-14) and their 8
// block scales (times 2^8), in the element order of the vector's X0 .. X3.
struct DecodedRow {
  Value codes[4];
  Value scales;
};

// Where a lane's pieces of one NVFP4 chunk lie: `at` its first code byte,
// `xb` its first vector element (2 at), `sb` its first scale (at / 8), and
// for m = 1 .. 7 the vector element (`xi`), code byte and scale (`ci`, `si`,
// Grouped only) of group or word m.
struct Nvfp4Offsets {
  Value at, xb, sb;
  Value xi[8], ci[8], si[8];
};

class WarpDotBuilder {
public:
  WarpDotBuilder(ImplicitLocOpBuilder &b, ArrayRef<Row> rows, bool nvfp4, Value x, ValueRange xAt)
      : b(b), rows(rows), nvfp4(nvfp4), x(x), xAt(xAt.begin(), xAt.end()) {}

  // One chunk at lane offset `at` for every row: `acc` in, the updated
  // accumulators out.
  SmallVector<Value> chunk(Value at, ValueRange acc) {
    return nvfp4 ? nvfp4Chunk(at, acc) : bf16Chunk(at, acc);
  }

  const Nvfp4Constants *consts = nullptr;
  bool grouped = false;
  Value stagedLane; // the lane, where the vector is staged in lane order

private:
  const Indices &vectorRow(const Row &row) const { return row.xAt.empty() ? xAt : row.xAt; }

  SmallVector<Value> bf16Chunk(Value at, ValueRange acc) {
    auto v8f = VectorType::get({8}, b.getF32Type());
    auto v8bf = VectorType::get({8}, b.getBF16Type());
    ChunkCache<Value> xs, ws;
    SmallVector<Value> next;
    for (auto [r, row] : llvm::enumerate(rows)) {
      auto [xv, newX] = xs.find(vectorRow(row));
      if (newX)
        *xv = vector::LoadOp::create(b, v8f, x, concat(vectorRow(row), at), false,
                                     llvm::MaybeAlign(32));
      auto [wf, newW] = ws.find(weightKey(row));
      if (newW) {
        Value wb =
            vector::LoadOp::create(b, v8bf, row.w, concat(row.at, at), false, llvm::MaybeAlign(16));
        *wf = arith::ExtFOp::create(b, v8f, wb);
      }
      next.push_back(vector::FMAOp::create(b, *xv, *wf, acc[r]));
    }
    return next;
  }

  // The lane's 32 elements of vector row `idx` as X0 .. X3: word (or group)
  // m's 4 elements are loaded together, X_i[m] = its element i, the order a
  // shifted, bitcast word of codes gives.
  std::array<Value, 4> loadVector(const Nvfp4Offsets &o, const Indices &idx) {
    auto v4f = VectorType::get({4}, b.getF32Type());
    Value parts[8];
    for (int m = 0; m < 8; ++m)
      parts[m] = vector::LoadOp::create(b, v4f, x, concat(idx, m ? o.xi[m] : o.xb), false,
                                        llvm::MaybeAlign(16));
    std::array<Value, 4> out;
    for (int i = 0; i < 4; ++i) {
      SmallVector<Value> elems;
      for (int m = 0; m < 8; ++m)
        elems.push_back(vector::ExtractOp::create(b, parts[m], ArrayRef<int64_t>{i}));
      out[i] = vector::FromElementsOp::create(b, VectorType::get({8}, b.getF32Type()), elems);
    }
    return out;
  }

  // Contiguous lanes: 16 bytes of codes and two scales, each scale covering
  // two of the four words.
  DecodedRow contiguousWeights(const Nvfp4Offsets &o, const Row &row) {
    const Nvfp4Constants &c = *consts;
    Value bytes = vector::LoadOp::create(b, VectorType::get({16}, b.getI8Type()), row.w,
                                         concat(row.at, o.at), false, llvm::MaybeAlign(16));
    Value words = vector::BitCastOp::create(b, VectorType::get({4}, b.getI32Type()), bytes);
    Value scaleBytes = vector::LoadOp::create(b, VectorType::get({2}, b.getI8Type()), row.scales,
                                              concat(row.at, o.sb), false, llvm::MaybeAlign(2));
    Value scales = e4m3Decode(b, scaleBytes, c.scaleSign, c.scaleMag, c.scaleSh8, c.scaleSh7);
    Value s0 = vector::ExtractOp::create(b, scales, ArrayRef<int64_t>{0});
    Value s1 = vector::ExtractOp::create(b, scales, ArrayRef<int64_t>{1});
    DecodedRow d;
    d.scales = vector::FromElementsOp::create(b, VectorType::get({8}, b.getF32Type()),
                                              ValueRange{s0, s0, s0, s0, s1, s1, s1, s1});
    decodeCodes(words, d);
    return d;
  }

  // Grouped lanes: 8 two-byte pieces of codes (group m at byte at + 64 m)
  // gathered into 16 bytes in group order, and the groups' 8 scales (at
  // at / 8 + 8 m).
  DecodedRow groupedWeights(const Nvfp4Offsets &o, const Row &row) {
    const Nvfp4Constants &c = *consts;
    auto v2i8 = VectorType::get({2}, b.getI8Type());
    Value pieces[8];
    SmallVector<Value> scaleBytes;
    for (int m = 0; m < 8; ++m) {
      pieces[m] = vector::LoadOp::create(b, v2i8, row.w, concat(row.at, m ? o.ci[m] : o.at), false,
                                         llvm::MaybeAlign(2));
      scaleBytes.push_back(
          memref::LoadOp::create(b, row.scales, concat(row.at, m ? o.si[m] : o.sb)));
    }
    // Pairs of pieces, then the pairs' halves: 16 bytes in group order.
    Value pairs[4];
    for (int w = 0; w < 4; ++w)
      pairs[w] = vector::ShuffleOp::create(b, pieces[2 * w], pieces[2 * w + 1],
                                           ArrayRef<int64_t>{0, 1, 2, 3});
    SmallVector<int64_t> eight = {0, 1, 2, 3, 4, 5, 6, 7}, sixteen;
    for (int64_t i = 0; i < 16; ++i)
      sixteen.push_back(i);
    Value low = vector::ShuffleOp::create(b, pairs[0], pairs[1], eight);
    Value high = vector::ShuffleOp::create(b, pairs[2], pairs[3], eight);
    Value bytes = vector::ShuffleOp::create(b, low, high, sixteen);
    Value words = vector::BitCastOp::create(b, VectorType::get({4}, b.getI32Type()), bytes);
    Value scaleVector =
        vector::FromElementsOp::create(b, VectorType::get({8}, b.getI8Type()), scaleBytes);
    DecodedRow d;
    d.scales = e4m3Decode(b, scaleVector, c.groupSign, c.groupMag, c.groupSh8, c.groupSh7);
    decodeCodes(words, d);
    return d;
  }

  // The 32 E2M1 codes of `words` as 4 vectors of 8 f16 values (times
  // 2^-14), widened: nibble i of each byte, the low and high nibble pairs of
  // each 16-bit half placed at bits 9 and 12 up.
  void decodeCodes(Value words, DecodedRow &d) {
    const Nvfp4Constants &c = *consts;
    for (int i = 0; i < 4; ++i) {
      Value src = i ? arith::ShRUIOp::create(b, words, c.shiftNibbles[i]).getResult() : words;
      Value lo = arith::ShLIOp::create(b, arith::AndIOp::create(b, src, c.loMask), c.sh9);
      Value hi = arith::ShLIOp::create(b, arith::AndIOp::create(b, src, c.hiMask), c.sh12);
      Value packed = arith::OrIOp::create(b, lo, hi);
      Value half = vector::BitCastOp::create(b, VectorType::get({8}, b.getF16Type()), packed);
      d.codes[i] = arith::ExtFOp::create(b, VectorType::get({8}, b.getF32Type()), half);
    }
  }

  SmallVector<Value> nvfp4Chunk(Value at, ValueRange acc) {
    const Nvfp4Constants &c = *consts;
    // Group m (Grouped) or word m (Contiguous) is `groupStep` elements on; a
    // vector staged in lane order has lane l's word m of chunk c at
    // 1024 c + 128 m + 4 l, where `at` = 512 c + 16 l.
    const int64_t groupStep = grouped || stagedLane ? 128 : 4;
    Nvfp4Offsets o;
    o.at = at;
    o.xb = arith::MulIOp::create(b, at, c.c2);
    if (stagedLane)
      o.xb = arith::SubIOp::create(
          b, o.xb, arith::MulIOp::create(b, stagedLane, arith::ConstantIndexOp::create(b, 28)));
    o.sb = arith::DivUIOp::create(b, at, c.c8);
    for (int m = 1; m < 8; ++m) {
      o.xi[m] = arith::AddIOp::create(b, o.xb, arith::ConstantIndexOp::create(b, groupStep * m));
      if (grouped) {
        o.ci[m] = arith::AddIOp::create(b, at, arith::ConstantIndexOp::create(b, 64 * m));
        o.si[m] = arith::AddIOp::create(b, o.sb, arith::ConstantIndexOp::create(b, 8 * m));
      }
    }
    // The shared vector row first, then each distinct vector row and weight
    // row once per chunk.
    ChunkCache<std::array<Value, 4>> xs;
    ChunkCache<DecodedRow> ws;
    *xs.find(xAt).first = loadVector(o, xAt);
    SmallVector<Value> next;
    for (auto [r, row] : llvm::enumerate(rows)) {
      auto [xv, newX] = xs.find(vectorRow(row));
      if (newX)
        *xv = loadVector(o, vectorRow(row));
      auto [wd, newW] = ws.find(weightKey(row));
      if (newW)
        *wd = grouped ? groupedWeights(o, row) : contiguousWeights(o, row);
      Value chain = c.zero;
      for (int i = 0; i < 4; ++i)
        chain = vector::FMAOp::create(b, wd->codes[i], (*xv)[i], chain);
      next.push_back(vector::FMAOp::create(b, chain, wd->scales, acc[r]));
    }
    return next;
  }

  ImplicitLocOpBuilder &b;
  ArrayRef<Row> rows;
  bool nvfp4;
  Value x;
  Indices xAt;
};

// How many chunks one loop iteration covers: enough loads in flight to hide
// memory latency without running out of registers.
int64_t chunksPerStep(int64_t chunks, size_t rows, bool nvfp4) {
  int64_t budget = nvfp4 ? 1 : std::max<int64_t>(1, 8 / int64_t(rows));
  for (int64_t u = budget; u > 1; u /= 2)
    if (chunks % u == 0)
      return u;
  return 1;
}

} // namespace

SmallVector<Value> rowsDot(ImplicitLocOpBuilder &b, const WarpOfPart &warp, ArrayRef<Row> rows,
                           bool nvfp4, Value x, ValueRange xAt, int64_t k, Value offset,
                           Nvfp4Lanes lanes) {
  // A chunk: 256 elements for bf16 (16 bytes a lane), 512 code bytes (1024
  // elements) for NVFP4; Grouped lanes need whole chunks. Lane l's part
  // starts at l laneStep.
  const int64_t extent = nvfp4 ? k / 2 : k, chunk = nvfp4 ? 512 : 256;
  if (lanes == Nvfp4Lanes::StagedVector && (!nvfp4 || extent % chunk != 0 || offset))
    llvm::report_fatal_error("kiln: a staged vector needs NVFP4 rows of whole chunks");
  if (extent % chunk != 0)
    lanes = Nvfp4Lanes::Contiguous;
  if (extent % chunk != 0 && offset)
    llvm::report_fatal_error("kiln: a warp dot over a column range needs whole chunks");
  const int64_t laneStep = !nvfp4 ? 8 : lanes == Nvfp4Lanes::Grouped ? 2 : 16;
  Type f32 = b.getF32Type();
  auto v8f = VectorType::get({8}, f32);
  Value zeroScalar =
      !nvfp4 ? arith::ConstantOp::create(b, b.getF32FloatAttr(0.0f)).getResult() : Value();
  Value two = offset && nvfp4 ? arith::ConstantIndexOp::create(b, 2).getResult() : Value();
  Value zero = arith::ConstantOp::create(b, v8f, DenseElementsAttr::get(v8f, 0.0f));
  Value laneStart =
      arith::MulIOp::create(b, warp.lane, arith::ConstantIndexOp::create(b, laneStep));
  if (offset) // columns of the codes for NVFP4: bytes
    laneStart = arith::AddIOp::create(
        b, laneStart, nvfp4 ? arith::DivUIOp::create(b, offset, two).getResult() : offset);
  std::optional<Nvfp4Constants> consts;
  if (nvfp4)
    consts.emplace(b, zero);

  WarpDotBuilder dot(b, rows, nvfp4, x, xAt);
  dot.consts = consts ? &*consts : nullptr;
  dot.grouped = lanes == Nvfp4Lanes::Grouped;
  if (lanes == Nvfp4Lanes::StagedVector)
    dot.stagedLane = warp.lane;
  SmallVector<Value> init(rows.size(), zero);
  scf::ForOp loop;
  if (extent % chunk != 0) {
    // Lanes past the row's end skip the last chunk.
    Value end = arith::ConstantIndexOp::create(b, extent);
    Value step = arith::ConstantIndexOp::create(b, chunk);
    loop = scf::ForOp::create(b, laneStart, end, step, init);
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(loop.getBody());
    scf::YieldOp::create(b, dot.chunk(loop.getInductionVar(), loop.getRegionIterArgs()));
  } else {
    const int64_t chunks = extent / chunk, u = chunksPerStep(chunks, rows.size(), nvfp4);
    Value iters = arith::ConstantIndexOp::create(b, chunks / u);
    Value stride = arith::ConstantIndexOp::create(b, chunk * u);
    loop = scf::ForOp::create(b, warp.c0, iters, warp.c1, init);
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(loop.getBody());
    Value base = arith::AddIOp::create(b, arith::MulIOp::create(b, loop.getInductionVar(), stride),
                                       laneStart);
    SmallVector<Value> acc(loop.getRegionIterArgs());
    for (int64_t i = 0; i < u; ++i) {
      Value at = i ? arith::AddIOp::create(b, base, arith::ConstantIndexOp::create(b, chunk * i))
                         .getResult()
                   : base;
      acc = dot.chunk(at, acc);
    }
    scf::YieldOp::create(b, acc);
  }
  SmallVector<Value> outs;
  for (auto [r, row] : llvm::enumerate(rows)) {
    Value sum = vector::ReductionOp::create(b, vector::CombiningKind::ADD, loop.getResult(r));
    if (nvfp4)
      outs.push_back(
          arith::MulFOp::create(b, sum, arith::MulFOp::create(b, row.global, consts->fold)));
    else
      outs.push_back(arith::AddFOp::create(b, sum, zeroScalar));
  }
  return outs;
}

void stageVectorByWords(ImplicitLocOpBuilder &b, Value x, ValueRange xAt, int64_t k, Value staged,
                        Value thread, int64_t threads, int64_t word,
                        llvm::function_ref<Value(Value)> asStaged) {
  if (k % 1024 != 0 || 32 % word != 0)
    llvm::report_fatal_error("kiln: a staged vector needs whole 1024-element chunks");
  auto index = [&](int64_t v) { return arith::ConstantIndexOp::create(b, v).getResult(); };
  auto loop = scf::ForOp::create(b, thread, index(k / word), index(threads));
  OpBuilder::InsertionGuard guard(b);
  b.setInsertionPointToStart(loop.getBody());
  // Word g: chunk g / (1024 / word), lane (g % (1024 / word)) / (32 / word),
  // the lane's word g % (32 / word).
  Value g = loop.getInductionVar();
  Value inChunk = arith::RemUIOp::create(b, g, index(1024 / word));
  Value chunkStart = arith::MulIOp::create(b, arith::SubIOp::create(b, g, inChunk), index(word));
  Value lane = arith::DivUIOp::create(b, inChunk, index(32 / word));
  Value laneWord = arith::RemUIOp::create(b, inChunk, index(32 / word));
  Value to = arith::AddIOp::create(
      b, chunkStart,
      arith::AddIOp::create(b, arith::MulIOp::create(b, laneWord, index(32 * word)),
                            arith::MulIOp::create(b, lane, index(word))));
  Value value = vector::LoadOp::create(b, VectorType::get({word}, b.getF32Type()), x,
                                       concat(xAt, arith::MulIOp::create(b, g, index(word))), false,
                                       llvm::MaybeAlign(4 * word));
  vector::StoreOp::create(b, asStaged(value), staged, ValueRange{to}, false, llvm::MaybeAlign(16));
}

void stageVectorInLaneOrder(ImplicitLocOpBuilder &b, Value x, ValueRange xAt, int64_t k,
                            Value staged, Value thread, int64_t threads) {
  stageVectorByWords(b, x, xAt, k, staged, thread, threads, 4, [](Value v) { return v; });
}

SmallVector<Row> projectionRows(const ExpertProjection &projection, Value e,
                                ArrayRef<Value> outRows, Value global) {
  SmallVector<Row> out;
  for (Value o : outRows)
    out.push_back(Row{projection.w, {e, o}, projection.scales, global});
  return out;
}

SmallVector<Value> warpSums(ImplicitLocOpBuilder &b, ValueRange values) {
  SmallVector<Value> sums;
  for (Value value : values)
    sums.push_back(warpSum(b, value));
  return sums;
}

WarpItem warpItemLoop(ImplicitLocOpBuilder &b, const WarpOfPart &warp, Value items, Value perToken,
                      Value groups, ArrayRef<Value> rowSteps) {
  auto loop = scf::ForOp::create(b, warp.warp, items, warp.warps);
  b.setInsertionPointToStart(loop.getBody());
  Value item = loop.getInductionVar();
  WarpItem it;
  it.t = arith::DivUIOp::create(b, item, perToken);
  Value rest = arith::RemUIOp::create(b, item, perToken);
  it.j = arith::DivUIOp::create(b, rest, groups);
  it.group = arith::RemUIOp::create(b, rest, groups);
  const size_t rowsPerWarp = rowSteps.size() - 1;
  it.o.push_back(arith::MulIOp::create(b, it.group, rowSteps[rowsPerWarp]));
  for (size_t r = 1; r < rowsPerWarp; ++r)
    it.o.push_back(arith::AddIOp::create(b, it.o[0], rowSteps[r]));
  return it;
}

} // namespace kiln::kernels::warp
