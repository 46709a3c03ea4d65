#include "targets/nvptx/MmaGemm.h"

#include "targets/common/WarpSnippets.h"
#include "targets/nvptx/MmaTile.h"

namespace kiln::nvptx {
namespace {

using kernels::fillTemplate;
using kernels::str;

// Row tiles that run over the same weight columns one after another.
constexpr int64_t kGroupM = 8;

int64_t colTiles(int64_t n) { return (n + kMmaTileN - 1) / kMmaTileN; }

} // namespace

bool mmaGemmFits(int64_t n, int64_t k) { return k % kMmaTileK == 0 && n % 8 == 0; }

kernels::Work mmaGemmWork(int64_t n, int64_t maxTokens) {
  int64_t rowTiles = (maxTokens + kMmaTileM - 1) / kMmaTileM;
  return kernels::Work{rowTiles * colTiles(n) * kMmaThreads, 0, kMmaThreads};
}

kernels::KernelSpec mmaGemm(int64_t n, int64_t k) {
  MmaTileKernel kernel;
  kernel.name = "linear_mma_" + str(n) + "x" + str(k);
  std::string xt = "memref<?x" + str(k) + "xf32>", wt = "memref<" + str(n) + "x" + str(k) + "xbf16>";
  std::string yt = "memref<?x" + str(n) + "xf32>";
  kernel.args = "%x: " + xt + ", %w: " + wt + ", %y: " + yt + ", %rows_i: i64";
  kernel.tiling = "kind = \"mma-gemm\", tile = [128, 128, 32], block = 256 : i64";
  kernel.k = k;
  // Groups of row tiles over the same weight columns; the row tile changes
  // fastest inside a group.
  kernel.setup = fillTemplate(R"(
  %col_tiles = arith.constant @@col_tiles@@ : index
  %group_m = arith.constant @@group_m@@ : index
  %group_blocks = arith.constant @@group_blocks@@ : index
  %ndim = arith.constant @@n@@ : index
  %n_last = arith.constant @@n_last@@ : index
  %blocks = gpu.grid_dim x
  %row_tiles = arith.divui %blocks, %col_tiles : index
  %rows = arith.index_cast %rows_i : i64 to index
  %group = arith.divui %bid, %group_blocks : index
  %in_group = arith.remui %bid, %group_blocks : index
  %group_first = arith.muli %group, %group_m : index
  %group_left = arith.subi %row_tiles, %group_first : index
  %group_size = arith.minui %group_left, %group_m : index
  %mt_in = arith.remui %in_group, %group_size : index
  %nt = arith.divui %in_group, %group_size : index
  %mt = arith.addi %group_first, %mt_in : index
  %m0 = arith.muli %mt, %c128 : index
  %n0 = arith.muli %nt, %c128 : index
  %live = arith.cmpi ult, %m0, %rows : index
)",
                              {{"col_tiles", str(colTiles(n))},
                               {"group_m", str(kGroupM)},
                               {"group_blocks", str(kGroupM * colTiles(n))},
                               {"n", str(n)},
                               {"n_last", str(n - 1)}});
  // Rows past T or n repeat the last one; their results are dropped.
  kernel.rows = R"(
    %last_row = arith.subi %rows, %c1 : index
    %arow_at = arith.addi %m0, %lrow : index
    %arow = arith.minui %arow_at, %last_row : index
    %brow_at = arith.addi %n0, %lrow : index
    %brow = arith.minui %brow_at, %n_last : index
)";
  kernel.load = [xt, wt](const std::string &P, const std::string &at) {
    std::string text = mmaActivationLoad("%x", xt, "%arow", P, at);
    for (int64_t i = 0; i < 2; ++i) {
      std::string K = P + "kb" + str(i);
      text += "      " + K + "_off = arith.constant " + str(8 * i) + " : index\n" +
              "      " + K + "_in = arith.addi %lk, " + K + "_off : index\n" +
              "      " + K + " = arith.addi " + at + ", " + K + "_in : index\n" +
              "      " + P + "b" + str(i) + " = vector.load %w[%brow, " + K +
              "] {alignment = 16} : " + wt + ", vector<8xbf16>\n";
    }
    return text;
  };
  kernel.finish = [](const std::string &) { return std::string(); };
  // c0 c1 at row %ra<i>, c2 c3 at %ra8_<i>, columns %col<j> and the next.
  std::string epilogue;
  for (int64_t j = 0; j < 4; ++j) {
    std::string J = str(j);
    epilogue += "    %col_base" + J + " = arith.addi %n0, %rb" + J + "_w : index\n" +
                "    %col_ok" + J + " = arith.cmpi ult, %col_base" + J + ", %ndim : index\n" +
                "    %t2_" + J + " = arith.muli %t, %c2 : index\n" +
                "    %col" + J + " = arith.addi %col_base" + J + ", %t2_" + J + " : index\n";
  }
  for (int64_t i = 0; i < 4; ++i)
    for (int64_t j = 0; j < 4; ++j)
      for (int64_t half = 0; half < 2; ++half) {
        std::string I = str(i), J = str(j), H = "%o" + I + "_" + J + "_" + str(half);
        std::string row = half ? "%ra8_" + I : "%ra" + I, res = "%res#" + str(4 * i + j);
        epilogue += fillTemplate(R"(
    @@H@@_e0 = llvm.extractvalue @@res@@[@@e0@@] : !llvm.struct<(f32, f32, f32, f32)>
    @@H@@_e1 = llvm.extractvalue @@res@@[@@e1@@] : !llvm.struct<(f32, f32, f32, f32)>
    @@H@@_row = arith.addi %m0, @@row@@ : index
    @@H@@_in = arith.cmpi ult, @@H@@_row, %rows : index
    @@H@@_ok = arith.andi @@H@@_in, %col_ok@@J@@ : i1
    scf.if @@H@@_ok {
      @@H@@_v = vector.from_elements @@H@@_e0, @@H@@_e1 : vector<2xf32>
      vector.store @@H@@_v, %y[@@H@@_row, %col@@J@@] {alignment = 8} : @@yt@@, vector<2xf32>
    }
)",
                                 {{"H", H},
                                  {"res", res},
                                  {"e0", str(2 * half)},
                                  {"e1", str(2 * half + 1)},
                                  {"row", row},
                                  {"J", J},
                                  {"yt", yt}});
      }
  kernel.epilogue = epilogue;
  return kernels::KernelSpec{kernel.name, "kiln.linear",
                             "{\"kind\": \"mma-gemm\", \"tile\": [128, 128, 32]}",
                             mmaTileKernelText(kernel)};
}

} // namespace kiln::nvptx
