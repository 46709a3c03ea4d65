// GPU attention in three launches, shaped for decode over a long KV cache:
//  1. split: one warp per (token, up to 4 query heads of one KV head, split
//     of the visible keys) runs an online softmax per query head over its
//     keys, several keys per step (a key's head_dim/16 lanes each hold 16
//     dims, each key read once for the warp's query heads), and writes (acc,
//     max, sum) per query head;
//  2. merge: one warp per (token, query head) rescales and sums the splits;
//  3. append: the new tokens' K/V go into the cache (a ring of `window`
//     slots on sliding layers), after every query has read the old contents.
// Keys before `past` come from the cache, the rest from this call's K/V.
// Batched (`sequences` > 0, the decode_batch entry): token t is the next token
// of conversation t, at position positions[t]; the caches hold `sequences`
// conversations one after another, so conversation t's slots start at
// t * slots (slots = the cache's rows / sequences).
#include "targets/common/Generators.h"
#include "targets/common/KernelBuilder.h"
#include "targets/common/WarpSnippets.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"

namespace kiln::kernels {

using namespace mlir;
namespace {

// Stored per (token, head, split): acc[0..D), then max and sum; D + 4 keeps
// rows 16-byte aligned.
int64_t partialWidth(int64_t headDim) { return headDim + 4; }

// Query heads of one KV head a split warp takes together: each key and value
// it loads serves all of them (GQA), where a warp per query head would read
// the KV head's keys once per query head. More would not fit the registers:
// each query head holds its query, accumulator and softmax state.
constexpr int64_t kMaxHeadsPerWarp = 4;

} // namespace

bool warpAttentionFits(int64_t headDim) {
  return headDim % 16 == 0 && headDim / 16 <= 32 && 32 % (headDim / 16) == 0;
}

int64_t attentionHeadsPerWarp(int64_t qHeads, int64_t kvHeads) {
  int64_t group = qHeads / kvHeads;
  for (int64_t g = kMaxHeadsPerWarp; g > 1; --g)
    if (group % g == 0)
      return g;
  return 1;
}

KernelSpec attentionSplitWarp(int64_t qHeads, int64_t kvHeads, int64_t headDim, int64_t window,
                              double scale, int64_t splits, int64_t sequences) {
  int64_t lanesPerKey = headDim / 16, keysPerStep = 32 / lanesPerKey;
  int64_t perWarp = attentionHeadsPerWarp(qHeads, kvHeads);
  std::string name = "attention_split_warp_" + str(qHeads) + "x" + str(kvHeads) + "x" +
                     str(headDim) + (window ? "_w" + str(window) : "_global") + "_s" + str(splits) +
                     (perWarp > 1 ? "_q" + str(perWarp) : "") + batchSuffix(sequences);
  std::string q = "memref<?x" + str(qHeads) + "x" + str(headDim) + "xf32>";
  std::string kv = "memref<?x" + str(kvHeads) + "x" + str(headDim) + "xf32>";
  std::string pt =
      "memref<?x" + str(qHeads) + "x" + str(splits) + "x" + str(partialWidth(headDim)) + "xf32>";
  // Per query head i of the warp's: its query, its online softmax step for
  // a key (each key read once for all of them), and at the end the merge of
  // the warp's key groups (lanes lanesPerKey apart hold the same dims of
  // different keys) and its stores.
  std::string queries, carried, carriedTypes, steps, yields, merges;
  for (int64_t i = 0; i < perWarp; ++i) {
    std::string I = str(i);
    queries += fillTemplate(R"(
    %hi@@I@@ = arith.constant @@I@@ : index
    %head@@I@@ = arith.addi %h_first, %hi@@I@@ : index
    %qv@@I@@ = vector.load %q[%t, %head@@I@@, %d0] {alignment = 16} : @@qt@@, vector<16xf32>
)",
                            {{"I", I}, {"qt", q}});
    std::string sep = i ? ", " : "";
    carried += sep + "%m" + I + " = %floor, %l" + I + " = %zero_f, %acc" + I + " = %zero_v";
    carriedTypes += sep + "f32, f32, vector<16xf32>";
    yields += sep + "%m_new" + I + ", %l_new" + I + ", %acc_new" + I;
    steps +=
        fillTemplate(R"(
      %prod@@I@@ = arith.mulf %kv#0, %qv@@I@@ : vector<16xf32>
      %dpart@@I@@ = vector.reduction <add>, %prod@@I@@ : vector<16xf32> into f32
@@keysum@@
      %sc@@I@@ = arith.mulf %dot@@I@@, %scale : f32
      %mc@@I@@ = arith.maximumf %m@@I@@, %sc@@I@@ : f32
      %m_new@@I@@ = arith.select %valid, %mc@@I@@, %m@@I@@ : f32
      %dm@@I@@ = arith.subf %m@@I@@, %m_new@@I@@ : f32
      %corr@@I@@ = math.exp %dm@@I@@ : f32
      %ds@@I@@ = arith.subf %sc@@I@@, %m_new@@I@@ : f32
      %ew@@I@@ = math.exp %ds@@I@@ : f32
      %pw@@I@@ = arith.select %valid, %ew@@I@@, %zero_f : f32
      %lc@@I@@ = arith.mulf %l@@I@@, %corr@@I@@ : f32
      %l_new@@I@@ = arith.addf %lc@@I@@, %pw@@I@@ : f32
      %corr_v@@I@@ = vector.broadcast %corr@@I@@ : f32 to vector<16xf32>
      %pw_v@@I@@ = vector.broadcast %pw@@I@@ : f32 to vector<16xf32>
      %ac@@I@@ = arith.mulf %acc@@I@@, %corr_v@@I@@ : vector<16xf32>
      %acc_new@@I@@ = vector.fma %kv#1, %pw_v@@I@@, %ac@@I@@ : vector<16xf32>
)",
                     {{"I", I}, {"keysum", warp::warpSum("dpart" + I, "dot" + I, 1, lanesPerKey)}});
    // The merge across key groups: results 3i .. 3i + 2 of the loop.
    std::string m = "%res#" + str(3 * i), l = "%res#" + str(3 * i + 1),
                acc = "%res#" + str(3 * i + 2);
    for (int64_t offset = lanesPerKey; offset < 32; offset *= 2) {
      std::string o = str(offset) + "_" + I;
      merges += fillTemplate(R"(
    %mo@@o@@ = arith.constant @@off@@ : i32
    %m_x@@o@@, %m_ok@@o@@ = gpu.shuffle xor @@m@@, %mo@@o@@, %w32 : f32
    %l_x@@o@@, %l_ok@@o@@ = gpu.shuffle xor @@l@@, %mo@@o@@, %w32 : f32
    %m_n@@o@@ = arith.maximumf @@m@@, %m_x@@o@@ : f32
    %da@@o@@ = arith.subf @@m@@, %m_n@@o@@ : f32
    %fa@@o@@ = math.exp %da@@o@@ : f32
    %db@@o@@ = arith.subf %m_x@@o@@, %m_n@@o@@ : f32
    %fb@@o@@ = math.exp %db@@o@@ : f32
    %la@@o@@ = arith.mulf @@l@@, %fa@@o@@ : f32
    %l_n@@o@@ = math.fma %l_x@@o@@, %fb@@o@@, %la@@o@@ : f32
)",
                             {{"o", o}, {"off", str(offset)}, {"m", m}, {"l", l}});
      std::string elems;
      for (int d = 0; d < 16; ++d) {
        std::string e = "%ae" + o + "_" + str(d);
        merges += "    " + e + " = vector.extract " + acc + "[" + str(d) +
                  "] : f32 from vector<16xf32>\n" + "    " + e + "x, " + e +
                  "ok = gpu.shuffle xor " + e + ", %mo" + o + ", %w32 : f32\n";
        elems += (d ? ", " : "") + e + "x";
      }
      merges += fillTemplate(R"(
    %acc_x@@o@@ = vector.from_elements @@elems@@ : vector<16xf32>
    %fav@@o@@ = vector.broadcast %fa@@o@@ : f32 to vector<16xf32>
    %fbv@@o@@ = vector.broadcast %fb@@o@@ : f32 to vector<16xf32>
    %acc_a@@o@@ = arith.mulf @@acc@@, %fav@@o@@ : vector<16xf32>
    %acc_n@@o@@ = vector.fma %acc_x@@o@@, %fbv@@o@@, %acc_a@@o@@ : vector<16xf32>
)",
                             {{"o", o}, {"elems", elems}, {"acc", acc}});
      m = "%m_n" + o;
      l = "%l_n" + o;
      acc = "%acc_n" + o;
    }
    merges += fillTemplate(R"(
    scf.if %first_group {
      vector.store @@acc@@, %out[%t, %head@@I@@, %s, %d0] {alignment = 16} : @@pt@@, vector<16xf32>
    }
    scf.if %lead {
      memref.store @@m@@, %out[%t, %head@@I@@, %s, %dim] : @@pt@@
      memref.store @@l@@, %out[%t, %head@@I@@, %s, %dim1] : @@pt@@
    }
)",
                           {{"I", I}, {"acc", acc}, {"m", m}, {"l", l}, {"pt", pt}});
  }
  std::string body = fillTemplate(R"(
func.func @@@name@@(%q: @@qt@@, %k: @@kvt@@, %v: @@kvt@@, %kc: @@kvt@@, %vc: @@kvt@@@@positions@@, %out: @@pt@@,
                    %tokens: i64, %past_i: i64, %part: i64, %parts: i64)
    attributes {llvm.emit_c_interface,
                kiln.tiling = {kind = "warp-split-kv", parallel = "tokens*heads*splits", splits = @@S@@ : i64, window = @@W@@ : i64, heads_per_warp = @@PW@@ : i64}} {
@@ids@@
  %lpk = arith.constant @@LPK@@ : index
  %kps = arith.constant @@KPS@@ : index
  %c16 = arith.constant 16 : index
  %group = arith.constant @@G@@ : index
  %per_warp = arith.constant @@PW@@ : index
  %splits = arith.constant @@S@@ : index
  %per_token = arith.constant @@HS@@ : index
  %window = arith.constant @@W@@ : index
  %dim = arith.constant @@D@@ : index
  %dim1 = arith.constant @@D1@@ : index
  %scale = arith.constant @@scale@@ : f32
  %floor = arith.constant -1.0e+30 : f32
  %zero_f = arith.constant 0.0 : f32
  %zero_v = arith.constant dense<0.0> : vector<16xf32>
  %w32 = arith.constant 32 : i32
  %t_count = arith.index_cast %tokens : i64 to index
  %past = arith.index_cast %past_i : i64 to index
@@slots@@
  %g = arith.divui %lane, %lpk : index
  %li = arith.remui %lane, %lpk : index
  %d0 = arith.muli %li, %c16 : index
  %first_group = arith.cmpi ult, %lane, %lpk : index
  %lead = arith.cmpi eq, %lane, %c0 : index
  %items = arith.muli %t_count, %per_token : index
  scf.for %item = %warp to %items step %warps {
    %t = arith.divui %item, %per_token : index
    %rest = arith.remui %item, %per_token : index
    %hg = arith.divui %rest, %splits : index
    %s = arith.remui %rest, %splits : index
    // Query heads h_first .. + per_warp - 1, all of KV head kvh.
    %h_first = arith.muli %hg, %per_warp : index
    %kvh = arith.divui %h_first, %group : index
@@state@@
    // Visible keys [lo, p]: p - window < j for sliding layers.
    %p1 = arith.addi %p, %c1 : index
    %is_global = arith.cmpi eq, %window, %c0 : index
    %fits = arith.cmpi ule, %p1, %window : index
    %lo_w = arith.subi %p1, %window : index
    %lo_s = arith.select %fits, %c0, %lo_w : index
    %lo = arith.select %is_global, %c0, %lo_s : index
    %n = arith.subi %p1, %lo : index
    %n1 = arith.addi %n, %splits : index
    %n2 = arith.subi %n1, %c1 : index
    %chunk = arith.divui %n2, %splits : index
    %off = arith.muli %s, %chunk : index
    %kb0 = arith.addi %lo, %off : index
    %kb = arith.minui %kb0, %p1 : index
    %ke0 = arith.addi %kb, %chunk : index
    %ke = arith.minui %ke0, %p1 : index
@@queries@@
    %res:@@NC@@ = scf.for %j0 = %kb to %ke step %kps iter_args(@@carried@@) -> (@@ctypes@@) {
      %j = arith.addi %j0, %g : index
      %valid = arith.cmpi ult, %j, %ke : index
      %jc = arith.select %valid, %j, %kb : index
      %cached = arith.cmpi ult, %jc, %past_t : index
      %kv:2 = scf.if %cached -> (vector<16xf32>, vector<16xf32>) {
        %ring = arith.remui %jc, %slots : index
        %slot = arith.addi %base_t, %ring : index
        %kr = vector.load %kc[%slot, %kvh, %d0] {alignment = 16} : @@kvt@@, vector<16xf32>
        %vr = vector.load %vc[%slot, %kvh, %d0] {alignment = 16} : @@kvt@@, vector<16xf32>
        scf.yield %kr, %vr : vector<16xf32>, vector<16xf32>
      } else {
        %t1 = arith.subi %jc, %past_t : index
        %t2 = arith.addi %row0, %t1 : index
        %kr = vector.load %k[%t2, %kvh, %d0] {alignment = 16} : @@kvt@@, vector<16xf32>
        %vr = vector.load %v[%t2, %kvh, %d0] {alignment = 16} : @@kvt@@, vector<16xf32>
        scf.yield %kr, %vr : vector<16xf32>, vector<16xf32>
      }
@@steps@@
      scf.yield @@yields@@ : @@ctypes@@
    }
@@merges@@
  }
  return
}
)",
                                  {{"name", name},
                                   {"qt", q},
                                   {"kvt", kv},
                                   {"pt", pt},
                                   {"positions", batchPositionsArg(sequences)},
                                   {"slots", batchCacheSlots(sequences, kv)},
                                   {"state", batchTokenState(sequences)},
                                   {"ids", warp::warpIds()},
                                   {"LPK", str(lanesPerKey)},
                                   {"KPS", str(keysPerStep)},
                                   {"G", str(qHeads / kvHeads)},
                                   {"PW", str(perWarp)},
                                   {"S", str(splits)},
                                   {"HS", str(qHeads / perWarp * splits)},
                                   {"W", str(window)},
                                   {"D", str(headDim)},
                                   {"D1", str(headDim + 1)},
                                   {"scale", floatLiteral(scale)},
                                   {"queries", queries},
                                   {"carried", carried},
                                   {"ctypes", carriedTypes},
                                   {"NC", str(3 * perWarp)},
                                   {"steps", steps},
                                   {"yields", yields},
                                   {"merges", merges}});
  return textKernel(name, "kiln.attention", body);
}

// Built as typed IR (KernelBuilder.h).
KernelSpec attentionMergeWarp(int64_t qHeads, int64_t headDim, int64_t splits) {
  std::string name =
      "attention_merge_warp_" + str(qHeads) + "x" + str(headDim) + "_s" + str(splits);
  Tiling tiling;
  tiling.set("kind", "warp-rows").set("parallel", "tokens*heads");
  auto args = [&](Builder &b) -> std::vector<Type> {
    const int64_t dynamic = ShapedType::kDynamic;
    return {MemRefType::get({dynamic, qHeads, splits, partialWidth(headDim)}, b.getF32Type()),
            MemRefType::get({dynamic, qHeads, headDim}, b.getF32Type()), b.getI64Type()};
  };
  return buildKernel(name, "kiln.attention", tiling, args, [&](KernelScope &k) {
    ImplicitLocOpBuilder &b = k.b;
    FloatType f32 = b.getF32Type();
    auto v4 = VectorType::get({4}, f32);
    Value in = k.arg(0), out = k.arg(1);
    WarpOfPart w = warpOfPart(k);
    Value c4 = k.index(4), c128 = k.index(128), heads = k.index(qHeads);
    Value dim = k.index(headDim), dim1 = k.index(headDim + 1);
    Value floor = arith::ConstantFloatOp::create(b, f32, APFloat(-1.0e+30f));
    Value zeroF = arith::ConstantFloatOp::create(b, f32, APFloat(0.0f));
    Value oneF = arith::ConstantFloatOp::create(b, f32, APFloat(1.0f));
    Value zeroV = arith::ConstantOp::create(b, v4, DenseElementsAttr::get(v4, 0.0f));
    Value tCount = k.argIndex(2);
    Value items = arith::MulIOp::create(b, tCount, heads);
    Value l4 = arith::MulIOp::create(b, w.lane, c4);
    auto loop = scf::ForOp::create(b, w.warp, items, w.warps);
    b.setInsertionPointToStart(loop.getBody());
    Value item = loop.getInductionVar();
    Value t = arith::DivUIOp::create(b, item, heads);
    Value h = arith::RemUIOp::create(b, item, heads);
    // Straight-line over the splits, so every load can be in flight at
    // once: the splits' maxima, then their sums rescaled to the overall
    // maximum, then each lane's 4 dims of the rescaled accumulators.
    SmallVector<Value> split, m, sum, f;
    Value mx = floor;
    for (int64_t i = 0; i < splits; ++i) {
      split.push_back(k.index(i));
      m.push_back(memref::LoadOp::create(b, in, ValueRange{t, h, split[i], dim}));
      sum.push_back(memref::LoadOp::create(b, in, ValueRange{t, h, split[i], dim1}));
      mx = arith::MaximumFOp::create(b, mx, m[i]);
    }
    Value total = zeroF;
    for (int64_t i = 0; i < splits; ++i) {
      f.push_back(math::ExpOp::create(b, arith::SubFOp::create(b, m[i], mx)));
      total = math::FmaOp::create(b, sum[i], f[i], total);
    }
    Value inv = arith::DivFOp::create(b, oneF, total);
    auto dims = scf::ForOp::create(b, l4, dim, c128);
    b.setInsertionPointToStart(dims.getBody());
    Value c = dims.getInductionVar();
    Value acc = zeroV;
    for (int64_t i = 0; i < splits; ++i) {
      Value fv = vector::BroadcastOp::create(b, v4, arith::MulFOp::create(b, f[i], inv));
      Value av = vector::LoadOp::create(b, v4, in, ValueRange{t, h, split[i], c}, false,
                                        llvm::MaybeAlign(16));
      acc = vector::FMAOp::create(b, av, fv, acc);
    }
    vector::StoreOp::create(b, acc, out, ValueRange{t, h, c}, false, llvm::MaybeAlign(16));
  });
}

namespace {

// Where a batched entry's token t (a conversation of its own, `sequences`
// of them, each with its slots of the caches) or a sequential entry's keeps
// its keys: built as typed IR, as batchCacheSlots and batchTokenState write
// them for the text kernels.
Value cacheSlots(ImplicitLocOpBuilder &b, Value cache, Value c0, int64_t sequences) {
  Value rows = memref::DimOp::create(b, cache, c0);
  if (!sequences)
    return rows;
  return arith::DivUIOp::create(b, rows, arith::ConstantIndexOp::create(b, sequences));
}
struct TokenState {
  Value past, position, base, row0;
};
TokenState tokenState(ImplicitLocOpBuilder &b, int64_t sequences, Value positions, Value past,
                      Value t, Value slots, Value c0) {
  TokenState s;
  if (!sequences) {
    s.past = arith::AddIOp::create(b, past, c0);
    s.position = arith::AddIOp::create(b, past, t);
    s.base = arith::AddIOp::create(b, c0, c0);
    s.row0 = arith::AddIOp::create(b, c0, c0);
    return s;
  }
  Value at = memref::LoadOp::create(b, positions, ValueRange{t});
  s.past = arith::IndexCastOp::create(b, b.getIndexType(), at);
  s.position = arith::AddIOp::create(b, s.past, c0);
  s.base = arith::MulIOp::create(b, t, slots);
  s.row0 = arith::AddIOp::create(b, t, c0);
  return s;
}

} // namespace

// Built as typed IR (KernelBuilder.h).
KernelSpec kvAppendWarp(int64_t kvHeads, int64_t headDim, int64_t sequences) {
  std::string name = "kv_append_warp_" + str(kvHeads) + "x" + str(headDim) + batchSuffix(sequences);
  Tiling tiling;
  tiling.set("kind", "warp-rows").set("parallel", "tokens*kv_heads");
  // k, v, the caches, [positions,] tokens, past.
  auto args = [&](Builder &b) -> std::vector<Type> {
    Type kv = MemRefType::get({ShapedType::kDynamic, kvHeads, headDim}, b.getF32Type());
    std::vector<Type> types = {kv, kv, kv, kv};
    if (sequences)
      types.push_back(MemRefType::get({ShapedType::kDynamic}, b.getI32Type()));
    types.push_back(b.getI64Type());
    types.push_back(b.getI64Type());
    return types;
  };
  // Token t goes to slot (past + t) % slots unless a later token of this call
  // lands on the same slot: the result is the ring a sequential append leaves.
  return buildKernel(name, "kiln.attention", tiling, args, [&](KernelScope &k) {
    ImplicitLocOpBuilder &b = k.b;
    auto v4 = VectorType::get({4}, b.getF32Type());
    const unsigned scalars = sequences ? 5 : 4;
    Value keys = k.arg(0), values = k.arg(1), keyCache = k.arg(2), valueCache = k.arg(3);
    Value positions = sequences ? k.arg(4) : Value();
    WarpOfPart w = warpOfPart(k);
    Value c4 = k.index(4), c128 = k.index(128), heads = k.index(kvHeads);
    Value dim = k.index(headDim);
    Value tCount = k.argIndex(scalars), past = k.argIndex(scalars + 1);
    Value slots = cacheSlots(b, keyCache, w.c0, sequences);
    Value batched = arith::ConstantIntOp::create(b, sequences ? 1 : 0, 1);
    Value items = arith::MulIOp::create(b, tCount, heads);
    Value l4 = arith::MulIOp::create(b, w.lane, c4);
    auto loop = scf::ForOp::create(b, w.warp, items, w.warps);
    b.setInsertionPointToStart(loop.getBody());
    Value item = loop.getInductionVar();
    Value t = arith::DivUIOp::create(b, item, heads);
    Value h = arith::RemUIOp::create(b, item, heads);
    TokenState state = tokenState(b, sequences, positions, past, t, slots, w.c0);
    Value later = arith::AddIOp::create(b, t, slots);
    Value keptInCall = arith::CmpIOp::create(b, arith::CmpIPredicate::uge, later, tCount);
    Value kept = arith::OrIOp::create(b, keptInCall, batched);
    auto ifKept = scf::IfOp::create(b, kept, /*withElse=*/false);
    b.setInsertionPointToStart(&ifKept.getThenRegion().front());
    Value ring = arith::RemUIOp::create(b, state.position, slots);
    Value slot = arith::AddIOp::create(b, state.base, ring);
    auto dims = scf::ForOp::create(b, l4, dim, c128);
    b.setInsertionPointToStart(dims.getBody());
    Value c = dims.getInductionVar();
    for (auto [from, to] : {std::pair{keys, keyCache}, std::pair{values, valueCache}}) {
      Value row =
          vector::LoadOp::create(b, v4, from, ValueRange{t, h, c}, false, llvm::MaybeAlign(16));
      vector::StoreOp::create(b, row, to, ValueRange{slot, h, c}, false, llvm::MaybeAlign(16));
    }
  });
}

} // namespace kiln::kernels
