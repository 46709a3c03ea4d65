// Kiln's small kernel-building layer: a kernel is built as typed IR through
// MLIR's builders (no MLIR text assembled by hand), in a context of its own,
// and handed on as a KernelSpec. Its tiling is written once (Tiling) and read
// by the kernel's attribute and the artifact's JSON alike.
//
//   KernelSpec spec = buildKernel("linear_x_64x32", "kiln.linear", tiling,
//                                 {xType, wType, yType, i64},
//                                 [&](KernelScope &k) { ... k.b ... });
//
// The function gets the trailing i64 %part and %parts arguments every kernel
// takes (docs/runtime-abi.md); the body sees them as the last two arguments.
#pragma once

#include "targets/common/KernelSpec.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/ImplicitLocOpBuilder.h"

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <variant>
#include <vector>

namespace kiln::kernels {

// A kernel's tiling: named integers and words, in any order. attr() is the
// kiln.tiling dictionary (sorted by name, as MLIR keeps it); the artifact's
// JSON is read from it (tilingJson).
class Tiling {
public:
  Tiling &set(const std::string &key, int64_t value);
  Tiling &set(const std::string &key, const std::string &value);
  Tiling &set(const std::string &key, std::vector<int64_t> values); // an array
  mlir::DictionaryAttr attr(mlir::Builder &b) const;

private:
  std::vector<std::pair<std::string, std::variant<int64_t, std::string, std::vector<int64_t>>>>
      fields;
};

// A kiln.tiling dictionary as the artifact's JSON, in the dictionary's
// order: {"kind": "wgmma-gemm", "stages": 4, "tile": [128, 128, 32]}.
// Integers, strings and arrays of them; anything else is a generator bug
// and aborts.
std::string tilingJson(mlir::DictionaryAttr tiling);

// What a kernel body builds with: the builder (inside the function's entry
// block), the function, and a few conveniences.
struct KernelScope {
  mlir::ImplicitLocOpBuilder &b;
  mutable mlir::func::FuncOp func;
  mlir::ModuleOp module; // for globals the kernel needs (insert before func)

  mlir::BlockArgument arg(unsigned i) const;
  mlir::Value index(int64_t value) const; // an index constant
  mlir::Value i32(int64_t value) const;
  mlir::Value i64(int64_t value) const;
  // The argument as an index (i64 arguments: T, scalars).
  mlir::Value argIndex(unsigned i) const;
};

// Builds the kernel `name` with `args` (then %part, %parts), its body by
// `body`, which ends without a terminator (buildKernel adds func.return).
// Every dialect kernels use is loaded. The text is the module's ops (globals,
// then the function), printed.
KernelSpec buildKernel(const std::string &name, const std::string &op, const Tiling &tiling,
                       const std::function<std::vector<mlir::Type>(mlir::Builder &)> &args,
                       const std::function<void(KernelScope &)> &body);

// What the kernel asks of its launch, told to ptxas (NVPTX only; other
// targets' lowering ignores nvvm attributes): at most `threads` a block
// (nvvm.maxntid), and, when `blocksPerSm` > 0, few enough registers a thread
// for that many blocks an SM (nvvm.minctasm).
void boundLaunch(KernelScope &k, int64_t threads, int32_t blocksPerSm = 0);

// `value` combined with the lanes `offsets` away, in turn (xor shuffles over
// a 32-lane warp): {16, 8, 4, 2, 1} reduces over the warp, {1, 2} over the
// four lanes of an mma row. Every lane gets the result; `combine(own,
// other)` builds one step.
mlir::Value xorShuffleReduce(mlir::ImplicitLocOpBuilder &b, mlir::Value value,
                             llvm::ArrayRef<int32_t> offsets,
                             llvm::function_ref<mlir::Value(mlir::Value, mlir::Value)> combine);

// [begin, end) of `count` items for launch part `part` of `parts`:
// ceil(count / parts) a part, the last ones possibly empty.
std::pair<mlir::Value, mlir::Value> partRange(mlir::ImplicitLocOpBuilder &b, mlir::Value count,
                                              mlir::Value part, mlir::Value parts);

// The loop over this launch part's share of `count` rows (partRange of the
// kernel's trailing %part and %parts); the builder is left inside it, and
// the row returned.
mlir::Value forEachRowOfPart(KernelScope &k, mlir::Value count);

// A constant f32 table of the kernel's module (`name`, private), for lookup
// by memref.get_global; returns its type.
mlir::MemRefType constantTable(KernelScope &k, const std::string &name,
                               llvm::ArrayRef<float> values);
// The same of f64 values.
mlir::MemRefType constantTable(KernelScope &k, const std::string &name,
                               llvm::ArrayRef<double> values);
// A buffer in shared memory (the GPU's workgroup address space) of the
// kernel's module: `shape` of `element`, declared as the private global
// `name` before the kernel function; get() is memref.get_global of it where
// the builder stands.
struct SharedBuffer {
  mlir::MemRefType type;
  std::string name;
  mlir::Value get(mlir::ImplicitLocOpBuilder &b) const;
};
SharedBuffer declareSharedBuffer(KernelScope &k, const std::string &name,
                                 llvm::ArrayRef<int64_t> shape, mlir::Type element);

// The table of `decode` over codes 0 .. count - 1 (an E2M1 or E4M3 decoder),
// NaN codes as the one positive quiet NaN.
mlir::MemRefType decodeTable(KernelScope &k, const std::string &name, int count,
                             float (*decode)(uint8_t));

// The warp of a warp-rows kernel's launch part (its %part the thread, its
// %parts all threads): the index constants 0, 1 and 32 (made first, as the
// warp kernels' shared header does), the lane, the warp and the warp count.
struct WarpOfPart {
  mlir::Value c0, c1, c32, lane, warp, warps;
};
WarpOfPart warpOfPart(KernelScope &k);

} // namespace kiln::kernels
