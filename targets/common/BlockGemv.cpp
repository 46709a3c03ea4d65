// The GPU GEMV of batched decode: y[t, o] = x[t] · W[o] for up to 8 tokens.
// A warp per output row (WarpGemv.cpp) re-reads all of x for every row; at 8
// full-width f32 rows x no longer fits in L1 and that traffic swamps the
// weights'. Here a block of 8 warps owns 32 output rows: per 256 columns the
// block stages every token's slice of x in shared memory once, then each
// warp streams its 4 weight rows (16 bytes a lane) against all tokens, one
// fma chain per (row, token). Lanes are summed with shuffles at the end.
#include "targets/common/Generators.h"
#include "targets/common/WarpSnippets.h"

namespace kiln::kernels {
namespace {

constexpr int64_t kRowsPerWarp = 4, kWarps = 8, kChunk = 256, kLaneElems = 8;

} // namespace

bool blockGemvFits(int64_t k, int64_t tokens) {
  return k % kChunk == 0 && tokens >= 1 && tokens <= kBlockGemvTokens;
}

int64_t blockGemvRows() { return kRowsPerWarp * kWarps; }

KernelSpec linearBlockTokens(int64_t n, int64_t k, int64_t tokens) {
  std::string name = "linear_block_tokens" + str(tokens) + "_" + str(n) + "x" + str(k);
  std::string xt = "memref<?x" + str(k) + "xf32>",
              wt = "memref<" + str(n) + "x" + str(k) + "xbf16>";
  std::string yt = "memref<?x" + str(n) + "xf32>";
  std::string st =
      "memref<" + str(tokens) + "x" + str(kChunk) + "xf32, #gpu.address_space<workgroup>>";
  auto acc = [](int64_t r, int64_t t) { return "%a" + str(r) + "_" + str(t); };

  std::string accArgs, accTypes, chunkBody;
  for (int64_t r = 0; r < kRowsPerWarp; ++r)
    for (int64_t t = 0; t < tokens; ++t) {
      std::string sep = accArgs.empty() ? "" : ", ";
      accArgs += sep + acc(r, t) + " = %zero";
      accTypes += sep + "f32";
    }
  // The weight rows' slices, as f32 elements %w<r>_<i>.
  for (int64_t r = 0; r < kRowsPerWarp; ++r) {
    std::string R = str(r);
    chunkBody += "      %wb" + R + " = vector.load %w[%row" + R +
                 ", %kl] {alignment = 16} : " + wt + ", vector<8xbf16>\n" + "      %wf" + R +
                 " = arith.extf %wb" + R + " : vector<8xbf16> to vector<8xf32>\n";
    for (int64_t i = 0; i < kLaneElems; ++i)
      chunkBody += "      %w" + R + "_" + str(i) + " = vector.extract %wf" + R + "[" + str(i) +
                   "] : f32 from vector<8xf32>\n";
  }
  for (int64_t t = 0; t < tokens; ++t) {
    std::string T = str(t);
    chunkBody += "      %xs" + T + " = vector.load %sx[%c" + T +
                 "_t, %l8] {alignment = 32} : " + st + ", vector<8xf32>\n";
    for (int64_t i = 0; i < kLaneElems; ++i)
      chunkBody += "      %x" + T + "_" + str(i) + " = vector.extract %xs" + T + "[" + str(i) +
                   "] : f32 from vector<8xf32>\n";
    for (int64_t r = 0; r < kRowsPerWarp; ++r) {
      std::string chain = acc(r, t);
      for (int64_t i = 0; i < kLaneElems; ++i) {
        std::string next = "%f" + str(r) + "_" + T + "_" + str(i);
        chunkBody += "      " + next + " = math.fma %w" + str(r) + "_" + str(i) + ", %x" + T + "_" +
                     str(i) + ", " + chain + " : f32\n";
        chain = next;
      }
    }
  }
  // Yields in the iter_args order (row-major over (row, token)).
  std::string ordered;
  for (int64_t r = 0; r < kRowsPerWarp; ++r)
    for (int64_t t = 0; t < tokens; ++t)
      ordered += std::string(ordered.empty() ? "" : ", ") + "%f" + str(r) + "_" + str(t) + "_" +
                 str(kLaneElems - 1);

  std::string consts, rowsText, stores;
  for (int64_t t = 0; t < tokens; ++t)
    consts += "  %c" + str(t) + "_t = arith.constant " + str(t) + " : index\n";
  for (int64_t r = 0; r < kRowsPerWarp; ++r) {
    std::string R = str(r);
    consts += "  %c" + R + "_r = arith.constant " + R + " : index\n";
    rowsText += "  %row" + R + "_at = arith.addi %row_base, %c" + R + "_r : index\n" + "  %row" +
                R + " = arith.minui %row" + R + "_at, %n_last : index\n";
  }
  for (int64_t r = 0; r < kRowsPerWarp; ++r)
    for (int64_t t = 0; t < tokens; ++t) {
      std::string RT = str(r) + "_" + str(t);
      int64_t index = r * tokens + t;
      stores += warp::warpSum("res#" + str(index), "s_out" + RT);
      stores += fillTemplate(R"(
  %ok_t@@RT@@ = arith.cmpi ult, %c@@T@@_t, %rows : index
  %ok_r@@RT@@ = arith.cmpi ult, %row@@R@@_at, %ndim : index
  %ok_rt@@RT@@ = arith.andi %ok_t@@RT@@, %ok_r@@RT@@ : i1
  %ok@@RT@@ = arith.andi %ok_rt@@RT@@, %lead : i1
  scf.if %ok@@RT@@ {
    memref.store %s_out@@RT@@, %y[%c@@T@@_t, %row@@R@@_at] : @@yt@@
  }
)",
                             {{"RT", RT}, {"T", str(t)}, {"R", str(r)}, {"yt", yt}});
    }

  std::string body =
      "memref.global \"private\" @" + name + "_x : " + st + "\n" +
      fillTemplate(R"(
func.func @@@name@@(%x: @@xt@@, %w: @@wt@@, %y: @@yt@@, %rows_i: i64, %part: i64, %parts: i64)
    attributes {llvm.emit_c_interface, kiln.tiling = {kind = "block-gemv-tokens", rows_per_block = @@RPB@@ : i64, tokens = @@T@@ : i64}} {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c8 = arith.constant 8 : index
  %c32 = arith.constant 32 : index
  %c4 = arith.constant 4 : index
  %chunk = arith.constant @@chunk@@ : index
  %kdim = arith.constant @@k@@ : index
  %ndim = arith.constant @@n@@ : index
  %n_last = arith.constant @@n_last@@ : index
  %rows_per_block = arith.constant @@RPB@@ : index
  %zero = arith.constant 0.0 : f32
@@consts@@
  %tid = gpu.thread_id x
  %bid = gpu.block_id x
  %lane = arith.remui %tid, %c32 : index
  %warp = arith.divui %tid, %c32 : index
  %rows = arith.index_cast %rows_i : i64 to index
  %last_t = arith.subi %rows, %c1 : index
  %lead = arith.cmpi eq, %lane, %c0 : index
  %block_row = arith.muli %bid, %rows_per_block : index
  %warp_row = arith.muli %warp, %c4 : index
  %row_base = arith.addi %block_row, %warp_row : index
@@rows@@
  %l8 = arith.muli %lane, %c8 : index
  // Staging: warp w copies token w's 256 columns (tokens past T repeat the last).
  %st_t = arith.minui %warp, %last_t : index
  %staging = arith.cmpi ult, %warp, %c@@T@@_all : index
  %sx = memref.get_global @@@name@@_x : @@st@@
  %res:@@N@@ = scf.for %c = %c0 to %kdim step %chunk iter_args(@@acc_args@@) -> (@@acc_types@@) {
    %kl = arith.addi %c, %l8 : index
    scf.if %staging {
      %xv = vector.load %x[%st_t, %kl] {alignment = 32} : @@xt@@, vector<8xf32>
      vector.store %xv, %sx[%warp, %l8] {alignment = 32} : @@st@@, vector<8xf32>
    }
    gpu.barrier
@@chunk_body@@
    gpu.barrier
    scf.yield @@yields@@ : @@acc_types@@
  }
@@stores@@
  return
}
)",
                   {{"name", name},
                    {"xt", xt},
                    {"wt", wt},
                    {"yt", yt},
                    {"st", st},
                    {"T", str(tokens)},
                    {"RPB", str(blockGemvRows())},
                    {"chunk", str(kChunk)},
                    {"k", str(k)},
                    {"n", str(n)},
                    {"n_last", str(n - 1)},
                    {"consts", consts + "  %c" + str(tokens) + "_all = arith.constant " +
                                   str(tokens) + " : index\n"},
                    {"rows", rowsText},
                    {"N", str(kRowsPerWarp * tokens)},
                    {"acc_args", accArgs},
                    {"acc_types", accTypes},
                    {"chunk_body", chunkBody},
                    {"yields", ordered},
                    {"stores", stores}});
  return textKernel(name, "kiln.linear", body);
}

} // namespace kiln::kernels
