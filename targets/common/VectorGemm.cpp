// The vector GEMM every target has: each part computes whole output columns
// (one weight row each) for every requested row of the input, in
// vector<16xf32> steps along k when k allows. Targets with matrix tiles use
// their tiled GEMM where its shapes fit (TargetHooks::tiledGemm).
#include "targets/common/Generators.h"

namespace kiln::kernels {

KernelSpec linearVector(int64_t n, int64_t k) {
  std::string lanes = k % 16 == 0 ? "16" : "1";
  std::string name = "linear_vec_" + std::to_string(n) + "x" + std::to_string(k);
  std::string vf = "vector<" + lanes + "xf32>", vbf = "vector<" + lanes + "xbf16>";
  std::string body = fillTemplate(R"(
func.func @@@name@@(%x: memref<?x@@k@@xf32>, %w: memref<@@n@@x@@k@@xbf16>, %y: memref<?x@@n@@xf32>, %first_i: i64, %rows_i: i64, %part: i64, %parts: i64)
    attributes {llvm.emit_c_interface,
                kiln.tiling = {kind = "vector", lanes = @@lanes@@ : i64, parallel = "n"}} {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %step = arith.constant @@lanes@@ : index
  %kdim = arith.constant @@k@@ : index
  %ndim = arith.constant @@n@@ : index
  %rows = arith.index_cast %rows_i : i64 to index
  %first = arith.index_cast %first_i : i64 to index
  @@range@@
  scf.for %o = %obegin to %oend step %c1 {
    scf.for %r = %c0 to %rows step %c1 {
      %zero = arith.constant dense<0.0> : @@vf@@
      %acc = scf.for %kk = %c0 to %kdim step %step iter_args(%s = %zero) -> (@@vf@@) {
        %xr = arith.addi %first, %r : index
        %xv = vector.load %x[%xr, %kk] : memref<?x@@k@@xf32>, @@vf@@
        %wb = vector.load %w[%o, %kk] : memref<@@n@@x@@k@@xbf16>, @@vbf@@
        %wv = arith.extf %wb : @@vbf@@ to @@vf@@
        %p = arith.mulf %xv, %wv : @@vf@@
        %t = arith.addf %s, %p : @@vf@@
        scf.yield %t : @@vf@@
      }
      %sum = vector.reduction <add>, %acc : @@vf@@ into f32
      memref.store %sum, %y[%r, %o] : memref<?x@@n@@xf32>
    }
  }
  return
}
)",
                                  {{"name", name},
                                   {"n", std::to_string(n)},
                                   {"k", std::to_string(k)},
                                   {"lanes", lanes},
                                   {"vf", vf},
                                   {"vbf", vbf},
                                   {"range", partRange("%ndim", "o")}});
  return textKernel(name, "kiln.linear", body);
}

} // namespace kiln::kernels
