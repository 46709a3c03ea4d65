// What one rank of a (sharded) graph keeps in device memory, read off the
// graph: the bytes of the checkpoint pieces it holds (kiln.weight, divided by
// the group a shard.all_slice splits it over) and the KV cache bytes per
// token of its attention layers (global and sliding apart; a sliding layer's
// cache stops growing at its window).
#pragma once

#include "mlir/IR/BuiltinOps.h"

#include <cstdint>
#include <string>

namespace llvm {
class raw_ostream;
} // namespace llvm

namespace kiln {

struct RankMemory {
  int64_t weightBytes = 0;
  int64_t globalKvBytesPerToken = 0;  // all global layers, K and V
  int64_t slidingKvBytesPerToken = 0; // all sliding layers, up to their windows
  int64_t slidingKvBytesFull = 0;     // all sliding layers at their windows
  std::string kvDType = "f32";        // the caches' element type ("fp8", "bf16", "f32", "mixed")
};

// The KV cache counts each attention's kv_type (f32 without one), as the
// artifact's plan does.
RankMemory rankMemory(mlir::ModuleOp graph);

// Prints the memory plan of one rank on a device of `deviceBytes`, reserving
// `reserveBytes` (activations, runtime); returns false, after printing why,
// when the weights alone do not fit.
bool printRankMemory(llvm::raw_ostream &os, const RankMemory &memory, int64_t deviceBytes,
                     int64_t reserveBytes, const std::string &device);

} // namespace kiln
