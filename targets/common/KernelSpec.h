// One generated kernel: its symbol, what it implements, the tiling its
// generator chose and its MLIR (a func.func in the func/scf/arith/math/
// memref/vector/amx dialects, before lowering to LLVM).
#pragma once

#include <cstdint>
#include <map>
#include <string>

namespace kiln::kernels {

struct KernelSpec {
  std::string name;        // func symbol; the library exports kiln_<name>(void **args)
  std::string op;          // the graph op it implements ("kiln.linear")
  std::string tiling;      // JSON, also attached to the func as kiln.tiling
  std::string mlir;        // the func.func text
  int64_t sharedBytes = 0; // dynamic shared memory a GPU kernel needs at launch
};

// A kernel written as MLIR text: its tiling JSON is read from the
// function's kiln.tiling attribute, the one place the text states it (a
// text without one, or one that does not parse, is a generator bug and
// aborts).
KernelSpec textKernel(std::string name, std::string op, std::string mlir);

// Fills `@@key@@` placeholders of an MLIR template (MLIR itself uses braces). Every placeholder
// must have a value; a missing one is a generator bug and aborts.
std::string fillTemplate(const std::string &text, const std::map<std::string, std::string> &values);

} // namespace kiln::kernels
