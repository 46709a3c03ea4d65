// Greedy decoding's token choice where the logits are: a GPU step of 64
// conversations writes 64 rows of a 202048-entry vocabulary (52 MB), whose
// copy to the host and scan there would take longer than the step itself.
// The kernel leaves one 64-bit key per row instead; the runtime reads the
// keys back (runtime/engine/DeviceGreedy.h). A key orders like (logit,
// -index): the largest logit, the first of equal ones, as std::max_element
// picks on the host.
//
// Threads take a row's entries in a stride (consecutive threads, consecutive
// entries), keep their best, combine it across the warp with shuffles, and
// the warp's first lane folds it into the row's key with an atomic max. The
// launch gives each row a whole number of warps: %parts / %rows threads.
#include "targets/common/Generators.h"
#include "targets/common/WarpSnippets.h"

namespace kiln::kernels {
namespace {

// One step of the warp's combination: the better of this lane's (value,
// index) and the lane `offset` away.
std::string combineStep(int64_t offset, const std::string &v, const std::string &i,
                        const std::string &nv, const std::string &ni) {
  return fillTemplate(R"(
  %off@@o@@ = arith.constant @@o@@ : i32
  %ov@@o@@, %okv@@o@@ = gpu.shuffle xor @@v@@, %off@@o@@, %width : f32
  %oi@@o@@, %oki@@o@@ = gpu.shuffle xor @@i@@, %off@@o@@, %width : i32
  %better@@o@@ = arith.cmpf ogt, %ov@@o@@, @@v@@ : f32
  %same@@o@@ = arith.cmpf oeq, %ov@@o@@, @@v@@ : f32
  %lower@@o@@ = arith.cmpi ult, %oi@@o@@, @@i@@ : i32
  %tie@@o@@ = arith.andi %same@@o@@, %lower@@o@@ : i1
  %take@@o@@ = arith.ori %better@@o@@, %tie@@o@@ : i1
  @@nv@@ = arith.select %take@@o@@, %ov@@o@@, @@v@@ : f32
  @@ni@@ = arith.select %take@@o@@, %oi@@o@@, @@i@@ : i32
)",
                      {{"o", str(offset)}, {"v", v}, {"i", i}, {"nv", nv}, {"ni", ni}});
}

} // namespace

KernelSpec greedyKeys() {
  std::string combine;
  std::string v = "%best#0", i = "%best#1";
  for (int64_t offset = 1; offset < warp::kWarp; offset *= 2) {
    std::string nv = "%v" + str(offset), ni = "%i" + str(offset);
    combine += combineStep(offset, v, i, nv, ni);
    v = nv;
    i = ni;
  }
  std::string body = fillTemplate(R"(
func.func @greedy_keys(%logits: memref<?xf32>, %keys: memref<?xi64>, %rows: i64, %vocab: i64,
                       %part: i64, %parts: i64)
    attributes {llvm.emit_c_interface, kiln.tiling = {kind = "greedy"}} {
  %zero = arith.constant 0 : i64
  %c32 = arith.constant 32 : i64
  %width = arith.constant 32 : i32
  %neg_inf = arith.constant 0xFF800000 : f32
  %all_ones = arith.constant -1 : i32
  %sign_bit = arith.constant -2147483648 : i32
  %zero_i32 = arith.constant 0 : i32
  %s32 = arith.constant 32 : i64
  %per_row = arith.divui %parts, %rows : i64
  %r = arith.divui %part, %per_row : i64
  %first = arith.remui %part, %per_row : i64
  %live = arith.cmpi ult, %r, %rows : i64
  %end = arith.select %live, %vocab, %zero : i64
  %base = arith.muli %r, %vocab : i64
  %none = arith.trunci %vocab : i64 to i32
  %best:2 = scf.for %e = %first to %end step %per_row iter_args(%bv = %neg_inf, %bi = %none) -> (f32, i32) : i64 {
    %at = arith.addi %base, %e : i64
    %ix = arith.index_cast %at : i64 to index
    %x = memref.load %logits[%ix] : memref<?xf32>
    // Better, or the first number (-inf included; NaN never).
    %above = arith.cmpf ogt, %x, %bv : f32
    %number = arith.cmpf ord, %x, %x : f32
    %unset = arith.cmpi eq, %bi, %none : i32
    %first_number = arith.andi %number, %unset : i1
    %gt = arith.ori %above, %first_number : i1
    %e32 = arith.trunci %e : i64 to i32
    %nv = arith.select %gt, %x, %bv : f32
    %ni = arith.select %gt, %e32, %bi : i32
    scf.yield %nv, %ni : f32, i32
  }
@@combine@@
  %lane = arith.remui %part, %c32 : i64
  %lead = arith.cmpi eq, %lane, %zero : i64
  %store = arith.andi %lead, %live : i1
  scf.if %store {
    // The value's bits (-0 made +0, which compare equal), reordered so that
    // unsigned order is float order; below them the index's complement (the
    // first index wins a tie).
    %plus_zero = arith.constant 0.0 : f32
    %canonical = arith.addf @@v@@, %plus_zero : f32
    %bits = arith.bitcast %canonical : f32 to i32
    %negative = arith.cmpi slt, %bits, %zero_i32 : i32
    %flipped = arith.xori %bits, %all_ones : i32
    %marked = arith.ori %bits, %sign_bit : i32
    %ordered = arith.select %negative, %flipped, %marked : i32
    %hi32 = arith.extui %ordered : i32 to i64
    %hi = arith.shli %hi32, %s32 : i64
    %rank = arith.xori @@i@@, %all_ones : i32
    %lo = arith.extui %rank : i32 to i64
    %key = arith.ori %hi, %lo : i64
    %rx = arith.index_cast %r : i64 to index
    %old = memref.atomic_rmw maxu %key, %keys[%rx] : (i64, memref<?xi64>) -> i64
  }
  return
}
)",
                                  {{"combine", combine}, {"v", v}, {"i", i}});
  return textKernel("greedy_keys", "kiln.greedy", body);
}

} // namespace kiln::kernels
