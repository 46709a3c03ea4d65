// The nvptx parts of the artifact contract that need no GPU: what the loader
// checks of Launch.grid, Launch.block and the PTX blob (Artifact.cpp), the
// nvptx rules the CUDA backend checks before it touches a driver
// (checkNvptxArtifact), and which chips a device runs.
#include "runtime/cuda/NvptxArtifact.h"

#include "runtime/cpu/RuntimeError.h"

#include "test/unit/runtime_cuda/NvptxTestArtifact.h"

#include <gtest/gtest.h>

namespace kiln {
namespace {

using namespace kiln::cuda_test;

template <typename Fn> std::string errorOf(Fn &&fn) {
  try {
    fn();
  } catch (const std::exception &error) {
    return error.what();
  }
  ADD_FAILURE() << "nothing thrown";
  return "";
}

#define EXPECT_HAS(text, part)                                                                     \
  EXPECT_NE(std::string(text).find(part), std::string::npos)                                       \
      << "missing \"" << part << "\" in: " << text

Artifact load(const TestArtifact &a, const LaunchShapes &shapes) {
  return Artifact::fromBytes(serializeGpu(a, shapes), "gpu.kiln");
}

std::string loadError(const TestArtifact &a, const LaunchShapes &shapes) {
  return errorOf([&] { load(a, shapes); });
}

std::string ruleError(const TestArtifact &a, const LaunchShapes &shapes) {
  const Artifact artifact = load(a, shapes);
  return errorOf([&] { checkNvptxArtifact(artifact); });
}

TEST(NvptxArtifactTest, TheTestArtifactIsValid) {
  const Artifact artifact = load(nvptxTestArtifact(), nvptxTestShapes());
  EXPECT_NO_THROW(checkNvptxArtifact(artifact));
  const artifact::Launch *launch =
      artifact->entry_points()->Get(0)->steps()->Get(0)->step_as_Launch();
  ASSERT_NE(launch->grid(), nullptr);
  EXPECT_EQ(launch->grid()->per_token(), 1);
  EXPECT_EQ(launch->block(), 256u);
}

TEST(NvptxArtifactTest, LoaderChecksBlockAndGrid) {
  LaunchShapes shapes = nvptxTestShapes();
  shapes["lm_head"].block = 2048;
  const std::string block = loadError(nvptxTestArtifact(), shapes);
  EXPECT_HAS(block, "gpu.kiln: entry_points[0] 'prefill': steps[3] (launch of "
                    "'kiln_logits', op 'lm_head').block: 2048 threads per "
                    "block (at most 1024)");
  EXPECT_EQ(block.find('\n'), std::string::npos);

  shapes = nvptxTestShapes();
  shapes["lm_head"].grid = fb::Dim(8, 0, 0);
  EXPECT_HAS(loadError(nvptxTestArtifact(), shapes),
             ".grid {constant 8, per_token 0, align 0}: parts must be >= 0 "
             "and align >= 1");
  shapes["lm_head"].grid = fb::Dim(int64_t{1} << 31, 0, 1);
  EXPECT_HAS(loadError(nvptxTestArtifact(), shapes), "more than 2147483647 blocks at T=8");
  shapes["lm_head"].grid = fb::Dim(0, int64_t{1} << 62, 1);
  EXPECT_HAS(loadError(nvptxTestArtifact(), shapes), "blocks at T=8");
  // The largest grid CUDA allows, and none at all, load.
  shapes["lm_head"].grid = fb::Dim((int64_t{1} << 31) - 1, 0, 1);
  EXPECT_NO_THROW(load(nvptxTestArtifact(), shapes));
  shapes["lm_head"].grid = fb::Dim(0, 0, 1);
  EXPECT_NO_THROW(load(nvptxTestArtifact(), shapes));
}

TEST(NvptxArtifactTest, X86LaunchesLeaveGridAndBlockUnset) {
  TestArtifact a = nvptxTestArtifact();
  a.targetKind = fb::TargetKind::X86;
  a.triple = "x86_64-unknown-linux-gnu";
  a.chip = "sapphirerapids";
  a.features = {};
  a.libraryFormat = "elf-shared-object";
  EXPECT_HAS(loadError(a, nvptxTestShapes()),
             "steps[0] (launch of 'kiln_embed', op 'model.embed_tokens'): "
             "grid and block are for GPU targets; x86 launches leave them "
             "unset");
  LaunchShapes blockOnly = {{"poison", {fixed(0), 0}}};
  EXPECT_HAS(loadError(a, blockOnly), "op 'poison'): grid and block");
  EXPECT_NO_THROW(load(a, {}));
}

TEST(NvptxArtifactTest, PtxBlobIsNulTerminatedText) {
  TestArtifact a = nvptxTestArtifact();
  a.blob.pop_back();
  EXPECT_EQ(loadError(a, nvptxTestShapes()),
            "gpu.kiln: artifact is for nvptx sm_90 (+ptx78), but library.blob "
            "is not NUL-terminated PTX text (" +
                std::to_string(a.blob.size()) + " bytes, the last not NUL)");
  a.blob = {0, 0};
  EXPECT_HAS(loadError(a, nvptxTestShapes()),
             "library.blob is empty PTX text (it starts with NUL)");
  a.blob = ptxBlob(".version 7.8");
  a.blob.push_back('x');
  a.blob.push_back(0);
  EXPECT_HAS(loadError(a, nvptxTestShapes()),
             "library.blob has bytes after the NUL that ends its PTX text (at "
             "byte 12 of 15)");
  a.blob.clear();
  EXPECT_HAS(loadError(a, nvptxTestShapes()),
             "library.blob: empty, but the artifact has 4 kernels");
  // Padding NULs after the text are fine.
  a.blob = ptxBlob(kNvptxTestKernels);
  a.blob.resize(a.blob.size() + 7, 0);
  EXPECT_NO_THROW(load(a, nvptxTestShapes()));
}

TEST(NvptxArtifactTest, EveryLaunchNeedsAShape) {
  LaunchShapes shapes = nvptxTestShapes();
  shapes.erase("model.layers.0.kv");
  EXPECT_EQ(ruleError(nvptxTestArtifact(), shapes),
            "gpu.kiln: artifact is for nvptx sm_90 (+ptx78), but entry point "
            "'prefill', steps[2] (launch of 'kiln_append', op "
            "'model.layers.0.kv') has no grid (GPU launches need Launch.grid "
            "and Launch.block)");
  shapes = nvptxTestShapes();
  shapes["lm_head"].block = 0;
  EXPECT_HAS(ruleError(nvptxTestArtifact(), shapes), "op 'lm_head') has no block");
}

TEST(NvptxArtifactTest, GpuLaunchesTakeNoParts) {
  TestArtifact a = nvptxTestArtifact();
  std::get<TestLaunch>(a.entryPoints[1].steps[0]).scalars.push_back({fb::ScalarKind::Parts, 0});
  EXPECT_HAS(ruleError(a, nvptxTestShapes()),
             "entry point 'decode', steps[0] (launch of 'kiln_embed', op "
             "'model.embed_tokens') takes a Parts scalar (scalars[1]): GPU "
             "kernels derive their part from their block and thread indices");
}

TEST(NvptxArtifactTest, ChipAndFeaturesMustBeKnown) {
  TestArtifact a = nvptxTestArtifact();
  a.chip = "gfx950";
  EXPECT_HAS(ruleError(a, nvptxTestShapes()), "this runtime does not know the chip 'gfx950'");
  a = nvptxTestArtifact();
  a.features = {"+ptx86", "ptx80", "sm_90a", "+warp-drive"};
  EXPECT_HAS(ruleError(a, nvptxTestShapes()), "but this runtime does not know the nvptx feature(s) "
                                              "+warp-drive");
  a.features.pop_back();
  EXPECT_NO_THROW(checkNvptxArtifact(load(a, nvptxTestShapes())));
}

TEST(NvptxArtifactTest, ChipsParse) {
  auto parsed = [](const char *chip) {
    const std::optional<NvptxChip> result = parseNvptxChip(chip);
    return result ? std::to_string(result->major) + "." + std::to_string(result->minor) +
                        (result->variant ? std::string(1, result->variant) : std::string())
                  : std::string("none");
  };
  EXPECT_EQ(parsed("sm_90"), "9.0");
  EXPECT_EQ(parsed("sm_90a"), "9.0a");
  EXPECT_EQ(parsed("sm_100"), "10.0");
  EXPECT_EQ(parsed("sm_100a"), "10.0a");
  EXPECT_EQ(parsed("sm_103f"), "10.3f");
  EXPECT_EQ(parsed("sm_86"), "8.6");
  for (const char *bad : {"sm_9", "sm_090", "sm_", "sm_90b", "compute_90", "gfx950", "", "sm_90aa"})
    EXPECT_EQ(parsed(bad), "none") << bad;
}

TEST(NvptxArtifactTest, WhichDevicesAChipRunsOn) {
  auto support = [](const char *chip, int major, int minor) {
    return nvptxChipSupport(*parseNvptxChip(chip), chip, major, minor);
  };
  // Plain PTX: that capability and later (the driver compiles it).
  EXPECT_EQ(support("sm_90", 9, 0), "");
  EXPECT_EQ(support("sm_90", 10, 0), "");
  EXPECT_EQ(support("sm_90", 8, 9), "sm_90 needs compute capability 9.0 or later");
  EXPECT_EQ(support("sm_100", 9, 0), "sm_100 needs compute capability 10.0 or later");
  // Arch-specific: that capability only.
  EXPECT_EQ(support("sm_90a", 9, 0), "");
  EXPECT_EQ(support("sm_90a", 10, 0),
            "sm_90a needs compute capability 9.0 exactly (arch-specific PTX)");
  EXPECT_EQ(support("sm_100a", 10, 0), "");
  EXPECT_EQ(support("sm_100a", 9, 0),
            "sm_100a needs compute capability 10.0 exactly (arch-specific "
            "PTX)");
  // Family-specific: later minors of the same major.
  EXPECT_EQ(support("sm_100f", 10, 3), "");
  EXPECT_HAS(support("sm_100f", 12, 0), "or a later 10.x");
}

} // namespace
} // namespace kiln
