// The GPU chip table (Chips.def) as C++: what each chip is, for the compiler
// (kilnc's targets, the hooks, the kernel compilers), the runtime's checks
// and the tests. Plain C++, no LLVM.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace kiln {

enum class ChipKind { Nvptx, Amdgcn };
enum class MatrixCores { None, MmaSync, Wgmma, Mfma };

struct Chip {
  std::string_view target; // kilnc --target
  ChipKind kind;
  std::string_view chip;     // LLVM's and the artifact's name
  std::string_view features; // LLVM target features
  MatrixCores matrix;
  int64_t warp;
  int64_t units; // SMs or CUs
  int64_t sharedKiB;
  int64_t vgprs, registers, sgprs;
  int64_t memoryGiB;
  uint32_t elfMach; // AMD code objects' EF_AMDGPU_MACH
  std::string_view products;

  int64_t sharedBytes() const { return sharedKiB * 1024; }
  // "nvptx64-nvidia-cuda" or "amdgcn-amd-amdhsa".
  std::string_view triple() const;
};

// Every row, in the table's order.
const std::vector<Chip> &allChips();
// By kilnc --target value ("sm_90") or by chip ("sm_90a"); null if none.
const Chip *chipForTarget(std::string_view target);
const Chip *findChip(std::string_view chip);
// The row an artifact's chip name belongs to: by chip, by target, or, for an
// NVIDIA arch- or family-specific name ("sm_100a", "sm_120f"), by the target
// it refines; null if none.
const Chip *findChipOrTarget(std::string_view name);
// "nvptx" or "amdgcn".
std::string_view chipKindName(ChipKind kind);
// The chips of one kind, "gfx942, gfx950".
std::string chipNames(ChipKind kind);

} // namespace kiln
