#include "targets/amdgcn/MfmaGemm.h"

#include "targets/common/WarpSnippets.h"

namespace kiln::amdgcn {
namespace {

using kernels::fillTemplate;
using kernels::str;

constexpr int64_t kTile = 32, kWave = 64, kStepK = 8;

int64_t tiles(int64_t n) { return (n + kTile - 1) / kTile; }

} // namespace

std::string mfmaActivation(const std::string &x, const std::string &type, const std::string &row,
                           const std::string &k) {
  return fillTemplate(R"(
      %xv = vector.load @@x@@[@@row@@, @@k@@] {alignment = 16} : @@t@@, vector<4xf32>
      %hi = arith.truncf %xv : vector<4xf32> to vector<4xbf16>
      %hi_f = arith.extf %hi : vector<4xbf16> to vector<4xf32>
      %rest = arith.subf %xv, %hi_f : vector<4xf32>
      %lo = arith.truncf %rest : vector<4xf32> to vector<4xbf16>
      %a_hi = vector.bitcast %hi : vector<4xbf16> to vector<4xi16>
      %a_lo = vector.bitcast %lo : vector<4xbf16> to vector<4xi16>
)",
                      {{"x", x}, {"t", type}, {"row", row}, {"k", k}});
}

std::string mfmaStep(const std::string &out, const std::string &a, const std::string &b,
                     const std::string &c) {
  return "      " + out + " = rocdl.mfma.f32.32x32x8bf16.1k " + a + ", " + b + ", " + c +
         ", %zero_i32, %zero_i32, %zero_i32 : (vector<4xi16>, vector<4xi16>, vector<16xf32>, i32, "
         "i32, i32) -> vector<16xf32>\n";
}

bool mfmaGemmFits(int64_t n, int64_t k) { return k % kStepK == 0 && n >= 1; }

kernels::Work mfmaGemmWork(int64_t n, int64_t maxTokens) {
  return kernels::Work{tiles(maxTokens) * tiles(n) * kWave, 0, kWave};
}

kernels::KernelSpec mfmaGemm(int64_t n, int64_t k) {
  std::string name = "linear_mfma_" + str(n) + "x" + str(k);
  std::string xt = "memref<?x" + str(k) + "xf32>",
              wt = "memref<" + str(n) + "x" + str(k) + "xbf16>";
  std::string yt = "memref<?x" + str(n) + "xf32>";
  // The 16 results of lane l: rows 8 (j / 4) + 4 (l / 32) + j % 4 of the tile.
  std::string stores;
  for (int64_t j = 0; j < 16; ++j) {
    std::string J = str(j);
    stores += fillTemplate(R"(
    %r@@j@@_off = arith.constant @@off@@ : index
    %r@@j@@_in = arith.addi %half4, %r@@j@@_off : index
    %r@@j@@ = arith.addi %m0, %r@@j@@_in : index
    %r@@j@@_ok0 = arith.cmpi ult, %r@@j@@, %rows : index
    %r@@j@@_ok = arith.andi %r@@j@@_ok0, %col_ok : i1
    scf.if %r@@j@@_ok {
      %v@@j@@ = vector.extract %acc[@@j@@] : f32 from vector<16xf32>
      memref.store %v@@j@@, %y[%r@@j@@, %col] : @@yt@@
    }
)",
                           {{"j", J}, {"off", str(8 * (j / 4) + j % 4)}, {"yt", yt}});
  }
  std::string body = fillTemplate(R"(
func.func @@@name@@(%x: @@xt@@, %w: @@wt@@, %y: @@yt@@, %rows_i: i64, %part: i64, %parts: i64)
    attributes {llvm.emit_c_interface, kiln.tiling = {kind = "mfma-gemm", tile = [32, 32, 8], block = 64 : i64}} {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c4 = arith.constant 4 : index
  %c8 = arith.constant 8 : index
  %c32 = arith.constant 32 : index
  %kdim = arith.constant @@k@@ : index
  %ndim = arith.constant @@n@@ : index
  %n_last = arith.constant @@n_last@@ : index
  %col_tiles = arith.constant @@col_tiles@@ : index
  %zero_i32 = arith.constant 0 : i32
  %zero_acc = arith.constant dense<0.0> : vector<16xf32>
  %lane = gpu.thread_id x
  %bid = gpu.block_id x
  %rows = arith.index_cast %rows_i : i64 to index
  %mt = arith.divui %bid, %col_tiles : index
  %nt = arith.remui %bid, %col_tiles : index
  %m0 = arith.muli %mt, %c32 : index
  %n0 = arith.muli %nt, %c32 : index
  %live = arith.cmpi ult, %m0, %rows : index
  scf.if %live {
    %l32 = arith.remui %lane, %c32 : index
    %half = arith.divui %lane, %c32 : index
    %half4 = arith.muli %half, %c4 : index
    // This lane's token and weight row; past T or n they repeat the last,
    // and their results are not stored.
    %last_row = arith.subi %rows, %c1 : index
    %arow_at = arith.addi %m0, %l32 : index
    %arow = arith.minui %arow_at, %last_row : index
    %col = arith.addi %n0, %l32 : index
    %brow = arith.minui %col, %n_last : index
    %col_ok = arith.cmpi ult, %col, %ndim : index
    %acc = scf.for %kk = %c0 to %kdim step %c8 iter_args(%a = %zero_acc) -> (vector<16xf32>) {
      %k0 = arith.addi %kk, %half4 : index
@@a@@      %wv = vector.load %w[%brow, %k0] {alignment = 8} : @@wt@@, vector<4xbf16>
      %w_i = vector.bitcast %wv : vector<4xbf16> to vector<4xi16>
@@m1@@@@m2@@      scf.yield %a2 : vector<16xf32>
    }
@@stores@@
  }
  return
}
)",
                                  {{"name", name},
                                   {"xt", xt},
                                   {"wt", wt},
                                   {"yt", yt},
                                   {"k", str(k)},
                                   {"n", str(n)},
                                   {"n_last", str(n - 1)},
                                   {"col_tiles", str(tiles(n))},
                                   {"a", mfmaActivation("%x", xt, "%arow", "%k0")},
                                   {"m1", mfmaStep("%a1", "%a_hi", "%w_i", "%a")},
                                   {"m2", mfmaStep("%a2", "%a_lo", "%w_i", "%a1")},
                                   {"stores", stores}});
  return kernels::textKernel(name, "kiln.linear", body);
}

} // namespace kiln::amdgcn
