// GPU attention in three launches, shaped for decode over a long KV cache:
//  1. split: one warp per (token, query head, split of the visible keys)
//     runs an online softmax over its keys, several keys per step (a key's
//     head_dim/16 lanes each hold 16 dims), and writes (acc, max, sum);
//  2. merge: one warp per (token, query head) rescales and sums the splits;
//  3. append: the new tokens' K/V go into the cache (a ring of `window`
//     slots on sliding layers), after every query has read the old contents.
// Keys before `past` come from the cache, the rest from this call's K/V.
// Batched (`sequences` > 0, the decode_batch entry): token t is the next token
// of conversation t, at position positions[t]; the caches hold `sequences`
// conversations one after another, so conversation t's slots start at
// t * slots (slots = the cache's rows / sequences).
#include "targets/common/Generators.h"
#include "targets/common/WarpSnippets.h"

namespace kiln::kernels {
namespace {

// Stored per (token, head, split): acc[0..D), then max and sum; D + 4 keeps
// rows 16-byte aligned.
int64_t partialWidth(int64_t headDim) { return headDim + 4; }

} // namespace

bool warpAttentionFits(int64_t headDim) {
  return headDim % 16 == 0 && headDim / 16 <= 32 && 32 % (headDim / 16) == 0;
}

KernelSpec attentionSplitWarp(int64_t qHeads, int64_t kvHeads, int64_t headDim, int64_t window,
                              double scale, int64_t splits, int64_t sequences) {
  int64_t lanesPerKey = headDim / 16, keysPerStep = 32 / lanesPerKey;
  std::string name = "attention_split_warp_" + str(qHeads) + "x" + str(kvHeads) + "x" +
                     str(headDim) + (window ? "_w" + str(window) : "_global") + "_s" + str(splits) +
                     batchSuffix(sequences);
  std::string q = "memref<?x" + str(qHeads) + "x" + str(headDim) + "xf32>";
  std::string kv = "memref<?x" + str(kvHeads) + "x" + str(headDim) + "xf32>";
  std::string pt = "memref<?x" + str(qHeads) + "x" + str(splits) + "x" + str(partialWidth(headDim)) + "xf32>";
  // Merging the key groups of a warp at the end: lanes lanesPerKey apart hold
  // the same dims of different keys.
  std::string merge;
  for (int64_t offset = lanesPerKey; offset < 32; offset *= 2) {
    std::string o = str(offset);
    merge += fillTemplate(R"(
    %mo@@o@@ = arith.constant @@o@@ : i32
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
                          {{"o", o},
                           {"m", offset == lanesPerKey ? "%res#0" : "%m_n" + str(offset / 2)},
                           {"l", offset == lanesPerKey ? "%res#1" : "%l_n" + str(offset / 2)}});
    std::string acc = offset == lanesPerKey ? "%res#2" : "%acc_n" + str(offset / 2);
    std::string elems;
    for (int d = 0; d < 16; ++d) {
      std::string e = "%ae" + o + "_" + str(d);
      merge += "    " + e + " = vector.extract " + acc + "[" + str(d) + "] : f32 from vector<16xf32>\n" +
               "    " + e + "x, " + e + "ok = gpu.shuffle xor " + e + ", %mo" + o + ", %w32 : f32\n";
      elems += (d ? ", " : "") + e + "x";
    }
    merge += fillTemplate(R"(
    %acc_x@@o@@ = vector.from_elements @@elems@@ : vector<16xf32>
    %fav@@o@@ = vector.broadcast %fa@@o@@ : f32 to vector<16xf32>
    %fbv@@o@@ = vector.broadcast %fb@@o@@ : f32 to vector<16xf32>
    %acc_a@@o@@ = arith.mulf @@acc@@, %fav@@o@@ : vector<16xf32>
    %acc_n@@o@@ = vector.fma %acc_x@@o@@, %fbv@@o@@, %acc_a@@o@@ : vector<16xf32>
)",
                          {{"o", o}, {"elems", elems}, {"acc", acc}});
  }
  std::string last = lanesPerKey < 32 ? str(32 / 2) : "";
  std::string mFinal = lanesPerKey < 32 ? "%m_n" + last : "%res#0";
  std::string lFinal = lanesPerKey < 32 ? "%l_n" + last : "%res#1";
  std::string accFinal = lanesPerKey < 32 ? "%acc_n" + last : "%res#2";
  std::string body = fillTemplate(R"(
func.func @@@name@@(%q: @@qt@@, %k: @@kvt@@, %v: @@kvt@@, %kc: @@kvt@@, %vc: @@kvt@@@@positions@@, %out: @@pt@@,
                    %tokens: i64, %past_i: i64, %part: i64, %parts: i64)
    attributes {llvm.emit_c_interface,
                kiln.tiling = {kind = "warp-split-kv", parallel = "tokens*heads*splits", splits = @@S@@ : i64, window = @@W@@ : i64}} {
@@ids@@
  %lpk = arith.constant @@LPK@@ : index
  %kps = arith.constant @@KPS@@ : index
  %c16 = arith.constant 16 : index
  %heads = arith.constant @@H@@ : index
  %group = arith.constant @@G@@ : index
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
  %items = arith.muli %t_count, %per_token : index
  scf.for %item = %warp to %items step %warps {
    %t = arith.divui %item, %per_token : index
    %rest = arith.remui %item, %per_token : index
    %h = arith.divui %rest, %splits : index
    %s = arith.remui %rest, %splits : index
    %kvh = arith.divui %h, %group : index
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
    %qv = vector.load %q[%t, %h, %d0] {alignment = 16} : @@qt@@, vector<16xf32>
    %res:3 = scf.for %j0 = %kb to %ke step %kps iter_args(%m = %floor, %l = %zero_f, %acc = %zero_v) -> (f32, f32, vector<16xf32>) {
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
      %prod = arith.mulf %kv#0, %qv : vector<16xf32>
      %dpart = vector.reduction <add>, %prod : vector<16xf32> into f32
@@keysum@@
      %sc = arith.mulf %dot, %scale : f32
      %mc = arith.maximumf %m, %sc : f32
      %m_new = arith.select %valid, %mc, %m : f32
      %dm = arith.subf %m, %m_new : f32
      %corr = math.exp %dm : f32
      %ds = arith.subf %sc, %m_new : f32
      %ew = math.exp %ds : f32
      %pw = arith.select %valid, %ew, %zero_f : f32
      %lc = arith.mulf %l, %corr : f32
      %l_new = arith.addf %lc, %pw : f32
      %corr_v = vector.broadcast %corr : f32 to vector<16xf32>
      %pw_v = vector.broadcast %pw : f32 to vector<16xf32>
      %ac = arith.mulf %acc, %corr_v : vector<16xf32>
      %acc_new = vector.fma %kv#1, %pw_v, %ac : vector<16xf32>
      scf.yield %m_new, %l_new, %acc_new : f32, f32, vector<16xf32>
    }
@@merge@@
    %first_group = arith.cmpi ult, %lane, %lpk : index
    scf.if %first_group {
      vector.store @@acc@@, %out[%t, %h, %s, %d0] {alignment = 16} : @@pt@@, vector<16xf32>
    }
    %lead = arith.cmpi eq, %lane, %c0 : index
    scf.if %lead {
      memref.store @@mf@@, %out[%t, %h, %s, %dim] : @@pt@@
      memref.store @@lf@@, %out[%t, %h, %s, %dim1] : @@pt@@
    }
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
                                   {"H", str(qHeads)},
                                   {"G", str(qHeads / kvHeads)},
                                   {"S", str(splits)},
                                   {"HS", str(qHeads * splits)},
                                   {"W", str(window)},
                                   {"D", str(headDim)},
                                   {"D1", str(headDim + 1)},
                                   {"scale", floatLiteral(scale)},
                                   {"keysum", warp::warpSum("dpart", "dot", 1, lanesPerKey)},
                                   {"merge", merge},
                                   {"acc", accFinal},
                                   {"mf", mFinal},
                                   {"lf", lFinal}});
  return KernelSpec{name, "kiln.attention",
                    "{\"kind\": \"warp-split-kv\", \"parallel\": \"tokens*heads*splits\", \"splits\": " +
                        str(splits) + ", \"window\": " + str(window) + "}",
                    body};
}

KernelSpec attentionMergeWarp(int64_t qHeads, int64_t headDim, int64_t splits) {
  std::string name = "attention_merge_warp_" + str(qHeads) + "x" + str(headDim) + "_s" + str(splits);
  std::string pt = "memref<?x" + str(qHeads) + "x" + str(splits) + "x" + str(partialWidth(headDim)) + "xf32>";
  std::string ot = "memref<?x" + str(qHeads) + "x" + str(headDim) + "xf32>";
  // Straight-line over the splits, so every load can be in flight at once:
  // the splits' maxima, then their sums rescaled to the overall maximum, then
  // each lane's 4 dims of the rescaled accumulators.
  std::string stats, sums, accs;
  std::string mx = "%floor", total = "%zero_f", acc = "%zero_v";
  for (int64_t i = 0; i < splits; ++i) {
    std::string I = str(i);
    stats += "    %s" + I + " = arith.constant " + I + " : index\n"
             "    %m" + I + " = memref.load %in[%t, %h, %s" + I + ", %dim] : " + pt + "\n"
             "    %sum" + I + " = memref.load %in[%t, %h, %s" + I + ", %dim1] : " + pt + "\n"
             "    %mx" + I + " = arith.maximumf " + mx + ", %m" + I + " : f32\n";
    mx = "%mx" + I;
  }
  for (int64_t i = 0; i < splits; ++i) {
    std::string I = str(i);
    sums += "    %d" + I + " = arith.subf %m" + I + ", " + mx + " : f32\n"
            "    %f" + I + " = math.exp %d" + I + " : f32\n"
            "    %tl" + I + " = math.fma %sum" + I + ", %f" + I + ", " + total + " : f32\n";
    total = "%tl" + I;
  }
  for (int64_t i = 0; i < splits; ++i) {
    std::string I = str(i);
    accs += "      %fi" + I + " = arith.mulf %f" + I + ", %inv : f32\n"
            "      %fv" + I + " = vector.broadcast %fi" + I + " : f32 to vector<4xf32>\n"
            "      %av" + I + " = vector.load %in[%t, %h, %s" + I + ", %c] {alignment = 16} : " + pt + ", vector<4xf32>\n"
            "      %a" + I + " = vector.fma %av" + I + ", %fv" + I + ", " + acc + " : vector<4xf32>\n";
    acc = "%a" + I;
  }
  std::string body = fillTemplate(R"(
func.func @@@name@@(%in: @@pt@@, %out: @@ot@@, %tokens: i64, %part: i64, %parts: i64)
    attributes {llvm.emit_c_interface, kiln.tiling = {kind = "warp-rows", parallel = "tokens*heads"}} {
@@ids@@
  %c4 = arith.constant 4 : index
  %c128 = arith.constant 128 : index
  %heads = arith.constant @@H@@ : index
  %dim = arith.constant @@D@@ : index
  %dim1 = arith.constant @@D1@@ : index
  %floor = arith.constant -1.0e+30 : f32
  %zero_f = arith.constant 0.0 : f32
  %one_f = arith.constant 1.0 : f32
  %zero_v = arith.constant dense<0.0> : vector<4xf32>
  %t_count = arith.index_cast %tokens : i64 to index
  %items = arith.muli %t_count, %heads : index
  %l4 = arith.muli %lane, %c4 : index
  scf.for %item = %warp to %items step %warps {
    %t = arith.divui %item, %heads : index
    %h = arith.remui %item, %heads : index
@@stats@@
@@sums@@
    %inv = arith.divf %one_f, @@total@@ : f32
    scf.for %c = %l4 to %dim step %c128 {
@@accs@@
      vector.store @@acc@@, %out[%t, %h, %c] {alignment = 16} : @@ot@@, vector<4xf32>
    }
  }
  return
}
)",
                                  {{"name", name},
                                   {"pt", pt},
                                   {"ot", ot},
                                   {"ids", warp::warpIds()},
                                   {"H", str(qHeads)},
                                   {"D", str(headDim)},
                                   {"D1", str(headDim + 1)},
                                   {"stats", stats},
                                   {"sums", sums},
                                   {"total", total},
                                   {"accs", accs},
                                   {"acc", acc}});
  return KernelSpec{name, "kiln.attention", "{\"kind\": \"warp-rows\", \"parallel\": \"tokens*heads\"}",
                    body};
}

KernelSpec kvAppendWarp(int64_t kvHeads, int64_t headDim, int64_t sequences) {
  std::string name = "kv_append_warp_" + str(kvHeads) + "x" + str(headDim) + batchSuffix(sequences);
  std::string kv = "memref<?x" + str(kvHeads) + "x" + str(headDim) + "xf32>";
  // Token t goes to slot (past + t) % slots unless a later token of this call
  // lands on the same slot: the result is the ring a sequential append leaves.
  std::string body = fillTemplate(R"(
func.func @@@name@@(%k: @@kvt@@, %v: @@kvt@@, %kc: @@kvt@@, %vc: @@kvt@@@@positions@@, %tokens: i64, %past_i: i64, %part: i64, %parts: i64)
    attributes {llvm.emit_c_interface, kiln.tiling = {kind = "warp-rows", parallel = "tokens*kv_heads"}} {
@@ids@@
  %c4 = arith.constant 4 : index
  %c128 = arith.constant 128 : index
  %heads = arith.constant @@H@@ : index
  %dim = arith.constant @@D@@ : index
  %t_count = arith.index_cast %tokens : i64 to index
  %past = arith.index_cast %past_i : i64 to index
@@slots@@
  %items = arith.muli %t_count, %heads : index
  %l4 = arith.muli %lane, %c4 : index
  scf.for %item = %warp to %items step %warps {
    %t = arith.divui %item, %heads : index
    %h = arith.remui %item, %heads : index
@@state@@
    %later = arith.addi %t, %slots : index
    %kept_seq = arith.cmpi uge, %later, %t_count : index
    %kept = arith.ori %kept_seq, %batched : i1
    scf.if %kept {
      %ring = arith.remui %p, %slots : index
      %slot = arith.addi %base_t, %ring : index
      scf.for %c = %l4 to %dim step %c128 {
        %kr = vector.load %k[%t, %h, %c] {alignment = 16} : @@kvt@@, vector<4xf32>
        vector.store %kr, %kc[%slot, %h, %c] {alignment = 16} : @@kvt@@, vector<4xf32>
        %vr = vector.load %v[%t, %h, %c] {alignment = 16} : @@kvt@@, vector<4xf32>
        vector.store %vr, %vc[%slot, %h, %c] {alignment = 16} : @@kvt@@, vector<4xf32>
      }
    }
  }
  return
}
)",
                                  {{"name", name},
                                   {"kvt", kv},
                                   {"positions", batchPositionsArg(sequences)},
                                   {"slots", batchCacheSlots(sequences, kv) +
                                                 "  %batched = arith.constant " +
                                                 (sequences ? "true" : "false") + "\n"},
                                   {"state", batchTokenState(sequences)},
                                   {"ids", warp::warpIds()},
                                   {"H", str(kvHeads)},
                                   {"D", str(headDim)}});
  return KernelSpec{name, "kiln.attention", "{\"kind\": \"warp-rows\", \"parallel\": \"tokens*kv_heads\"}",
                    body};
}

} // namespace kiln::kernels
