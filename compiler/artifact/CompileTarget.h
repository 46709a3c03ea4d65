// Graph (after the graph pipeline) to a target's artifact, the steps kilnc
// runs: lower to the plan (asking the target's hooks), plan memory, generate
// and compile the kernels (x86: ELF library; nvptx: PTX), write the
// flatbuffer and check it with the runtime's own verifier.
#pragma once

#include "models/muse_spark/Config.h"
#include "runtime/core/Chip.h"
#include "targets/common/LowerToPlan.h"
#include "targets/x86/CpuTarget.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/Support/LogicalResult.h"

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace kiln {

struct TargetChoice {
  enum Kind { X86, Nvptx, Amdgcn } kind = X86;
  std::string chip;          // the artifact's chip: "sm_90a", "gfx950"; x86: cpu.cpu
  const Chip *gpu = nullptr; // GPUs: the chip table's row (runtime/core/Chips.def)
  x86::CpuTarget cpu;        // x86 only: the CPU and the features its kernels use
  std::string fault;         // a kernel broken on purpose (kilnc --inject-fault), or ""
  // The device memory the memory plan is made for and the runtime's reserve
  // (kilnc --device-memory, --reserve-memory), recorded in the artifact; 0:
  // no plan.
  uint64_t memoryBytes = 0, reserveBytes = 0;
  std::string name() const { return kind == Nvptx ? "nvptx" : kind == Amdgcn ? "amdgcn" : "x86"; }
  static TargetChoice x86(x86::CpuTarget cpu) {
    TargetChoice target;
    target.chip = cpu.cpu;
    target.cpu = std::move(cpu);
    return target;
  }
  static TargetChoice forChip(const Chip &chip) {
    TargetChoice target;
    target.kind = chip.kind == ChipKind::Nvptx ? Nvptx : Amdgcn;
    target.chip = std::string(chip.chip);
    target.gpu = &chip;
    return target;
  }
};

// The hooks the shared lowering asks for this target.
std::unique_ptr<kernels::TargetHooks> hooksFor(const TargetChoice &target);

// The kernels as the target's kernel module (what kilnc --emit=kernels
// prints): gpu.module for GPUs, func.func for x86; null after diagnostics.
mlir::OwningOpRef<mlir::ModuleOp> buildKernelModule(mlir::MLIRContext &context,
                                                    const std::vector<kernels::KernelSpec> &kernels,
                                                    const TargetChoice &target);

// Lowers `graph` to the target's plan and assigns arena offsets.
mlir::FailureOr<kernels::LoweredModel> lowerAndPlan(mlir::ModuleOp graph,
                                                    const kernels::LowerOptions &options,
                                                    const TargetChoice &target);

struct TargetBuild {
  kernels::LoweredModel model;
  std::vector<uint8_t> library;  // ELF shared object (x86), PTX text (nvptx), hsaco (amdgcn)
  std::vector<uint8_t> artifact; // the whole artifact, verified
};

// Called as each stage ends: "plan: 3 entry points, 43 kernels".
using StageProgress = std::function<void(const std::string &stage)>;

// Everything; `error` says what failed (diagnostics are emitted as well).
// The checkpoint format is the graph's (its #kiln.weight_format).
mlir::FailureOr<TargetBuild> buildArtifact(mlir::ModuleOp graph, const muse_spark::Config &config,
                                           const kernels::LowerOptions &options,
                                           const TargetChoice &target, std::string &error,
                                           const StageProgress &stage = nullptr);

} // namespace kiln
