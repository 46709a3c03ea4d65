#include "runtime/cuda/NvptxArtifact.h"

#include "runtime/cpu/RuntimeError.h"

#include <cctype>

namespace kiln {
namespace fb = kiln::artifact;

namespace {

constexpr uint32_t kMaxBlock = 1024;

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
  if (!allDigits(chip) || chip.size() < 2 || chip.size() > 4 ||
      chip.front() == '0')
    return std::nullopt;
  const int number = std::stoi(std::string(chip));
  result.major = number / 10;
  result.minor = number % 10;
  return result;
}

std::string nvptxChipSupport(const NvptxChip &chip, std::string_view name,
                             int major, int minor) {
  const std::string needs = std::string(name) + " needs compute capability " +
                            capability(chip.major, chip.minor);
  const bool exact = major == chip.major && minor == chip.minor;
  const bool atLeast =
      major > chip.major || (major == chip.major && minor >= chip.minor);
  switch (chip.variant) {
  case 'a':
    return exact ? "" : needs + " exactly (arch-specific PTX)";
  case 'f':
    return major == chip.major && minor >= chip.minor
               ? ""
               : needs + " (or a later " + std::to_string(chip.major) +
                     ".x: family-specific PTX)";
  default:
    return atLeast ? "" : needs + " or later";
  }
}

void checkNvptxArtifact(const Artifact &artifact) {
  const fb::Target &target = *artifact->target();
  const std::string prefix = artifact.source() + ": artifact is for " +
                             describeTarget(target) + ", but ";
  auto fail = [&](const std::string &reason) {
    throw RuntimeError(prefix + reason);
  };
  const std::string chip = target.chip() ? target.chip()->str() : "";
  if (!parseNvptxChip(chip))
    fail("this runtime does not know the chip '" + chip +
         "' (nvptx chips are sm_XY, sm_XYa or sm_XYf)");
  std::string unknown;
  if (const auto *features = target.features())
    for (const flatbuffers::String *feature : *features)
      if (!knownFeature(feature->string_view()))
        unknown += (unknown.empty() ? "" : ", ") + feature->str();
  if (!unknown.empty())
    fail("this runtime does not know the nvptx feature(s) " + unknown);

  for (const fb::EntryPoint *entry : *artifact->entry_points()) {
    const auto *steps = entry->steps();
    for (flatbuffers::uoffset_t s = 0; steps && s < steps->size(); ++s) {
      const fb::Launch *launch = steps->Get(s)->step_as_Launch();
      if (!launch)
        continue;
      const std::string where =
          "entry point '" + entry->name()->str() + "', steps[" +
          std::to_string(s) + "] (launch of '" +
          artifact->kernels()->Get(launch->kernel())->name()->str() +
          "', op '" + (launch->op() ? launch->op()->str() : "") + "')";
      if (!launch->grid() || launch->block() == 0)
        fail(where + " has no " + (launch->grid() ? "block" : "grid") +
             " (GPU launches need Launch.grid and Launch.block)");
      if (launch->block() > kMaxBlock)
        fail(where + " has a block of " + std::to_string(launch->block()) +
             " threads (at most " + std::to_string(kMaxBlock) + ")");
      const auto *scalars = launch->scalars();
      for (flatbuffers::uoffset_t i = 0; scalars && i < scalars->size(); ++i) {
        const fb::ScalarKind kind = scalars->Get(i)->kind();
        if (kind == fb::ScalarKind::Part || kind == fb::ScalarKind::Parts)
          fail(where + " takes a " + fb::EnumNameScalarKind(kind) +
               " scalar (scalars[" + std::to_string(i) +
               "]): GPU kernels derive their part from their block and "
               "thread indices");
      }
    }
  }
}

} // namespace kiln
