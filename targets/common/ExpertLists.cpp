#include "targets/common/ExpertLists.h"

#include "targets/common/WarpSnippets.h"

namespace kiln::kernels {
namespace {

constexpr int64_t kListThreads = 1024;

} // namespace

std::string expertShapeSuffix(const ExpertTileShape &s) {
  return str(s.experts) + "e_top" + str(s.k) + "_" + str(s.intermediate) + "x" + str(s.latent) +
         "_t" + str(s.maxTokens) + (s.nvfp4 ? "_nvfp4" : "_bf16");
}

std::string expertListArgs(const ExpertTileShape &s) {
  return "%meta: memref<" + str(s.experts + 2) + "xi32>, %tiles: memref<" + str(2 * s.maxTiles()) +
         "xi32>, %items: memref<" + str(s.maxItems()) + "xi32>";
}

bool expertListsFit(const ExpertTileShape &s) { return s.experts <= kListThreads; }

Work expertListsWork(const ExpertTileShape &) { return Work{kListThreads, 0, kListThreads}; }

std::string expertTileOfBlock(const ExpertTileShape &s, int64_t colTiles) {
  return fillTemplate(R"(
  %col_tiles = arith.constant @@col_tiles@@ : index
  %tile_count_at = arith.constant @@count_at@@ : index
  %tile = arith.divui %bid, %col_tiles : index
  %nt = arith.remui %bid, %col_tiles : index
  %tile_count_i = memref.load %meta[%tile_count_at] : memref<@@meta@@xi32>
  %tile_count = arith.index_cast %tile_count_i : i32 to index
  %live = arith.cmpi ult, %tile, %tile_count : index
)",
                      {{"col_tiles", str(colTiles)},
                       {"count_at", str(s.experts + 1)},
                       {"meta", str(s.experts + 2)}});
}

std::string expertTileItems(const ExpertTileShape &s) {
  return fillTemplate(R"(
    %tile2 = arith.muli %tile, %c2 : index
    %tile2b = arith.addi %tile2, %c1 : index
    %e_i = memref.load %tiles[%tile2] : memref<@@tw@@xi32>
    %r0_i = memref.load %tiles[%tile2b] : memref<@@tw@@xi32>
    %e = arith.index_cast %e_i : i32 to index
    %r0 = arith.index_cast %r0_i : i32 to index
    %e1 = arith.addi %e, %c1 : index
    %first_i = memref.load %meta[%e] : memref<@@meta@@xi32>
    %end_i = memref.load %meta[%e1] : memref<@@meta@@xi32>
    %first = arith.index_cast %first_i : i32 to index
    %end = arith.index_cast %end_i : i32 to index
    %base = arith.addi %first, %r0 : index
    %left = arith.subi %end, %base : index
    %rows_in = arith.minui %left, %c128 : index
    %last_in = arith.subi %rows_in, %c1 : index
)",
                      {{"tw", str(2 * s.maxTiles())}, {"meta", str(s.experts + 2)}});
}

KernelSpec expertLists(const ExpertTileShape &s) {
  std::string name = "expert_lists_" + expertShapeSuffix(s);
  std::string shared = "memref<" + str(s.experts) + "xi32, #gpu.address_space<workgroup>>";
  std::string text;
  for (const char *what : {"count", "fill", "start", "tile"})
    text += "memref.global \"private\" @" + name + "_" + what + " : " + shared + "\n";
  text += fillTemplate(R"(
func.func @@@name@@(%idx: memref<?x@@k@@xi32>, @@lists@@, %rows_i: i64, %part: i64, %parts: i64)
    attributes {llvm.emit_c_interface, kiln.tiling = {kind = "expert-lists", block = 1024 : i64}} {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c2 = arith.constant 2 : index
  %c128 = arith.constant 128 : index
  %ck = arith.constant @@k@@ : index
  %ce = arith.constant @@E@@ : index
  %total_at = arith.constant @@E@@ : index
  %tiles_at = arith.constant @@E1@@ : index
  %threads = arith.constant 1024 : index
  %zero = arith.constant 0 : i32
  %one = arith.constant 1 : i32
  %i127 = arith.constant 127 : i32
  %i128 = arith.constant 128 : i32
  %tid = gpu.thread_id x
  %rows = arith.index_cast %rows_i : i64 to index
  %n_items = arith.muli %rows, %ck : index
  %count = memref.get_global @@@name@@_count : @@shared@@
  %fill = memref.get_global @@@name@@_fill : @@shared@@
  %start = memref.get_global @@@name@@_start : @@shared@@
  %tile = memref.get_global @@@name@@_tile : @@shared@@
  scf.for %e = %tid to %ce step %threads {
    memref.store %zero, %count[%e] : @@shared@@
    memref.store %zero, %fill[%e] : @@shared@@
  }
  gpu.barrier
  // Items per expert.
  scf.for %i = %tid to %n_items step %threads {
    %t = arith.divui %i, %ck : index
    %j = arith.remui %i, %ck : index
    %e_i = memref.load %idx[%t, %j] : memref<?x@@k@@xi32>
    // -1: another rank's expert (expert parallelism), not listed.
    %here = arith.cmpi sge, %e_i, %zero : i32
    scf.if %here {
      %e = arith.index_cast %e_i : i32 to index
      %old = memref.atomic_rmw addi %one, %count[%e] : (i32, @@shared@@) -> i32
    }
  }
  gpu.barrier
  // Each expert's first position and first tile, in expert order.
  %lead = arith.cmpi eq, %tid, %c0 : index
  scf.if %lead {
    %sums:2 = scf.for %e = %c0 to %ce step %c1 iter_args(%at = %zero, %tiles_before = %zero) -> (i32, i32) {
      memref.store %at, %start[%e] : @@shared@@
      memref.store %at, %meta[%e] : memref<@@E2@@xi32>
      memref.store %tiles_before, %tile[%e] : @@shared@@
      %n = memref.load %count[%e] : @@shared@@
      %next = arith.addi %at, %n : i32
      %n_up = arith.addi %n, %i127 : i32
      %n_tiles = arith.divui %n_up, %i128 : i32
      %tiles_next = arith.addi %tiles_before, %n_tiles : i32
      scf.yield %next, %tiles_next : i32, i32
    }
    memref.store %sums#0, %meta[%total_at] : memref<@@E2@@xi32>
    memref.store %sums#1, %meta[%tiles_at] : memref<@@E2@@xi32>
  }
  gpu.barrier
  // The tiles: (expert, first row) for each 128 of an expert's items.
  scf.for %e = %tid to %ce step %threads {
    %n = memref.load %count[%e] : @@shared@@
    %t0_i = memref.load %tile[%e] : @@shared@@
    %n_up = arith.addi %n, %i127 : i32
    %n_tiles_i = arith.divui %n_up, %i128 : i32
    %n_tiles = arith.index_cast %n_tiles_i : i32 to index
    %t0 = arith.index_cast %t0_i : i32 to index
    %e_i = arith.index_cast %e : index to i32
    scf.for %q = %c0 to %n_tiles step %c1 {
      %slot = arith.addi %t0, %q : index
      %at = arith.muli %slot, %c2 : index
      %at1 = arith.addi %at, %c1 : index
      %row = arith.muli %q, %c128 : index
      %row_i = arith.index_cast %row : index to i32
      memref.store %e_i, %tiles[%at] : memref<@@TW@@xi32>
      memref.store %row_i, %tiles[%at1] : memref<@@TW@@xi32>
    }
  }
  // The items, grouped by expert.
  scf.for %i = %tid to %n_items step %threads {
    %t = arith.divui %i, %ck : index
    %j = arith.remui %i, %ck : index
    %e_i = memref.load %idx[%t, %j] : memref<?x@@k@@xi32>
    %here = arith.cmpi sge, %e_i, %zero : i32
    scf.if %here {
      %e = arith.index_cast %e_i : i32 to index
      %slot = memref.atomic_rmw addi %one, %fill[%e] : (i32, @@shared@@) -> i32
      %first = memref.load %start[%e] : @@shared@@
      %pos_i = arith.addi %first, %slot : i32
      %pos = arith.index_cast %pos_i : i32 to index
      %item = arith.index_cast %i : index to i32
      memref.store %item, %items[%pos] : memref<@@MI@@xi32>
    }
  }
  return
}
)",
                       {{"name", name},
                        {"k", str(s.k)},
                        {"lists", expertListArgs(s)},
                        {"shared", shared},
                        {"E", str(s.experts)},
                        {"E1", str(s.experts + 1)},
                        {"E2", str(s.experts + 2)},
                        {"TW", str(2 * s.maxTiles())},
                        {"MI", str(s.maxItems())}});
  return textKernel(name, "kiln.megamoe", text);
}

} // namespace kiln::kernels
