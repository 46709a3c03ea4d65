#include "runtime/hip/AmdgcnArtifact.h"

#include "runtime/core/Chip.h"
#include "runtime/gpu/GpuArtifactRules.h"

namespace kiln {
namespace fb = kiln::artifact;

namespace {

// LLVM's AMDGPU feature names an amdgcn artifact may carry, with an
// optional '+' or '-': the code object's XNACK and SRAMECC modes, and the
// modes that do not change how HIP runs it. The wavefront size is not among
// them: it is the chip's (the chip table's warp column).
struct Feature {
  std::string_view name;
  bool mayDisable;
};
constexpr Feature kFeatures[] = {{"xnack", true},
                                 {"sramecc", true},
                                 {"cumode", true},
                                 {"tgsplit", true},
                                 {"wavefrontsize64", false}};

bool knownFeature(std::string_view feature) {
  bool disabled = false;
  if (!feature.empty() && (feature.front() == '+' || feature.front() == '-')) {
    disabled = feature.front() == '-';
    feature.remove_prefix(1);
  }
  for (const Feature &known : kFeatures)
    if (feature == known.name)
      return !disabled || known.mayDisable;
  return false;
}

// The device's setting of `mode` in its gcnArchName: '+', '-', or 0 when it
// names none (the device does not support it).
char deviceMode(std::string_view gcnArchName, std::string_view mode) {
  size_t at = 0;
  while ((at = gcnArchName.find(':', at)) != std::string_view::npos) {
    ++at;
    const std::string_view field = gcnArchName.substr(at, gcnArchName.find(':', at) - at);
    if (field.size() == mode.size() + 1 && field.substr(0, mode.size()) == mode)
      return field.back();
  }
  return 0;
}

} // namespace

bool isKnownAmdgcnChip(std::string_view chip) {
  const Chip *known = findChip(chip);
  return known && known->kind == ChipKind::Amdgcn;
}

std::string amdgcnChipSupport(const fb::Target &target, std::string_view gcnArchName) {
  const std::string chip = target.chip() ? target.chip()->str() : "";
  const std::string_view arch = gcnArchName.substr(0, gcnArchName.find(':'));
  if (arch != chip)
    return chip + " code runs only on " + chip + " devices";
  if (const auto *features = target.features())
    for (const flatbuffers::String *feature : *features) {
      const std::string_view text = feature->string_view();
      if (text.size() < 2 || (text.front() != '+' && text.front() != '-'))
        continue;
      const std::string_view mode = text.substr(1);
      if (mode != "xnack" && mode != "sramecc")
        continue;
      const char wanted = text.front();
      if (deviceMode(gcnArchName, mode) != wanted)
        return "its code needs " + std::string(mode) + wanted + " (feature " + std::string(text) +
               ")";
    }
  return "";
}

void checkAmdgcnArtifact(const Artifact &artifact) {
  static const std::string chips = chipNames(ChipKind::Amdgcn);
  checkGpuArtifact(artifact, {"amdgcn", chips, isKnownAmdgcnChip, knownFeature});
}

} // namespace kiln
