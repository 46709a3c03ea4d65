#include "targets/nvptx/MmaGemm.h"

#include "targets/common/WarpSnippets.h"
#include "targets/nvptx/MmaTile.h"

namespace kiln::nvptx {
namespace {

using kernels::fillTemplate;
using kernels::str;

// Row tiles that run over the same weight columns one after another.
constexpr int64_t kGroupM = 8;
// Split-K for a single row tile (batched decode): a block's k steps run one
// after another behind a barrier each, so a GEMM of few column tiles leaves
// most of the GPU idle. Splits double while the blocks stay within two per
// SM of the chip and each split keeps 8 k steps.
constexpr int64_t kBlocksPerSM = 2, kMinSplitSteps = 8;

int64_t colTiles(int64_t n) { return (n + kMmaTileN - 1) / kMmaTileN; }

} // namespace

bool mmaGemmFits(int64_t n, int64_t k) { return k % kMmaTileK == 0 && n % 8 == 0; }

int64_t mmaGemmSplits(int64_t n, int64_t k, int64_t maxTokens, int64_t sms) {
  int64_t rowTiles = (maxTokens + kMmaTileM - 1) / kMmaTileM, tiles = rowTiles * colTiles(n);
  int64_t splits = 1;
  if (rowTiles > 1)
    return splits;
  while (tiles * splits * 2 <= kBlocksPerSM * sms && k % (2 * splits * kMmaTileK) == 0 &&
         k / (2 * splits) >= kMinSplitSteps * kMmaTileK)
    splits *= 2;
  return splits;
}

kernels::Work mmaGemmWork(int64_t n, int64_t maxTokens, int64_t splits) {
  int64_t rowTiles = (maxTokens + kMmaTileM - 1) / kMmaTileM;
  return kernels::Work{rowTiles * colTiles(n) * splits * kMmaThreads, 0, kMmaThreads};
}

kernels::KernelSpec mmaGemm(int64_t n, int64_t k, int64_t splits) {
  MmaTileKernel kernel;
  kernel.name = "linear_mma_" + (splits > 1 ? "split" + str(splits) + "_" : std::string()) +
                str(n) + "x" + str(k);
  std::string xt = "memref<?x" + str(k) + "xf32>",
              wt = "memref<" + str(n) + "x" + str(k) + "xbf16>";
  // Split-K writes each split's sums to its own slice; mmaGemmSum adds them.
  std::string yt = splits > 1 ? "memref<" + str(splits) + "x?x" + str(n) + "xf32>"
                              : "memref<?x" + str(n) + "xf32>";
  kernel.args = "%x: " + xt + ", %w: " + wt + ", %y: " + yt + ", %rows_i: i64";
  kernel.tiling = "kind = \"mma-gemm\", tile = [128, 128, 32], block = 256 : i64" +
                  (splits > 1 ? ", splits = " + str(splits) + " : i64" : std::string());
  kernel.k = k;
  kernel.kRange = splits > 1;
  // Split s of the reduction is blocks s * tiles .. (s + 1) * tiles - 1.
  std::string split =
      splits == 1
          ? std::string("  %tile_bid = arith.addi %bid, %c0 : index\n  %blocks = gpu.grid_dim x\n")
          : fillTemplate(R"(
  %splits = arith.constant @@splits@@ : index
  %k_span = arith.constant @@span@@ : index
  %all_blocks = gpu.grid_dim x
  %blocks = arith.divui %all_blocks, %splits : index
  %split = arith.divui %bid, %blocks : index
  %tile_bid = arith.remui %bid, %blocks : index
  %k_begin = arith.muli %split, %k_span : index
  %k_end = arith.addi %k_begin, %k_span : index
  %k_final = arith.subi %k_end, %c32 : index
)",
                         {{"splits", str(splits)}, {"span", str(k / splits)}});
  // Groups of row tiles over the same weight columns; the row tile changes
  // fastest inside a group.
  kernel.setup = split + fillTemplate(R"(
  %col_tiles = arith.constant @@col_tiles@@ : index
  %group_m = arith.constant @@group_m@@ : index
  %group_blocks = arith.constant @@group_blocks@@ : index
  %ndim = arith.constant @@n@@ : index
  %n_last = arith.constant @@n_last@@ : index
  %row_tiles = arith.divui %blocks, %col_tiles : index
  %rows = arith.index_cast %rows_i : i64 to index
  %group = arith.divui %tile_bid, %group_blocks : index
  %in_group = arith.remui %tile_bid, %group_blocks : index
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
      text += "      " + K + "_off = arith.constant " + str(8 * i) + " : index\n" + "      " + K +
              "_in = arith.addi %lk, " + K + "_off : index\n" + "      " + K + " = arith.addi " +
              at + ", " + K + "_in : index\n" + "      " + P + "b" + str(i) +
              " = vector.load %w[%brow, " + K + "] {alignment = 16} : " + wt + ", vector<8xbf16>\n";
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
                "    %t2_" + J + " = arith.muli %t, %c2 : index\n" + "    %col" + J +
                " = arith.addi %col_base" + J + ", %t2_" + J + " : index\n";
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
      vector.store @@H@@_v, %y[@@at@@@@H@@_row, %col@@J@@] {alignment = 8} : @@yt@@, vector<2xf32>
    }
)",
                                 {{"H", H},
                                  {"res", res},
                                  {"e0", str(2 * half)},
                                  {"e1", str(2 * half + 1)},
                                  {"row", row},
                                  {"J", J},
                                  {"at", splits > 1 ? "%split, " : ""},
                                  {"yt", yt}});
      }
  kernel.epilogue = epilogue;
  return kernels::textKernel(kernel.name, "kiln.linear", mmaTileKernelText(kernel));
}

kernels::KernelSpec mmaGemmSum(int64_t n, int64_t splits) {
  std::string name = "linear_mma_sum" + str(splits) + "_" + str(n);
  std::string pt = "memref<" + str(splits) + "x?x" + str(n) + "xf32>";
  std::string sums;
  std::string value = "%p0";
  for (int64_t s = 0; s < splits; ++s) {
    std::string S = str(s);
    sums += "    %s" + S + " = arith.constant " + S + " : index\n" + "    %p" + S +
            " = memref.load %partial[%s" + S + ", %t, %c] : " + pt + "\n";
    if (s) {
      sums += "    %sum" + S + " = arith.addf " + value + ", %p" + S + " : f32\n";
      value = "%sum" + S;
    }
  }
  std::string body = fillTemplate(R"(
func.func @@@name@@(%partial: @@pt@@, %y: memref<?x@@n@@xf32>, %rows_i: i64, %part: i64, %parts: i64)
    attributes {llvm.emit_c_interface, kiln.tiling = {kind = "split-k-sum", splits = @@S@@ : i64}} {
  %ndim = arith.constant @@n@@ : index
  %rows = arith.index_cast %rows_i : i64 to index
  %count = arith.muli %rows, %ndim : index
  %first = arith.index_cast %part : i64 to index
  %step = arith.index_cast %parts : i64 to index
  scf.for %i = %first to %count step %step {
    %t = arith.divui %i, %ndim : index
    %c = arith.remui %i, %ndim : index
@@sums@@
    memref.store @@value@@, %y[%t, %c] : memref<?x@@n@@xf32>
  }
  return
}
)",
                                  {{"name", name},
                                   {"pt", pt},
                                   {"n", str(n)},
                                   {"S", str(splits)},
                                   {"sums", sums},
                                   {"value", value}});
  return kernels::textKernel(name, "kiln.linear", body);
}

kernels::Work mmaGemmSumWork(int64_t n) { return kernels::Work{0, (n + 127) / 128 * 128}; }

} // namespace kiln::nvptx
