#include "runtime/gpu/GpuArtifactRules.h"

#include "runtime/cpu/RuntimeError.h"

#include <string>

namespace kiln {
namespace fb = kiln::artifact;

namespace {
constexpr uint32_t kMaxBlock = 1024;
} // namespace

void checkGpuArtifact(const Artifact &artifact, const GpuTargetRules &rules) {
  const fb::Target &target = *artifact->target();
  const std::string prefix =
      artifact.source() + ": artifact is for " + describeTarget(target) + ", but ";
  auto fail = [&](const std::string &reason) { throw RuntimeError(prefix + reason); };
  const std::string chip = target.chip() ? target.chip()->str() : "";
  if (!rules.knownChip(chip))
    fail("this runtime does not know the chip '" + chip + "' (" + std::string(rules.kind) +
         " chips are " + std::string(rules.chips) + ")");
  std::string unknown;
  if (const auto *features = target.features())
    for (const flatbuffers::String *feature : *features)
      if (!rules.knownFeature(feature->string_view()))
        unknown += (unknown.empty() ? "" : ", ") + feature->str();
  if (!unknown.empty())
    fail("this runtime does not know the " + std::string(rules.kind) + " feature(s) " + unknown);

  for (const fb::EntryPoint *entry : *artifact->entry_points()) {
    const auto *steps = entry->steps();
    for (flatbuffers::uoffset_t s = 0; steps && s < steps->size(); ++s) {
      const fb::Launch *launch = steps->Get(s)->step_as_Launch();
      if (!launch)
        continue;
      const std::string where = "entry point '" + entry->name()->str() + "', steps[" +
                                std::to_string(s) + "] (launch of '" +
                                artifact->kernels()->Get(launch->kernel())->name()->str() +
                                "', op '" + (launch->op() ? launch->op()->str() : "") + "')";
      if (!launch->grid() || launch->block() == 0)
        fail(where + " has no " + (launch->grid() ? "block" : "grid") +
             " (GPU launches need Launch.grid and Launch.block)");
      if (launch->block() > kMaxBlock)
        fail(where + " has a block of " + std::to_string(launch->block()) + " threads (at most " +
             std::to_string(kMaxBlock) + ")");
      const auto *scalars = launch->scalars();
      for (flatbuffers::uoffset_t i = 0; scalars && i < scalars->size(); ++i) {
        const fb::ScalarKind kind = scalars->Get(i)->kind();
        if (kind == fb::ScalarKind::Part || kind == fb::ScalarKind::Parts)
          fail(where + " takes a " + fb::EnumNameScalarKind(kind) + " scalar (scalars[" +
               std::to_string(i) +
               "]): GPU kernels derive their part from their block and "
               "thread indices");
      }
    }
  }
}

} // namespace kiln
