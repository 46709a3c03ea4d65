// The pieces Hopper's warp-specialised wgmma kernels share (sm_90a), built
// as typed IR: a ring of shared-memory stages, each an A tile (rows of the
// activations) and a B tile (rows of the weights), both K-major, 64 bf16 of
// k a row in the 128-byte swizzle; a full and an empty mbarrier a stage; and
// the consumer warpgroup's loop that waits for a stage, runs wgmma m64nNk16
// on it and frees the one before. WgmmaGemm (dense linears) and WgmmaExperts
// (the MegaMoE expert GEMMs) differ in how their producers fill the stages
// and in their epilogues, not in this contract.
//
// The shared-memory layout: the A tiles of every stage, the B tiles, then
// the full barriers and the empty barriers (8 bytes each).
#pragma once

#include "targets/common/KernelBuilder.h"

#include "mlir/Dialect/LLVMIR/LLVMDialect.h"

#include <cstdint>
#include <string>

namespace kiln::nvptx::wgmma {

constexpr int64_t kTileK = 64;                // k a stage: one swizzled row
constexpr int64_t kRowBytes = kTileK * 2;     // 128
constexpr int64_t kAtomBytes = 8 * kRowBytes; // the swizzle atom: the descriptors' stride
constexpr int64_t kMmaK = 16;                 // k of one wgmma (bf16)
constexpr int64_t kWarpgroup = 128;
constexpr int64_t kConsumerRows = 64; // the M of one warpgroup's wgmma

// setmaxnreg moves registers between the warpgroups of a block that starts
// with the launch's share (384 threads: 168 a thread, 65536 / 384 rounded
// down to 8): an increase waits until decreases have freed enough, so the
// producer's and the two consumers' counts must fit in what the three
// started with, or the consumers wait forever.
constexpr bool registersFit(uint32_t producer, uint32_t consumer) {
  return producer % 8 == 0 && consumer % 8 == 0 && producer + 2 * consumer <= 3 * 168;
}

// Splits a block of three warpgroups into its roles: warpgroup 0 the
// producer, its registers cut to `producerRegs`, and warpgroups 1 and 2 the
// consumers, raised to `consumerRegs` (registersFit must hold). `produce`
// gets the thread's index in its warpgroup, `consume` the consumer (0 or 1)
// and that index; each builds its role's body.
void splitRoles(kernels::KernelScope &k, mlir::Value tid, uint32_t producerRegs,
                uint32_t consumerRegs, llvm::function_ref<void(mlir::Value)> produce,
                llvm::function_ref<void(mlir::Value, mlir::Value)> consume);

struct RingLayout {
  int64_t stages, aRows, bRows;
  int64_t aBytes() const { return aRows * kRowBytes; }
  int64_t bBytes() const { return bRows * kRowBytes; }
  int64_t stageBytes() const { return aBytes() + bBytes(); }
  int64_t sharedBytes() const { return stages * stageBytes() + stages * 16; }
};

// Declares the kernel's dynamic shared memory `smemName` (an external array,
// 1024-byte aligned for the swizzle atoms) and the register cap at entry
// (`threads` a block, one block an SM) that setmaxnreg needs.
void declareKernel(kernels::KernelScope &k, const std::string &smemName, int64_t threads);

// The wgmma shared-memory matrix descriptor of a K-major, 128-byte-swizzled
// tile at the 32-bit shared address `addr32`.
mlir::Value matrixDescriptor(mlir::ImplicitLocOpBuilder &b, mlir::Value addr32);
// The descriptor of an MN-major, 128-byte-swizzled tile (the operand's k
// rows each 64 MN elements, 128 bytes; 8-row atoms 1024 bytes apart) whose
// further 64 MN elements lie in panels `panelBytes` apart: a row-major B
// operand as a TMA box brings it, used with the MMA's transposed B.
mlir::Value matrixDescriptorMnMajor(mlir::ImplicitLocOpBuilder &b, mlir::Value addr32,
                                    int64_t panelBytes);

// acc += A B for wgmma m64nNk16 (bf16 in, f32 accumulators, N = the struct
// `acc`'s fields * 2), A from registers: `a`, four i32 of bf16 pairs in the
// m16n8k16 A fragment's order (rows g and g + 8 at k 2t, then at k 2t + 8;
// the warp's 16 rows of the 64); B from shared memory by the descriptor
// `bDesc`, K-major (as matrixDescriptor) or, `transposedB`, MN-major (as
// matrixDescriptorMnMajor). `accumulate` false: acc = A B, what `acc` holds
// ignored (pass it undefined, so that nothing writes the registers between
// the fence and the product). MLIR's nvvm.wgmma.mma_async takes A from
// shared memory only, so this is PTX of its own.
struct RegisterAOptions {
  bool transposedB = false;
  bool accumulate = true;
};
mlir::Value mmaRegisterA(mlir::ImplicitLocOpBuilder &b, mlir::Value acc, mlir::ValueRange a,
                         mlir::Value bDesc, RegisterAOptions options);

class Ring {
public:
  // Takes the dynamic shared memory's address where it is built.
  Ring(kernels::KernelScope &k, const RingLayout &layout, const std::string &smemName);

  const RingLayout &layout() const { return ring; }
  // Stage s's A and B tiles and barriers (shared pointers); bOffset is the
  // B tile's byte offset (an index), for stores into it.
  mlir::Value aTile(mlir::Value s);
  mlir::Value bOffset(mlir::Value s);
  mlir::Value bTile(mlir::Value s) { return at(bOffset(s)); }
  mlir::Value full(mlir::Value s) { return barrier(0, s); }
  mlir::Value empty(mlir::Value s) { return barrier(1, s); }
  // Stage `s` read by this consumer warp: its lane 0 (`lane`, the thread's
  // lane in its warp) arrives on the stage's empty barrier.
  void release(mlir::Value s, mlir::Value lane);
  // The stage of k step `step`, and the parity its barriers are at.
  mlir::Value stageOf(mlir::Value step);
  mlir::Value parity(mlir::Value step);
  void wait(mlir::Value barrierAddr, mlir::Value phase);
  mlir::Value shared32(mlir::Value ptr);
  // A byte offset into the shared memory, as a shared pointer.
  mlir::Value at(mlir::Value byteOffset);

  // Thread 0 initialises every stage's barriers (full: `fullArrivals`,
  // empty: `emptyArrivals`); the block's barrier publishes them.
  void initBarriers(mlir::Value tid, int64_t fullArrivals, int64_t emptyArrivals);
  // The producer's claim of k step `step`: its stage, once the consumers
  // have freed it (the first pass finds every stage free), and the stage's
  // full barrier.
  struct Claim {
    mlir::Value stage, full;
  };
  Claim claim(mlir::Value step);
  // An arrival on `fullAt` that also expects `bytes` from the TMA.
  void expectBytes(mlir::Value fullAt, int64_t bytes);
  // The same for a count known when the kernel runs (i32).
  void expectBytes(mlir::Value fullAt, mlir::Value bytes);
  // One TMA copy of a box into shared `dst`, its bytes counted on `fullAt`:
  // the box at k `kk` (i32), then the `outer` coordinates (indices),
  // innermost first.
  void copy(mlir::Value dst, mlir::Value map, mlir::Value kk, llvm::ArrayRef<mlir::Value> outer,
            mlir::Value fullAt);
  // Orders the host's writes of a tensor map before the copy engine reads it.
  void acquireTensorMap(mlir::Value map);

  // Consumer warpgroup `consumer`'s main loop over `kSteps` stages: wgmma
  // m64 x bRows x k16 of the A tile's rows 64 consumer .. + 63 against
  // the whole B tile, accumulating into f32 registers; each warp frees the
  // stage before once its wgmma have read it. Returns the accumulators
  // (an LLVM struct of bRows / 2 f32) after the last group completed.
  mlir::Value accumulate(mlir::Value consumer, int64_t kSteps, mlir::Value inGroup);
  // The same over several 64-row blocks of the A tile (indices, block i's
  // rows 64 i .. 64 i + 63), each against the whole B tile into its own
  // accumulators, returned in that order. No blocks: the loop only waits
  // for each stage and frees it, so that a consumer with no rows to compute
  // still keeps the ring turning.
  llvm::SmallVector<mlir::Value> accumulateRowBlocks(mlir::ValueRange rowBlocks, int64_t kSteps,
                                                     mlir::Value inGroup);
  mlir::LLVM::LLVMStructType accumulatorType() const { return acc; }

private:
  // One stage of accumulateRowBlocks' loop: wait for it, issue its products
  // into `carried` (`fresh`: the first stage, whose first products overwrite
  // them), commit, and free the stage before.
  llvm::SmallVector<mlir::Value> accumulateStage(mlir::ValueRange rowBlocks, mlir::Value step,
                                                 mlir::ValueRange carried, bool fresh,
                                                 mlir::Value inGroup);

  mlir::Value barrier(int64_t which, mlir::Value s);

  kernels::KernelScope &k;
  mlir::ImplicitLocOpBuilder &b;
  RingLayout ring;
  mlir::LLVM::LLVMPointerType ptr3;
  mlir::LLVM::LLVMStructType acc;
  mlir::Value smem;
};

} // namespace kiln::nvptx::wgmma
