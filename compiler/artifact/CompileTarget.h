// Graph (after the graph pipeline) to a target's artifact, the steps kilnc
// runs: lower to the plan (asking the target's hooks), plan memory, generate
// and compile the kernels (x86: ELF library; nvptx: PTX), write the
// flatbuffer and check it with the runtime's own verifier.
#pragma once

#include "models/muse_spark/Config.h"
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
  std::string chip;   // "sm_90" / "sm_100", "gfx942" / "gfx950"; x86: cpu.cpu
  x86::CpuTarget cpu; // x86 only: the CPU and the features its kernels use
  std::string fault;  // a kernel broken on purpose (kilnc --inject-fault), or ""
  std::string name() const { return kind == Nvptx ? "nvptx" : kind == Amdgcn ? "amdgcn" : "x86"; }
  static TargetChoice x86(x86::CpuTarget cpu) { return {X86, cpu.cpu, std::move(cpu), ""}; }
};

// The hooks the shared lowering asks for this target.
std::unique_ptr<kernels::TargetHooks> hooksFor(const TargetChoice &target);

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
mlir::FailureOr<TargetBuild> buildArtifact(mlir::ModuleOp graph, const muse_spark::Config &config,
                                           muse_spark::WeightFormat format,
                                           const kernels::LowerOptions &options,
                                           const TargetChoice &target, std::string &error,
                                           const StageProgress &stage = nullptr);

} // namespace kiln
