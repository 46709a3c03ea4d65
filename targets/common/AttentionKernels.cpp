// Attention over the KV cache (the rotary embedding before it is a row stage,
// HeadRowKernels.h). The attention kernel serves prefill and decode alike: queries at positions
// past .. past+T-1 attend to the cached positions still in their window and to the new tokens up to
// themselves (online softmax), then the new K/V are written to the cache (a ring of `window` slots
// for sliding layers). Launch parts split the KV heads, so a part only reads and writes its own
// heads' cache. The batched variant (decode_batch) gives token t conversation t's caches and
// position (Generators.h).
#include "targets/common/Generators.h"

namespace kiln::kernels {

KernelSpec attention(int64_t qHeads, int64_t kvHeads, int64_t headDim, int64_t window, double scale,
                     int64_t sequences) {
  std::string name = "attention_" + std::to_string(qHeads) + "x" + std::to_string(kvHeads) + "x" +
                     std::to_string(headDim) +
                     (window ? "_w" + std::to_string(window) : "_global") + batchSuffix(sequences);
  std::string lanes = headDim % 16 == 0 ? "16" : "1";
  std::string q = "memref<?x" + std::to_string(qHeads) + "x" + std::to_string(headDim) + "xf32>";
  std::string kv = "memref<?x" + std::to_string(kvHeads) + "x" + std::to_string(headDim) + "xf32>";
  std::string vf = "vector<" + lanes + "xf32>";
  // One key: score, online-softmax update of (max, sum) and of the output
  // accumulator %acc, reading the key from @@K@@[@@row@@] and the value from
  // @@V@@[@@row@@].
  std::string update = R"(
        %zero_v = arith.constant dense<0.0> : @@vf@@
        %dotv = scf.for %d = %c0 to %dim step %step iter_args(%sv = %zero_v) -> (@@vf@@) {
          %qv = vector.load %q[%t, %h, %d] : @@qt@@, @@vf@@
          %kvv = vector.load @@K@@[@@row@@, %kvh, %d] : @@kvt@@, @@vf@@
          %pr = arith.mulf %qv, %kvv : @@vf@@
          %ns = arith.addf %sv, %pr : @@vf@@
          scf.yield %ns : @@vf@@
        }
        %dot = vector.reduction <add>, %dotv : @@vf@@ into f32
        %score = arith.mulf %dot, %scale : f32
        %m_new = arith.maximumf %m, %score : f32
        %dm = arith.subf %m, %m_new : f32
        %corr = math.exp %dm : f32
        %ds = arith.subf %score, %m_new : f32
        %pw = math.exp %ds : f32
        %l_c = arith.mulf %l, %corr : f32
        %l_new = arith.addf %l_c, %pw : f32
        %corr_v = vector.broadcast %corr : f32 to @@vf@@
        %pw_v = vector.broadcast %pw : f32 to @@vf@@
        scf.for %d = %c0 to %dim step %step {
          %av = vector.load %acc[%d] : memref<@@D@@xf32>, @@vf@@
          %vv = vector.load @@V@@[@@row@@, %kvh, %d] : @@kvt@@, @@vf@@
          %ac = arith.mulf %av, %corr_v : @@vf@@
          %pv = arith.mulf %vv, %pw_v : @@vf@@
          %an = arith.addf %ac, %pv : @@vf@@
          vector.store %an, %acc[%d] : memref<@@D@@xf32>, @@vf@@
        }
        scf.yield %m_new, %l_new : f32, f32
)";
  std::string D = std::to_string(headDim);
  std::string cached = fillTemplate(
      update,
      {{"K", "%kc"}, {"V", "%vc"}, {"row", "%slot"}, {"vf", vf}, {"qt", q}, {"kvt", kv}, {"D", D}});
  std::string fresh = fillTemplate(
      update,
      {{"K", "%k"}, {"V", "%v"}, {"row", "%t2"}, {"vf", vf}, {"qt", q}, {"kvt", kv}, {"D", D}});
  std::string body = fillTemplate(R"(
func.func @@@name@@(%q: @@qt@@, %k: @@kvt@@, %v: @@kvt@@, %kc: @@kvt@@, %vc: @@kvt@@@@positions@@, %out: @@qt@@,
                    %tokens: i64, %past_i: i64, %part: i64, %parts: i64)
    attributes {llvm.emit_c_interface,
                kiln.tiling = {kind = "online-softmax", lanes = @@lanes@@ : i64, parallel = "kv_heads", window = @@W@@ : i64}} {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %step = arith.constant @@lanes@@ : index
  %dim = arith.constant @@D@@ : index
  %group = arith.constant @@G@@ : index
  %kv_heads = arith.constant @@Hkv@@ : index
  %window = arith.constant @@W@@ : index
  %scale = arith.constant @@scale@@ : f32
  %neg_inf = arith.constant 0xFF800000 : f32
  %zero_f = arith.constant 0.0 : f32
  %one_f = arith.constant 1.0 : f32
  %t_count = arith.index_cast %tokens : i64 to index
  %past = arith.index_cast %past_i : i64 to index
@@slots@@
  %acc = memref.alloca() : memref<@@D@@xf32>
  %zero_d = arith.constant dense<0.0> : @@vf@@
  @@range@@
  scf.for %kvh = %hbegin to %hend step %c1 {
    scf.for %g = %c0 to %group step %c1 {
      %hb = arith.muli %kvh, %group : index
      %h = arith.addi %hb, %g : index
      scf.for %t = %c0 to %t_count step %c1 {
@@state@@
        // First visible position: p - window + 1 for sliding layers, 0 for global.
        %p1 = arith.addi %p, %c1 : index
        %lo_w = arith.subi %p1, %window : index
        %is_global = arith.cmpi eq, %window, %c0 : index
        %lo_s = arith.maxsi %lo_w, %c0 : index
        %lo = arith.select %is_global, %c0, %lo_s : index
        scf.for %d = %c0 to %dim step %step {
          vector.store %zero_d, %acc[%d] : memref<@@D@@xf32>, @@vf@@
        }
        %lo_cached = arith.minui %lo, %past_t : index
        %ml0:2 = scf.for %j = %lo_cached to %past_t step %c1 iter_args(%m = %neg_inf, %l = %zero_f) -> (f32, f32) {
          %ring = arith.remui %j, %slots : index
          %slot = arith.addi %base_t, %ring : index
@@cached@@
        }
        // This call's keys from position %past_t up to the query's own:
        // rows %row0 + (position - %past_t) of %k and %v.
        %lo_new_s = arith.subi %lo, %past_t : index
        %lo_new = arith.maxsi %lo_new_s, %c0 : index
        %p_end = arith.addi %p, %c1 : index
        %t_end = arith.subi %p_end, %past_t : index
        %ml:2 = scf.for %i2 = %lo_new to %t_end step %c1 iter_args(%m = %ml0#0, %l = %ml0#1) -> (f32, f32) {
        %t2 = arith.addi %row0, %i2 : index
@@fresh@@
        }
        %inv = arith.divf %one_f, %ml#1 : f32
        %inv_v = vector.broadcast %inv : f32 to @@vf@@
        scf.for %d = %c0 to %dim step %step {
          %av = vector.load %acc[%d] : memref<@@D@@xf32>, @@vf@@
          %o = arith.mulf %av, %inv_v : @@vf@@
          vector.store %o, %out[%t, %h, %d] : @@qt@@, @@vf@@
        }
      }
    }
    // The new tokens' K/V into the cache, in order (in a ring, later ones win).
    scf.for %t2 = %c0 to %t_count step %c1 {
@@append_slot@@
      scf.for %d = %c0 to %dim step %step {
        %kv1 = vector.load %k[%t2, %kvh, %d] : @@kvt@@, @@vf@@
        vector.store %kv1, %kc[%slot, %kvh, %d] : @@kvt@@, @@vf@@
        %vv1 = vector.load %v[%t2, %kvh, %d] : @@kvt@@, @@vf@@
        vector.store %vv1, %vc[%slot, %kvh, %d] : @@kvt@@, @@vf@@
      }
    }
  }
  return
}
)",
                                  {{"name", name},
                                   {"qt", q},
                                   {"kvt", kv},
                                   {"vf", vf},
                                   {"lanes", lanes},
                                   {"D", std::to_string(headDim)},
                                   {"G", std::to_string(qHeads / kvHeads)},
                                   {"Hkv", std::to_string(kvHeads)},
                                   {"W", std::to_string(window)},
                                   {"scale", floatLiteral(scale)},
                                   {"range", partRange("%kv_heads", "h")},
                                   {"positions", batchPositionsArg(sequences)},
                                   {"slots", batchCacheSlots(sequences, kv)},
                                   {"state", batchTokenState(sequences)},
                                   {"append_slot", sequences ? R"(
      %ap_i = memref.load %positions[%t2] : memref<?xi32>
      %ap = arith.index_cast %ap_i : i32 to index
      %aring = arith.remui %ap, %slots : index
      %abase = arith.muli %t2, %slots : index
      %slot = arith.addi %abase, %aring : index)"
                                                             : R"(
      %pp = arith.addi %past, %t2 : index
      %slot = arith.remui %pp, %slots : index)"},
                                   {"cached", cached},
                                   {"fresh", fresh}});
  return textKernel(name, "kiln.attention", body);
}

} // namespace kiln::kernels
