// y = x · Wᵀ. With bf16 weights in AMX VNNI blocks (WeightTransform
// AmxVnniBf16) the product runs on AMX tiles: C[16x16 f32] += A[16x32 bf16]
// · B[32x16 bf16] per tdpbf16ps, A rows read from a bf16 copy of the input
// padded to 16 rows. Launch parts split the 16-column tiles of N, so each
// weight block is streamed by one part only.
#include "targets/x86/AmxGemm.h"

#include "targets/common/Generators.h"

namespace kiln::x86 {

using kernels::fillTemplate;
using kernels::KernelSpec;
using kernels::partRange;

bool amxCovers(int64_t n, int64_t k) { return n % 16 == 0 && k % 32 == 0; }

KernelSpec linearAmx(int64_t n, int64_t k) {
  std::string name = "linear_amx_" + std::to_string(n) + "x" + std::to_string(k);
  std::string body = fillTemplate(R"(
func.func @@@name@@(%a: memref<?x@@k@@xbf16>, %b: memref<?x32xbf16>, %c: memref<?x@@n@@xf32>, %part: i64, %parts: i64)
    attributes {llvm.emit_c_interface,
                kiln.tiling = {kind = "amx", tile_m = 16 : i64, tile_n = 16 : i64, tile_k = 32 : i64,
                               order = "n-m-k", parallel = "n"}} {
  %c0 = arith.constant 0 : index
  %c16 = arith.constant 16 : index
  %c32 = arith.constant 32 : index
  %rows = memref.dim %a, %c0 : memref<?x@@k@@xbf16>
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
  return KernelSpec{name, "kiln.linear",
                    "{\"kind\": \"amx\", \"tile_m\": 16, \"tile_n\": 16, \"tile_k\": 32, "
                    "\"order\": \"n-m-k\", \"parallel\": \"n\"}",
                    body};
}

} // namespace kiln::x86
