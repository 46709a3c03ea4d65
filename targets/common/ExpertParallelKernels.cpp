// The kernels of work split over ranks whose part depends on the rank, known
// only at run time (its index in a comm group arrives as the launch's group:N
// scalar): expert parallelism's renumbering of a token's selected experts to
// this rank's block (kiln.local_experts, and the first step of a kiln.megamoe
// that spans ranks), and sequence parallelism's rows of the whole sequence.
#include "targets/common/Generators.h"
#include "targets/common/KernelSpec.h"

namespace kiln::kernels {

KernelSpec localExperts(int64_t k, int64_t localCount) {
  std::string name = "local_experts_top" + std::to_string(k) + "_of" + std::to_string(localCount);
  std::string body = fillTemplate(R"(
func.func @@@name@@(%idx: memref<?x@@K@@xi32>, %out: memref<?x@@K@@xi32>, %rows_i: i64,
                    %member: i64, %part: i64, %parts: i64)
    attributes {llvm.emit_c_interface, kiln.tiling = {kind = "rows"}} {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %k = arith.constant @@K@@ : index
  %block = arith.constant @@E@@ : i32
  %none = arith.constant -1 : i32
  %rows = arith.index_cast %rows_i : i64 to index
  %member_i = arith.trunci %member : i64 to i32
  %first = arith.muli %member_i, %block : i32
  @@range@@
  scf.for %t = %tbegin to %tend step %c1 {
    scf.for %j = %c0 to %k step %c1 {
      %e = memref.load %idx[%t, %j] : memref<?x@@K@@xi32>
      %local = arith.subi %e, %first : i32
      %low = arith.cmpi sge, %e, %first : i32
      %high = arith.cmpi slt, %local, %block : i32
      %inside = arith.andi %low, %high : i1
      %v = arith.select %inside, %local, %none : i32
      memref.store %v, %out[%t, %j] : memref<?x@@K@@xi32>
    }
  }
  return
}
)",
                                  {{"name", name},
                                   {"K", std::to_string(k)},
                                   {"E", std::to_string(localCount)},
                                   {"range", partRange("%rows", "t")}});
  return textKernel(name, "kiln.local_experts", body);
}

KernelSpec sliceRows(int64_t width) {
  std::string name = "slice_rows_" + std::to_string(width);
  std::string body = fillTemplate(
      R"(
func.func @@@name@@(%in: memref<?x@@W@@xf32>, %out: memref<?x@@W@@xf32>, %rows_i: i64,
                    %member: i64, %part: i64, %parts: i64)
    attributes {llvm.emit_c_interface, kiln.tiling = {kind = "rows"}} {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %w = arith.constant @@W@@ : index
  %rows = arith.index_cast %rows_i : i64 to index
  %member_x = arith.index_cast %member : i64 to index
  %first = arith.muli %member_x, %rows : index
  @@range@@
  scf.for %t = %tbegin to %tend step %c1 {
    %from = arith.addi %first, %t : index
    scf.for %c = %c0 to %w step %c1 {
      %v = memref.load %in[%from, %c] : memref<?x@@W@@xf32>
      memref.store %v, %out[%t, %c] : memref<?x@@W@@xf32>
    }
  }
  return
}
)",
      {{"name", name}, {"W", std::to_string(width)}, {"range", partRange("%rows", "t")}});
  return textKernel(name, "shard.all_slice", body);
}

} // namespace kiln::kernels
