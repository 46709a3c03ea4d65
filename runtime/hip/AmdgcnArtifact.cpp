#include "runtime/hip/AmdgcnArtifact.h"

#include "runtime/cpu/RuntimeError.h"

namespace kiln {
namespace fb = kiln::artifact;

namespace {

constexpr uint32_t kMaxBlock = 1024;
constexpr std::string_view kChips[] = {"gfx942", "gfx950"};

// LLVM's AMDGPU feature names a gfx942 / gfx950 artifact may carry, with an
// optional '+' or '-': the code object's XNACK and SRAMECC modes, and the
// modes that do not change how HIP runs it. wavefrontsize32 is not among
// them: these chips run wavefronts of 64.
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
    const std::string_view field =
        gcnArchName.substr(at, gcnArchName.find(':', at) - at);
    if (field.size() == mode.size() + 1 && field.substr(0, mode.size()) == mode)
      return field.back();
  }
  return 0;
}

} // namespace

bool isKnownAmdgcnChip(std::string_view chip) {
  for (std::string_view known : kChips)
    if (chip == known)
      return true;
  return false;
}

std::string amdgcnChipSupport(const fb::Target &target,
                              std::string_view gcnArchName) {
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
        return "its code needs " + std::string(mode) + wanted + " (feature " +
               std::string(text) + ")";
    }
  return "";
}

void checkAmdgcnArtifact(const Artifact &artifact) {
  const fb::Target &target = *artifact->target();
  const std::string prefix = artifact.source() + ": artifact is for " +
                             describeTarget(target) + ", but ";
  auto fail = [&](const std::string &reason) {
    throw RuntimeError(prefix + reason);
  };
  const std::string chip = target.chip() ? target.chip()->str() : "";
  if (!isKnownAmdgcnChip(chip))
    fail("this runtime does not know the chip '" + chip +
         "' (amdgcn chips are gfx942 and gfx950)");
  std::string unknown;
  if (const auto *features = target.features())
    for (const flatbuffers::String *feature : *features)
      if (!knownFeature(feature->string_view()))
        unknown += (unknown.empty() ? "" : ", ") + feature->str();
  if (!unknown.empty())
    fail("this runtime does not know the amdgcn feature(s) " + unknown);

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
