// The latent MoE's expert stage op by op, for graphs that were not fused
// into kiln.megamoe: grouped SwiGLU over each token's selected experts, the
// per-expert RMSNorm, the weighted combine, and NVFP4 decoding of a stacked
// weight into bf16. An expert index of -1 (an expert on another rank) gives a
// zero row, as the ops define.
#include "targets/common/Generators.h"

#include "runtime/core/Float.h"

namespace kiln::kernels {

KernelSpec expertSwiGLU(int64_t experts, int64_t k, int64_t intermediate, int64_t latent) {
  std::string E = std::to_string(experts), K = std::to_string(k), I = std::to_string(intermediate),
              L = std::to_string(latent);
  std::string name = "expert_swiglu_" + E + "e_top" + K + "_" + I + "x" + L;
  std::string body = fillTemplate(
      R"(
func.func @@@name@@(%z: memref<?x@@L@@xf32>, %idx: memref<?x@@K@@xi32>, %gate: memref<@@E@@x@@I@@x@@L@@xbf16>,
                    %up: memref<@@E@@x@@I@@x@@L@@xbf16>, %down: memref<@@E@@x@@L@@x@@I@@xbf16>,
                    %out: memref<?x@@K@@x@@L@@xf32>, %rows_i: i64, %part: i64, %parts: i64)
    attributes {llvm.emit_c_interface, kiln.tiling = {kind = "scalar", parallel = "tokens"}} {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %k = arith.constant @@K@@ : index
  %inter = arith.constant @@I@@ : index
  %latent = arith.constant @@L@@ : index
  %zero = arith.constant 0.0 : f32
  %one = arith.constant 1.0 : f32
  %none = arith.constant -1 : i32
  %rows = arith.index_cast %rows_i : i64 to index
  %h = memref.alloca() : memref<@@I@@xf32>
  @@range@@
  scf.for %t = %tbegin to %tend step %c1 {
    scf.for %j = %c0 to %k step %c1 {
      %e32 = memref.load %idx[%t, %j] : memref<?x@@K@@xi32>
      %absent = arith.cmpi eq, %e32, %none : i32
      scf.if %absent {
        scf.for %c = %c0 to %latent step %c1 {
          memref.store %zero, %out[%t, %j, %c] : memref<?x@@K@@x@@L@@xf32>
        }
      } else {
        %e = arith.index_cast %e32 : i32 to index
        scf.for %o = %c0 to %inter step %c1 {
          %gu:2 = scf.for %c = %c0 to %latent step %c1 iter_args(%g = %zero, %u = %zero) -> (f32, f32) {
            %x = memref.load %z[%t, %c] : memref<?x@@L@@xf32>
            %gb = memref.load %gate[%e, %o, %c] : memref<@@E@@x@@I@@x@@L@@xbf16>
            %ub = memref.load %up[%e, %o, %c] : memref<@@E@@x@@I@@x@@L@@xbf16>
            %gf = arith.extf %gb : bf16 to f32
            %uf = arith.extf %ub : bf16 to f32
            %gx = arith.mulf %gf, %x : f32
            %ux = arith.mulf %uf, %x : f32
            %g2 = arith.addf %g, %gx : f32
            %u2 = arith.addf %u, %ux : f32
            scf.yield %g2, %u2 : f32, f32
          }
          %ng = arith.negf %gu#0 : f32
          %ex = math.exp %ng : f32
          %den = arith.addf %one, %ex : f32
          %sig = arith.divf %gu#0, %den : f32
          %hv = arith.mulf %sig, %gu#1 : f32
          memref.store %hv, %h[%o] : memref<@@I@@xf32>
        }
        scf.for %c = %c0 to %latent step %c1 {
          %y = scf.for %o = %c0 to %inter step %c1 iter_args(%s = %zero) -> (f32) {
            %hv = memref.load %h[%o] : memref<@@I@@xf32>
            %db = memref.load %down[%e, %c, %o] : memref<@@E@@x@@L@@x@@I@@xbf16>
            %df = arith.extf %db : bf16 to f32
            %p = arith.mulf %df, %hv : f32
            %s2 = arith.addf %s, %p : f32
            scf.yield %s2 : f32
          }
          memref.store %y, %out[%t, %j, %c] : memref<?x@@K@@x@@L@@xf32>
        }
      }
    }
  }
  return
}
)",
      {{"name", name}, {"E", E}, {"K", K}, {"I", I}, {"L", L}, {"range", partRange("%rows", "t")}});
  return textKernel(name, "kiln.expert_swiglu", body);
}

KernelSpec expertNorm(int64_t experts, int64_t k, int64_t latent, double eps) {
  std::string E = std::to_string(experts), K = std::to_string(k), L = std::to_string(latent);
  std::string name = "expert_norm_" + E + "e_top" + K + "_" + L + "_eps" +
                     std::to_string(static_cast<long long>(eps * 1e9));
  std::string body = fillTemplate(R"(
func.func @@@name@@(%y: memref<?x@@K@@x@@L@@xf32>, %idx: memref<?x@@K@@xi32>, %w: memref<@@E@@x@@L@@xbf16>,
                    %out: memref<?x@@K@@x@@L@@xf32>, %rows_i: i64, %part: i64, %parts: i64)
    attributes {llvm.emit_c_interface, kiln.tiling = {kind = "scalar", parallel = "tokens"}} {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %k = arith.constant @@K@@ : index
  %latent = arith.constant @@L@@ : index
  %latentf = arith.constant @@Lf@@ : f32
  %eps = arith.constant @@eps@@ : f32
  %zero = arith.constant 0.0 : f32
  %one = arith.constant 1.0 : f32
  %none = arith.constant -1 : i32
  %rows = arith.index_cast %rows_i : i64 to index
  @@range@@
  scf.for %t = %tbegin to %tend step %c1 {
    scf.for %j = %c0 to %k step %c1 {
      %e32 = memref.load %idx[%t, %j] : memref<?x@@K@@xi32>
      %absent = arith.cmpi eq, %e32, %none : i32
      scf.if %absent {
        scf.for %c = %c0 to %latent step %c1 {
          memref.store %zero, %out[%t, %j, %c] : memref<?x@@K@@x@@L@@xf32>
        }
      } else {
        %e = arith.index_cast %e32 : i32 to index
        %ss = scf.for %c = %c0 to %latent step %c1 iter_args(%s = %zero) -> (f32) {
          %v = memref.load %y[%t, %j, %c] : memref<?x@@K@@x@@L@@xf32>
          %sq = arith.mulf %v, %v : f32
          %s2 = arith.addf %s, %sq : f32
          scf.yield %s2 : f32
        }
        %mean = arith.divf %ss, %latentf : f32
        %me = arith.addf %mean, %eps : f32
        %rms = math.sqrt %me : f32
        %inv = arith.divf %one, %rms : f32
        scf.for %c = %c0 to %latent step %c1 {
          %v = memref.load %y[%t, %j, %c] : memref<?x@@K@@x@@L@@xf32>
          %wb = memref.load %w[%e, %c] : memref<@@E@@x@@L@@xbf16>
          %wf = arith.extf %wb : bf16 to f32
          %n = arith.mulf %v, %inv : f32
          %r = arith.mulf %n, %wf : f32
          memref.store %r, %out[%t, %j, %c] : memref<?x@@K@@x@@L@@xf32>
        }
      }
    }
  }
  return
}
)",
                                  {{"name", name},
                                   {"E", E},
                                   {"K", K},
                                   {"L", L},
                                   {"Lf", floatLiteral(double(latent))},
                                   {"eps", floatLiteral(eps)},
                                   {"range", partRange("%rows", "t")}});
  return textKernel(name, "kiln.expert_norm", body);
}

KernelSpec combine(int64_t k, int64_t latent) {
  std::string K = std::to_string(k), L = std::to_string(latent);
  std::string name = "combine_top" + K + "_" + L;
  std::string body =
      fillTemplate(R"(
func.func @@@name@@(%y: memref<?x@@K@@x@@L@@xf32>, %w: memref<?x@@K@@xf32>, %out: memref<?x@@L@@xf32>,
                    %rows_i: i64, %part: i64, %parts: i64)
    attributes {llvm.emit_c_interface, kiln.tiling = {kind = "scalar", parallel = "tokens"}} {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %k = arith.constant @@K@@ : index
  %latent = arith.constant @@L@@ : index
  %zero = arith.constant 0.0 : f32
  %rows = arith.index_cast %rows_i : i64 to index
  @@range@@
  scf.for %t = %tbegin to %tend step %c1 {
    scf.for %c = %c0 to %latent step %c1 {
      %s = scf.for %j = %c0 to %k step %c1 iter_args(%acc = %zero) -> (f32) {
        %wj = memref.load %w[%t, %j] : memref<?x@@K@@xf32>
        %v = memref.load %y[%t, %j, %c] : memref<?x@@K@@x@@L@@xf32>
        %p = arith.mulf %wj, %v : f32
        %a = arith.addf %acc, %p : f32
        scf.yield %a : f32
      }
      memref.store %s, %out[%t, %c] : memref<?x@@L@@xf32>
    }
  }
  return
}
)",
                   {{"name", name}, {"K", K}, {"L", L}, {"range", partRange("%rows", "t")}});
  return textKernel(name, "kiln.combine", body);
}

KernelSpec nvfp4Dequant(int64_t matrices, int64_t rows, int64_t cols) {
  std::string E = std::to_string(matrices), O = std::to_string(rows), I = std::to_string(cols);
  std::string name = "nvfp4_dequant_" + E + "x" + O + "x" + I;
  std::string luts =
      lookupTable(name + "_e2m1", 16, e2m1ToFloat) + lookupTable(name + "_e4m3", 256, e4m3ToFloat);
  std::string body = luts + fillTemplate(R"(
func.func @@@name@@(%packed: memref<@@E@@x@@O@@x@@IH@@xi8>, %scales: memref<@@E@@x@@O@@x@@IS@@xi8>, %global: memref<@@E@@xf32>,
                    %out: memref<@@E@@x@@O@@x@@I@@xbf16>, %part: i64, %parts: i64)
    attributes {llvm.emit_c_interface, kiln.tiling = {kind = "scalar", parallel = "rows"}} {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c2 = arith.constant 2 : index
  %c4 = arith.constant 4 : index
  %c15 = arith.constant 15 : index
  %c16 = arith.constant 16 : index
  %c255 = arith.constant 255 : index
  %rows_per = arith.constant @@O@@ : index
  %all_rows = arith.constant @@ALL@@ : index
  %half = arith.constant @@IH@@ : index
  %e2m1 = memref.get_global @@@name@@_e2m1 : memref<16xf32>
  %e4m3 = memref.get_global @@@name@@_e4m3 : memref<256xf32>
  @@range@@
  scf.for %row = %rbegin to %rend step %c1 {
    %m = arith.divui %row, %rows_per : index
    %o = arith.remui %row, %rows_per : index
    %g = memref.load %global[%m] : memref<@@E@@xf32>
    scf.for %b = %c0 to %half step %c1 {
      %byte = memref.load %packed[%m, %o, %b] : memref<@@E@@x@@O@@x@@IH@@xi8>
      %bi = arith.index_cast %byte : i8 to index
      %bu = arith.andi %bi, %c255 : index
      %lo_i = arith.andi %bu, %c15 : index
      %hi_i = arith.shrui %bu, %c4 : index
      %col0 = arith.muli %b, %c2 : index
      %col1 = arith.addi %col0, %c1 : index
      %blk = arith.divui %col0, %c16 : index
      %sb = memref.load %scales[%m, %o, %blk] : memref<@@E@@x@@O@@x@@IS@@xi8>
      %sbi = arith.index_cast %sb : i8 to index
      %sbu = arith.andi %sbi, %c255 : index
      %s = memref.load %e4m3[%sbu] : memref<256xf32>
      %lo = memref.load %e2m1[%lo_i] : memref<16xf32>
      %hi = memref.load %e2m1[%hi_i] : memref<16xf32>
      %lo_s = arith.mulf %lo, %s : f32
      %hi_s = arith.mulf %hi, %s : f32
      %lo_g = arith.mulf %lo_s, %g : f32
      %hi_g = arith.mulf %hi_s, %g : f32
      %lo_b = arith.truncf %lo_g : f32 to bf16
      %hi_b = arith.truncf %hi_g : f32 to bf16
      memref.store %lo_b, %out[%m, %o, %col0] : memref<@@E@@x@@O@@x@@I@@xbf16>
      memref.store %hi_b, %out[%m, %o, %col1] : memref<@@E@@x@@O@@x@@I@@xbf16>
    }
  }
  return
}
)",
                                         {{"name", name},
                                          {"E", E},
                                          {"O", O},
                                          {"I", I},
                                          {"IH", std::to_string(cols / 2)},
                                          {"IS", std::to_string(cols / 16)},
                                          {"ALL", std::to_string(matrices * rows)},
                                          {"range", partRange("%all_rows", "r")}});
  return textKernel(name, "kiln.nvfp4_dequant", body);
}

} // namespace kiln::kernels
