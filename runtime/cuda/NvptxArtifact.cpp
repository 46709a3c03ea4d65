#include "runtime/cuda/NvptxArtifact.h"

#include "runtime/gpu/GpuArtifactRules.h"

#include <cctype>

namespace kiln {
namespace fb = kiln::artifact;

namespace {

bool allDigits(std::string_view text) {
  if (text.empty())
    return false;
  for (char c : text)
    if (!std::isdigit(static_cast<unsigned char>(c)))
      return false;
  return true;
}

// LLVM's NVPTX feature names: the PTX ISA version ("ptx80") and the chip.
bool knownFeature(std::string_view feature) {
  if (!feature.empty() && feature.front() == '+')
    feature.remove_prefix(1);
  if (feature.substr(0, 3) == "ptx")
    return allDigits(feature.substr(3));
  return parseNvptxChip(feature).has_value();
}

std::string capability(int major, int minor) {
  return std::to_string(major) + "." + std::to_string(minor);
}

} // namespace

std::optional<NvptxChip> parseNvptxChip(std::string_view chip) {
  if (chip.substr(0, 3) != "sm_")
    return std::nullopt;
  chip.remove_prefix(3);
  NvptxChip result;
  if (!chip.empty() && (chip.back() == 'a' || chip.back() == 'f')) {
    result.variant = chip.back();
    chip.remove_suffix(1);
  }
  if (!allDigits(chip) || chip.size() < 2 || chip.size() > 4 || chip.front() == '0')
    return std::nullopt;
  const int number = std::stoi(std::string(chip));
  result.major = number / 10;
  result.minor = number % 10;
  return result;
}

std::string nvptxChipSupport(const NvptxChip &chip, std::string_view name, int major, int minor) {
  const std::string needs =
      std::string(name) + " needs compute capability " + capability(chip.major, chip.minor);
  const bool exact = major == chip.major && minor == chip.minor;
  const bool atLeast = major > chip.major || (major == chip.major && minor >= chip.minor);
  switch (chip.variant) {
  case 'a':
    return exact ? "" : needs + " exactly (arch-specific PTX)";
  case 'f':
    return major == chip.major && minor >= chip.minor
               ? ""
               : needs + " (or a later " + std::to_string(chip.major) + ".x: family-specific PTX)";
  default:
    return atLeast ? "" : needs + " or later";
  }
}

void checkNvptxArtifact(const Artifact &artifact) {
  checkGpuArtifact(artifact,
                   {"nvptx", "sm_XY, sm_XYa or sm_XYf",
                    [](std::string_view chip) { return parseNvptxChip(chip).has_value(); },
                    knownFeature});
}

} // namespace kiln
