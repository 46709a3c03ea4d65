#include "targets/common/GroupedExperts.h"

#include "targets/common/Generators.h"
#include "targets/common/WarpSnippets.h"

namespace kiln::kernels {
namespace {

std::string formatSuffix(bool nvfp4) { return nvfp4 ? "_nvfp4" : "_bf16"; }

// The head of a grouped kernel's loop: a warp per (expert %e, group %grp of
// its output rows), then passes over the expert's items, kGroupedItems at a
// time. Each pass defines, for item i, its token %t<i>, choice %j<i> and
// whether it exists (%in<i>; a pass's missing items repeat the last one and
// store nothing). The kernel closes both loops.
std::string groupedLoop(const ExpertTileShape &s, int64_t groups) {
  std::string text = fillTemplate(R"(
  %ck = arith.constant @@k@@ : index
  %groups = arith.constant @@groups@@ : index
  %work = arith.constant @@work@@ : index
  %pass = arith.constant @@G@@ : index
  %lead = arith.cmpi eq, %lane, %c0 : index
  scf.for %wk = %warp to %work step %warps {
    %e = arith.divui %wk, %groups : index
    %grp = arith.remui %wk, %groups : index
    %e1 = arith.addi %e, %c1 : index
    %first_i = memref.load %meta[%e] : memref<@@meta@@xi32>
    %end_i = memref.load %meta[%e1] : memref<@@meta@@xi32>
    %first = arith.index_cast %first_i : i32 to index
    %end = arith.index_cast %end_i : i32 to index
    %last = arith.subi %end, %c1 : index
    scf.for %p0 = %first to %end step %pass {
)",
                                  {{"k", str(s.k)},
                                   {"groups", str(groups)},
                                   {"work", str(s.experts * groups)},
                                   {"G", str(kGroupedItems)},
                                   {"meta", str(s.experts + 2)}});
  for (int64_t i = 0; i < kGroupedItems; ++i) {
    std::string I = str(i);
    text += fillTemplate(R"(
      %pi@@I@@ = arith.constant @@I@@ : index
      %p_at@@I@@ = arith.addi %p0, %pi@@I@@ : index
      %in@@I@@ = arith.cmpi ult, %p_at@@I@@, %end : index
      %pos@@I@@ = arith.minui %p_at@@I@@, %last : index
      %item_i@@I@@ = memref.load %items[%pos@@I@@] : memref<@@MI@@xi32>
      %item@@I@@ = arith.index_cast %item_i@@I@@ : i32 to index
      %t@@I@@ = arith.divui %item@@I@@, %ck : index
      %j@@I@@ = arith.remui %item@@I@@, %ck : index
)",
                         {{"I", I}, {"MI", str(s.maxItems())}});
  }
  return text;
}

// Every (weight row, item) product of a pass: each row of `rows` once per
// item, reading the item's row of the vector (`xIdx` with %t<i>, %j<i>).
std::vector<warp::WeightRow> perItem(const std::vector<warp::WeightRow> &rows, bool byChoice) {
  std::vector<warp::WeightRow> out;
  for (int64_t i = 0; i < kGroupedItems; ++i)
    for (warp::WeightRow row : rows) {
      row.xIdx = "%t" + str(i) + (byChoice ? ", %j" + str(i) : "");
      out.push_back(row);
    }
  return out;
}

KernelSpec expertGateUpGrouped(const ExpertTileShape &s) {
  // A warp: rows 2 %grp and 2 %grp + 1 of gate and of up, h = silu(gate z) *
  // (up z) per item.
  std::string name = "expert_gateup_grouped_" + expertShapeSuffix(s);
  std::string zt = "memref<?x" + str(s.latent) + "xf32>";
  std::string ht = "memref<?x" + str(s.k) + "x" + str(s.intermediate) + "xf32>";
  warp::ExpertProjection gate =
      warp::expertProjection("gate", s.experts, s.intermediate, s.latent, s.nvfp4, {"%o0", "%o1"});
  warp::ExpertProjection up =
      warp::expertProjection("up", s.experts, s.intermediate, s.latent, s.nvfp4, {"%o0", "%o1"});
  std::vector<warp::WeightRow> rows = gate.rows;
  rows.insert(rows.end(), up.rows.begin(), up.rows.end());
  std::vector<std::string> outs;
  std::string sums;
  std::string stores;
  // perItem's order: item 0's gate o0, o1, up o0, o1, then item 1's.
  for (int64_t i = 0; i < kGroupedItems; ++i) {
    std::string store;
    for (const char *which : {"g", "u"})
      for (int64_t r = 0; r < 2; ++r) {
        std::string name = std::string(which) + str(r) + "_" + str(i);
        outs.push_back(name + "d");
        sums += warp::warpSum(name + "d", name);
      }
    for (int64_t r = 0; r < 2; ++r)
      store +=
          fillTemplate(R"(
          %ng@@X@@ = arith.negf %g@@X@@ : f32
          %ex@@X@@ = math.exp %ng@@X@@ : f32
          %den@@X@@ = arith.addf %one_f, %ex@@X@@ : f32
          %sig@@X@@ = arith.divf %g@@X@@, %den@@X@@ : f32
          %h@@X@@ = arith.mulf %sig@@X@@, %u@@X@@ : f32
          memref.store %h@@X@@, %h[%t@@I@@, %j@@I@@, %o@@R@@] : @@ht@@
)",
                       {{"X", str(r) + "_" + str(i)}, {"I", str(i)}, {"R", str(r)}, {"ht", ht}});
    stores += "        scf.if %in" + str(i) + " {" + store + "        }\n";
  }
  std::string body =
      fillTemplate(R"(
func.func @@@name@@(%z: @@zt@@, @@lists@@, @@gargs@@, @@uargs@@, %h: @@ht@@, %part: i64, %parts: i64)
    attributes {llvm.emit_c_interface,
                kiln.tiling = {kind = "warp-gemv-grouped@@fmt@@", parallel = "experts*intermediate", items_per_pass = @@G@@ : i64}} {
@@ids@@
  %one_f = arith.constant 1.0 : f32
  %c2 = arith.constant 2 : index
@@loop@@
      %o0 = arith.muli %grp, %c2 : index
      %o1 = arith.addi %o0, %c1 : index
@@gglob@@
@@uglob@@
@@dot@@
@@sums@@
      scf.if %lead {
@@stores@@      }
    }
  }
  return
}
)",
                   {{"name", name},
                    {"zt", zt},
                    {"ht", ht},
                    {"lists", expertListArgs(s)},
                    {"gargs", gate.args},
                    {"uargs", up.args},
                    {"fmt", formatSuffix(s.nvfp4)},
                    {"G", str(kGroupedItems)},
                    {"ids", warp::warpIds()},
                    {"loop", groupedLoop(s, s.intermediate / 2)},
                    {"gglob", gate.globalLoad},
                    {"uglob", up.globalLoad},
                    {"dot", warp::rowsDot(perItem(rows, false), s.nvfp4, "%z", zt, "%t0", s.latent,
                                          outs, "", warp::Nvfp4Lanes::Grouped)},
                    {"sums", sums},
                    {"stores", stores}});
  return textKernel(name, "kiln.megamoe", body);
}

KernelSpec expertDownGrouped(const ExpertTileShape &s) {
  // A warp: rows 4 %grp .. 4 %grp + 3 of down, y = down h per item.
  std::string name = "expert_down_grouped_" + expertShapeSuffix(s);
  std::string ht = "memref<?x" + str(s.k) + "x" + str(s.intermediate) + "xf32>";
  std::string yt = "memref<?x" + str(s.k) + "x" + str(s.latent) + "xf32>";
  warp::ExpertProjection down = warp::expertProjection("down", s.experts, s.latent, s.intermediate,
                                                       s.nvfp4, {"%o0", "%o1", "%o2", "%o3"});
  std::vector<std::string> outs;
  std::string sums;
  std::string stores;
  for (int64_t i = 0; i < kGroupedItems; ++i) {
    std::string I = str(i);
    std::string store;
    for (int64_t r = 0; r < 4; ++r) {
      std::string R = str(r);
      outs.push_back("yd" + R + "_" + I);
      sums += warp::warpSum("yd" + R + "_" + I, "y" + R + "_" + I);
      store += "          memref.store %y" + R + "_" + I + ", %y[%t" + I + ", %j" + I + ", %o" + R +
               "] : " + yt + "\n";
    }
    stores += "        scf.if %in" + I + " {\n" + store + "        }\n";
  }
  std::string body =
      fillTemplate(R"(
func.func @@@name@@(%h: @@ht@@, @@lists@@, @@dargs@@, %y: @@yt@@, %part: i64, %parts: i64)
    attributes {llvm.emit_c_interface,
                kiln.tiling = {kind = "warp-gemv-grouped@@fmt@@", parallel = "experts*latent", items_per_pass = @@G@@ : i64}} {
@@ids@@
  %c2 = arith.constant 2 : index
  %c3 = arith.constant 3 : index
  %c4 = arith.constant 4 : index
@@loop@@
      %o0 = arith.muli %grp, %c4 : index
      %o1 = arith.addi %o0, %c1 : index
      %o2 = arith.addi %o0, %c2 : index
      %o3 = arith.addi %o0, %c3 : index
@@glob@@
@@dot@@
@@sums@@
      scf.if %lead {
@@stores@@      }
    }
  }
  return
}
)",
                   {{"name", name},
                    {"ht", ht},
                    {"yt", yt},
                    {"lists", expertListArgs(s)},
                    {"dargs", down.args},
                    {"fmt", formatSuffix(s.nvfp4)},
                    {"G", str(kGroupedItems)},
                    {"ids", warp::warpIds()},
                    {"loop", groupedLoop(s, s.latent / 4)},
                    {"glob", down.globalLoad},
                    {"dot", warp::rowsDot(perItem(down.rows, true), s.nvfp4, "%h", ht, "%t0, %j0",
                                          s.intermediate, outs, "", warp::Nvfp4Lanes::Grouped)},
                    {"sums", sums},
                    {"stores", stores}});
  return textKernel(name, "kiln.megamoe", body);
}

} // namespace

bool groupedExpertsFit(const ExpertTileShape &s) {
  // Whole groups of 2 and 4 rows.
  return expertListsFit(s) && warpMoEFits(s.intermediate, s.latent);
}

TargetHooks::MatrixExperts groupedExperts(const ExpertTileShape &s) {
  // Warps of 32 over an expert's rows: 2 of gate and of up, then 4 of down.
  return TargetHooks::MatrixExperts{expertLists(s),
                                    expertGateUpGrouped(s),
                                    expertDownGrouped(s),
                                    expertListsWork(s),
                                    Work{warp::kWarp * s.experts * s.intermediate / 2, 0},
                                    Work{warp::kWarp * s.experts * s.latent / 4, 0},
                                    s.experts + 2,
                                    2 * s.maxTiles(),
                                    s.maxItems()};
}

} // namespace kiln::kernels
