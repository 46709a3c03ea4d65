#include "compiler/pipeline/RankMemory.h"

#include "dialects/kiln/CheckpointDType.h"
#include "dialects/kiln/KilnOps.h"

#include "mlir/Dialect/Shard/IR/ShardOps.h"
#include "mlir/IR/SymbolTable.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/raw_ostream.h"

namespace kiln {
namespace {

// How many ranks share a value through the shard.all_slice ops that read it
// (1 when it is replicated).
int64_t sliceGroup(mlir::Value v) {
  for (mlir::Operation *user : v.getUsers()) {
    auto slice = llvm::dyn_cast<mlir::shard::AllSliceOp>(user);
    if (!slice)
      continue;
    auto grid =
        mlir::SymbolTable::lookupNearestSymbolFrom<mlir::shard::GridOp>(slice, slice.getGridAttr());
    int64_t group = 1;
    for (int16_t axis : slice.getGridAxes())
      group *= grid.getShape()[axis];
    return group;
  }
  return 1;
}

std::string gib(int64_t bytes) {
  std::string s;
  llvm::raw_string_ostream(s) << llvm::format("%.2f GiB", double(bytes) / (1ll << 30));
  return s;
}

} // namespace

RankMemory rankMemory(mlir::ModuleOp graph) {
  RankMemory memory;
  graph.walk([&](WeightOp weight) {
    mlir::RankedTensorType type = weight.getResult().getType();
    std::optional<DType> dtype = checkpointDType(type.getElementType());
    int64_t bytes = type.getNumElements() * (dtype ? dtypeSize(*dtype) : 4);
    memory.weightBytes += bytes / sliceGroup(weight.getResult());
  });
  bool first = true;
  graph.walk([&](AttentionOp attention) {
    auto k = llvm::cast<mlir::RankedTensorType>(attention.getK().getType());
    std::optional<mlir::Type> kvType = attention.getKvType();
    const bool bf16 = kvType && kvType->isBF16();
    const bool fp8 = kvType && llvm::isa<mlir::Float8E4M3FNType>(*kvType);
    int64_t elementBytes = fp8 ? 1 : bf16 ? 2 : 4;
    const std::string dtype = fp8 ? "fp8" : bf16 ? "bf16" : "f32";
    memory.kvDType = first || memory.kvDType == dtype ? dtype : "mixed";
    first = false;
    int64_t perToken = 2 * k.getDimSize(1) * k.getDimSize(2) * elementBytes;
    if (std::optional<int64_t> window = attention.getWindow()) {
      memory.slidingKvBytesPerToken += perToken;
      memory.slidingKvBytesFull += perToken * *window;
    } else {
      memory.globalKvBytesPerToken += perToken;
    }
  });
  return memory;
}

bool printRankMemory(llvm::raw_ostream &os, const RankMemory &memory, int64_t deviceBytes,
                     int64_t reserveBytes, const std::string &device) {
  os << "\nmemory per rank on " << device << " (" << gib(deviceBytes) << "):\n";
  os << "  weights               " << gib(memory.weightBytes) << " (" << memory.weightBytes
     << " bytes)\n";
  os << "  KV per token          " << memory.globalKvBytesPerToken << " bytes in global layers, "
     << memory.slidingKvBytesPerToken << " in sliding layers (up to "
     << gib(memory.slidingKvBytesFull) << " at their windows), " << memory.kvDType << "\n";
  os << "  reserved              " << gib(reserveBytes)
     << " (activations and runtime; not planned per layout yet)\n";
  int64_t left = deviceBytes - memory.weightBytes - reserveBytes - memory.slidingKvBytesFull;
  if (left <= 0) {
    os << "  does not fit: weights " << gib(memory.weightBytes) << " + sliding KV "
       << gib(memory.slidingKvBytesFull) << " + reserve " << gib(reserveBytes) << " > "
       << gib(deviceBytes) << "; use more ranks (--tp/--ep) or NVFP4 experts (--quant=nvfp4)\n";
    return false;
  }
  int64_t tokens = memory.globalKvBytesPerToken ? left / memory.globalKvBytesPerToken : 0;
  os << "  KV tokens that fit    " << tokens << " (global layers' cache in the " << gib(left)
     << " left)\n";
  return true;
}

} // namespace kiln
