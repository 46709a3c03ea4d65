#include "runtime/core/Chip.h"

namespace kiln {

namespace {

const std::vector<Chip> kChips = {
#define KILN_CHIP(TARGET, KIND, CHIP, FEATURES, MATRIX, WARP, UNITS, SHARED_KIB, VGPRS, REGISTERS, \
                  SGPRS, MEMORY_GIB, ELF_MACH, PRODUCTS)                                           \
  {TARGET,     ChipKind::KIND, CHIP,      FEATURES, MatrixCores::MATRIX, WARP,     UNITS,          \
   SHARED_KIB, VGPRS,          REGISTERS, SGPRS,    MEMORY_GIB,          ELF_MACH, PRODUCTS},
#include "runtime/core/Chips.def"
#undef KILN_CHIP
};

} // namespace

std::string_view Chip::triple() const {
  return kind == ChipKind::Nvptx ? "nvptx64-nvidia-cuda" : "amdgcn-amd-amdhsa";
}

const std::vector<Chip> &allChips() { return kChips; }

const Chip *chipForTarget(std::string_view target) {
  for (const Chip &chip : kChips)
    if (chip.target == target)
      return &chip;
  return nullptr;
}

const Chip *findChip(std::string_view name) {
  for (const Chip &chip : kChips)
    if (chip.chip == name)
      return &chip;
  return nullptr;
}

const Chip *findChipOrTarget(std::string_view name) {
  if (const Chip *chip = findChip(name))
    return chip;
  if (const Chip *chip = chipForTarget(name))
    return chip;
  if (!name.empty() && (name.back() == 'a' || name.back() == 'f'))
    return chipForTarget(name.substr(0, name.size() - 1));
  return nullptr;
}

std::string_view chipKindName(ChipKind kind) {
  return kind == ChipKind::Nvptx ? "nvptx" : "amdgcn";
}

std::string chipNames(ChipKind kind) {
  std::string names;
  for (const Chip &chip : kChips)
    if (chip.kind == kind)
      names += (names.empty() ? "" : ", ") + std::string(chip.chip);
  return names;
}

} // namespace kiln
