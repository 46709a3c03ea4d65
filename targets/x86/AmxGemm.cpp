// y = x · Wᵀ. With bf16 weights in VNNI blocks (WeightTransform VnniBf16)
// the product runs on AMX tiles: C[16x16 f32] += A[16x32 bf16]
// · B[32x16 bf16] per tdpbf16ps, A rows read from a bf16 copy of the input
// padded to 16 rows. Launch parts split the 16-column tiles of N, so each
// weight block is streamed by one part only.
#include "targets/x86/AmxGemm.h"

#include "targets/common/Generators.h"

namespace kiln::x86 {

using kernels::fillTemplate;
using kernels::KernelSpec;
using kernels::partRange;

// One 16-column tile of N at a time (odd tile counts).
static KernelSpec linearAmxSingle(int64_t n, int64_t k) {
  std::string name = "linear_amx_" + std::to_string(n) + "x" + std::to_string(k);
  std::string body = fillTemplate(R"(
func.func @@@name@@(%a: memref<?x@@k@@xbf16>, %b: memref<?x32xbf16>, %c: memref<?x@@n@@xf32>, %rows_i: i64, %part: i64, %parts: i64)
    attributes {llvm.emit_c_interface,
                kiln.tiling = {kind = "amx", tile_m = 16 : i64, tile_n = 16 : i64, tile_k = 32 : i64,
                               block_m = 1 : i64, block_n = 1 : i64, order = "n-m-k", parallel = "n"}} {
  %c0 = arith.constant 0 : index
  %c16 = arith.constant 16 : index
  %c32 = arith.constant 32 : index
  // Whole 16-row tiles: the rows asked for, rounded up (x is padded).
  %c15 = arith.constant 15 : index
  %rows_t = arith.index_cast %rows_i : i64 to index
  %rows_up = arith.addi %rows_t, %c15 : index
  %row_tiles = arith.divui %rows_up, %c16 : index
  %rows = arith.muli %row_tiles, %c16 : index
  %kdim = arith.constant @@k@@ : index
  %kblocks = arith.constant @@kb@@ : index
  %ntiles = arith.constant @@nt@@ : index
  @@range@@
  %one = arith.constant 1 : index
  scf.for %nt = %nbegin to %nend step %one {
    %n = arith.muli %nt, %c16 : index
    %first_block = arith.muli %nt, %kblocks : index
    scf.for %m = %c0 to %rows step %c16 {
      %zero = amx.tile_zero : !amx.tile<16x16xf32>
      %acc = scf.for %kk = %c0 to %kdim step %c32 iter_args(%sum = %zero) -> (!amx.tile<16x16xf32>) {
        %ta = amx.tile_load %a[%m, %kk] : memref<?x@@k@@xbf16> into !amx.tile<16x32xbf16>
        %kb = arith.divui %kk, %c32 : index
        %block = arith.addi %first_block, %kb : index
        %brow = arith.muli %block, %c16 : index
        %tb = amx.tile_load %b[%brow, %c0] : memref<?x32xbf16> into !amx.tile<16x32xbf16>
        %next = amx.tile_mulf %ta, %tb, %sum : !amx.tile<16x32xbf16>, !amx.tile<16x32xbf16>, !amx.tile<16x16xf32>
        scf.yield %next : !amx.tile<16x16xf32>
      }
      amx.tile_store %c[%m, %n], %acc : memref<?x@@n@@xf32>, !amx.tile<16x16xf32>
    }
  }
  return
}
)",
                                  {{"name", name},
                                   {"n", std::to_string(n)},
                                   {"k", std::to_string(k)},
                                   {"kb", std::to_string(k / 32)},
                                   {"nt", std::to_string(n / 16)},
                                   {"range", partRange("%ntiles", "n")}});
  return kernels::textKernel(name, "kiln.linear", body);
}

// Pairs of 16-column tiles, and pairs of 16-row tiles while the rows allow:
// four accumulators share each A and B tile load (2 A + 2 B + 4 C = the 8
// AMX tile registers); the last 16 rows, if the row count is an odd number of
// tiles, use two accumulators.
KernelSpec linearAmx(int64_t n, int64_t k) {
  if ((n / 16) % 2 != 0)
    return linearAmxSingle(n, k);
  std::string name = "linear_amx_" + std::to_string(n) + "x" + std::to_string(k);
  std::string body = fillTemplate(R"(
func.func @@@name@@(%a: memref<?x@@k@@xbf16>, %b: memref<?x32xbf16>, %c: memref<?x@@n@@xf32>, %rows_i: i64, %part: i64, %parts: i64)
    attributes {llvm.emit_c_interface,
                kiln.tiling = {kind = "amx", tile_m = 16 : i64, tile_n = 16 : i64, tile_k = 32 : i64,
                               block_m = 2 : i64, block_n = 2 : i64, order = "n-m-k", parallel = "n"}} {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c2 = arith.constant 2 : index
  %c16 = arith.constant 16 : index
  %c32 = arith.constant 32 : index
  // Whole 16-row tiles: the rows asked for, rounded up (x is padded).
  %c15 = arith.constant 15 : index
  %rows_t = arith.index_cast %rows_i : i64 to index
  %rows_up = arith.addi %rows_t, %c15 : index
  %row_tiles = arith.divui %rows_up, %c16 : index
  %rows = arith.muli %row_tiles, %c16 : index
  %tail = arith.remui %rows, %c32 : index
  %rows2 = arith.subi %rows, %tail : index
  %kdim = arith.constant @@k@@ : index
  %kblocks = arith.constant @@kb@@ : index
  %npairs = arith.constant @@np@@ : index
  @@range@@
  scf.for %np = %nbegin to %nend step %c1 {
    %nt = arith.muli %np, %c2 : index
    %n0 = arith.muli %nt, %c16 : index
    %n1 = arith.addi %n0, %c16 : index
    %first0 = arith.muli %nt, %kblocks : index
    %first1 = arith.addi %first0, %kblocks : index
    scf.for %m = %c0 to %rows2 step %c32 {
      %m1 = arith.addi %m, %c16 : index
      %z = amx.tile_zero : !amx.tile<16x16xf32>
      %acc:4 = scf.for %kk = %c0 to %kdim step %c32
          iter_args(%s00 = %z, %s01 = %z, %s10 = %z, %s11 = %z)
          -> (!amx.tile<16x16xf32>, !amx.tile<16x16xf32>, !amx.tile<16x16xf32>, !amx.tile<16x16xf32>) {
        %kb = arith.divui %kk, %c32 : index
        %blk0 = arith.addi %first0, %kb : index
        %blk1 = arith.addi %first1, %kb : index
        %brow0 = arith.muli %blk0, %c16 : index
        %brow1 = arith.muli %blk1, %c16 : index
        %a0 = amx.tile_load %a[%m, %kk] : memref<?x@@k@@xbf16> into !amx.tile<16x32xbf16>
        %a1 = amx.tile_load %a[%m1, %kk] : memref<?x@@k@@xbf16> into !amx.tile<16x32xbf16>
        %b0 = amx.tile_load %b[%brow0, %c0] : memref<?x32xbf16> into !amx.tile<16x32xbf16>
        %b1 = amx.tile_load %b[%brow1, %c0] : memref<?x32xbf16> into !amx.tile<16x32xbf16>
        %t00 = amx.tile_mulf %a0, %b0, %s00 : !amx.tile<16x32xbf16>, !amx.tile<16x32xbf16>, !amx.tile<16x16xf32>
        %t01 = amx.tile_mulf %a0, %b1, %s01 : !amx.tile<16x32xbf16>, !amx.tile<16x32xbf16>, !amx.tile<16x16xf32>
        %t10 = amx.tile_mulf %a1, %b0, %s10 : !amx.tile<16x32xbf16>, !amx.tile<16x32xbf16>, !amx.tile<16x16xf32>
        %t11 = amx.tile_mulf %a1, %b1, %s11 : !amx.tile<16x32xbf16>, !amx.tile<16x32xbf16>, !amx.tile<16x16xf32>
        scf.yield %t00, %t01, %t10, %t11 : !amx.tile<16x16xf32>, !amx.tile<16x16xf32>, !amx.tile<16x16xf32>, !amx.tile<16x16xf32>
      }
      amx.tile_store %c[%m, %n0], %acc#0 : memref<?x@@n@@xf32>, !amx.tile<16x16xf32>
      amx.tile_store %c[%m, %n1], %acc#1 : memref<?x@@n@@xf32>, !amx.tile<16x16xf32>
      amx.tile_store %c[%m1, %n0], %acc#2 : memref<?x@@n@@xf32>, !amx.tile<16x16xf32>
      amx.tile_store %c[%m1, %n1], %acc#3 : memref<?x@@n@@xf32>, !amx.tile<16x16xf32>
    }
    scf.for %m = %rows2 to %rows step %c16 {
      %z = amx.tile_zero : !amx.tile<16x16xf32>
      %acc:2 = scf.for %kk = %c0 to %kdim step %c32 iter_args(%s0 = %z, %s1 = %z)
          -> (!amx.tile<16x16xf32>, !amx.tile<16x16xf32>) {
        %kb = arith.divui %kk, %c32 : index
        %blk0 = arith.addi %first0, %kb : index
        %blk1 = arith.addi %first1, %kb : index
        %brow0 = arith.muli %blk0, %c16 : index
        %brow1 = arith.muli %blk1, %c16 : index
        %a0 = amx.tile_load %a[%m, %kk] : memref<?x@@k@@xbf16> into !amx.tile<16x32xbf16>
        %b0 = amx.tile_load %b[%brow0, %c0] : memref<?x32xbf16> into !amx.tile<16x32xbf16>
        %b1 = amx.tile_load %b[%brow1, %c0] : memref<?x32xbf16> into !amx.tile<16x32xbf16>
        %t0 = amx.tile_mulf %a0, %b0, %s0 : !amx.tile<16x32xbf16>, !amx.tile<16x32xbf16>, !amx.tile<16x16xf32>
        %t1 = amx.tile_mulf %a0, %b1, %s1 : !amx.tile<16x32xbf16>, !amx.tile<16x32xbf16>, !amx.tile<16x16xf32>
        scf.yield %t0, %t1 : !amx.tile<16x16xf32>, !amx.tile<16x16xf32>
      }
      amx.tile_store %c[%m, %n0], %acc#0 : memref<?x@@n@@xf32>, !amx.tile<16x16xf32>
      amx.tile_store %c[%m, %n1], %acc#1 : memref<?x@@n@@xf32>, !amx.tile<16x16xf32>
    }
  }
  return
}
)",
                                  {{"name", name},
                                   {"n", std::to_string(n)},
                                   {"k", std::to_string(k)},
                                   {"kb", std::to_string(k / 32)},
                                   {"np", std::to_string(n / 32)},
                                   {"range", partRange("%npairs", "n")}});
  return kernels::textKernel(name, "kiln.linear", body);
}

} // namespace kiln::x86
