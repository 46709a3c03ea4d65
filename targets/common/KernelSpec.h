// One generated kernel: its symbol, what it implements, the tiling its
// generator chose and its MLIR (a func.func in the func/scf/arith/math/
// memref/vector/amx dialects, before lowering to LLVM).
#pragma once

#include <cstdint>
#include <string>

namespace kiln::kernels {

// Decimal text of a size, for kernel names.
inline std::string str(int64_t value) { return std::to_string(value); }

struct KernelSpec {
  std::string name;        // func symbol; the library exports kiln_<name>(void **args)
  std::string op;          // the graph op it implements ("kiln.linear")
  std::string tiling;      // JSON, also attached to the func as kiln.tiling
  std::string mlir;        // the kernel module's ops, printed (KernelBuilder.h)
  int64_t sharedBytes = 0; // dynamic shared memory a GPU kernel needs at launch
};

} // namespace kiln::kernels
