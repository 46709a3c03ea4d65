// Serialises a lowered model (plan with assigned offsets, kernels, kernel
// library, weight bindings, KV caches) into the flatbuffers artifact of
// runtime/artifact/kiln_artifact.fbs. Deterministic: the same inputs give the
// same bytes.
#pragma once

#include "targets/common/LowerToPlan.h"

#include "mlir/Support/LogicalResult.h"

#include <cstdint>
#include <string>
#include <vector>

namespace kiln {

struct ArtifactInfo {
  enum Kind { X86, Nvptx, Amdgcn } targetKind = X86;
  std::string libraryFormat = "elf-shared-object";
  std::string modelName;
  std::string configJson;   // canonical config.json text of the model
  std::string weightFormat; // "bf16" | "nvfp4"
  std::string triple = "x86_64-unknown-linux-gnu";
  std::string chip; // x86: the CPU ("znver4"); GPUs: "sm_90", "gfx950"
  std::vector<std::string> features;
  int tp = 1, ep = 1, world = 1, rank = 0;
  bool sp = false;
  // The memory plan's device and reserve (Target.memory_bytes; 0: none).
  uint64_t memoryBytes = 0, reserveBytes = 0;
  // Every kernel waits for the grid before it (Target.kernels_wait_for_prior_grid).
  bool kernelsWaitForPriorGrid = false;
};

// The compiler's version string recorded in every artifact.
std::string compilerVersion();

// Fails (with a diagnostic on the offending op) when a launch reads a buffer
// the plan does not define or an alloc has no offset.
mlir::FailureOr<std::vector<uint8_t>> serializeArtifact(const kernels::LoweredModel &model,
                                                        const std::vector<uint8_t> &library,
                                                        const ArtifactInfo &info);

} // namespace kiln
