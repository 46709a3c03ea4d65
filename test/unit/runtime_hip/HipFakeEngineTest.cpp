// The engine on the stand-in HIP runtime (FakeHip.h): ctest runs this with
// LD_LIBRARY_PATH at the directory of the fake libamdhip64.so, so that the
// engine loads it as this machine's HIP runtime. The kernels do not run; what
// is checked is that the engine picks the HIP backend for an amdgcn
// artifact, and the launches it makes: prefill, then decode steps run
// directly, recorded into a HIP graph and replayed with their PastTokens
// arguments updated, every one with the arguments of docs/runtime-abi.md.
#include "runtime/engine/Engine.h"

#include "test/unit/runtime_hip/AmdgcnTestArtifact.h"
#include "test/unit/runtime_hip/FakeHip.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <dlfcn.h>

namespace kiln {
namespace {

using namespace kiln::hip_test;

// The stand-in's state, when the libamdhip64.so this process finds is it.
FakeHip *fakeRuntime() {
  void *handle = ::dlopen("libamdhip64.so", RTLD_NOW | RTLD_LOCAL);
  if (!handle)
    return nullptr;
  auto *state = reinterpret_cast<FakeHip *(*)()>(::dlsym(handle, "kilnFakeHip"));
  return state ? state() : nullptr;
}

// Parameter positions (3 + 2R per memref, then the scalars).
constexpr size_t kEmbedTokens = 19;
constexpr size_t kAppendPast = 16, kAppendTokens = 17;
constexpr size_t kLogitsPast = 23, kLogitsTokens = 24;

std::vector<std::string> kernelsOf(const std::vector<FakeLaunch> &launches) {
  std::vector<std::string> names;
  for (const FakeLaunch &launch : launches)
    names.push_back(launch.kernel);
  return names;
}

TEST(HipFakeEngineTest, TheEngineRunsAmdgcnArtifactsThroughHip) {
  FakeHip *fake = fakeRuntime();
  // ctest sets KILN_EXPECT_FAKE_HIP with LD_LIBRARY_PATH: there the stand-in
  // must be what is found.
  if (!fake && std::getenv("KILN_EXPECT_FAKE_HIP"))
    FAIL() << "libamdhip64.so on LD_LIBRARY_PATH is not the stand-in";
  if (!fake)
    GTEST_SKIP() << "run by ctest, with the stand-in libamdhip64.so on "
                    "LD_LIBRARY_PATH";
  fake->reset();
  fake->kernels = testKernelParams();
  EngineOptions options;
  options.weights = "synthetic:5";
  {
    auto engine = Engine::create(amdgcnArtifact(), options);
    EXPECT_EQ(engine->device(), "AMD Instinct MI355X (gfx950:sramecc+:xnack-, "
                                "256 compute units, 288.0 GiB, device 0)");
    EXPECT_EQ(fake->loadedImage, elfBytes(elfFor(kMachGfx950)));
    EXPECT_TRUE(fake->launches.empty());

    // Prefill: the poison launch has a grid of 0 blocks and is skipped.
    const std::vector<std::string> steps = {"kiln_embed", "kiln_append", "kiln_logits"};
    engine->prefill({7, 8, 9});
    ASSERT_EQ(kernelsOf(fake->launches), steps);
    const FakeLaunch &embed = fake->launches[0];
    EXPECT_EQ(embed.grid, 3u);
    EXPECT_EQ(embed.block, 256u);
    EXPECT_EQ(embed.values[kEmbedTokens], 3u);
    // The token ids buffer (the fake's device memory is host memory) holds
    // the uploaded prompt.
    const auto *ids = reinterpret_cast<const int32_t *>(embed.values[1]);
    EXPECT_EQ(std::vector<int32_t>(ids, ids + 3), (std::vector<int32_t>{7, 8, 9}));
    EXPECT_EQ(fake->launches[1].values[kAppendPast], 0u);
    EXPECT_EQ(fake->launches[1].values[kAppendTokens], 3u);
    EXPECT_EQ(fake->launches[2].grid, 8u);
    EXPECT_EQ(fake->launches[2].block, 128u);
    EXPECT_EQ(fake->launches[2].values[kLogitsTokens], 3u);

    // Decode: the first step runs directly, the second is recorded and
    // replayed, later ones replay with PastTokens updated.
    for (int step = 0; step < 4; ++step) {
      fake->launches.clear();
      engine->decode(10 + step);
      ASSERT_EQ(kernelsOf(fake->launches), steps) << "decode " << step;
      const uint64_t past = 3 + static_cast<uint64_t>(step);
      for (const FakeLaunch &launch : fake->launches)
        EXPECT_EQ(launch.replayed, step > 0) << "decode " << step;
      EXPECT_EQ(fake->launches[0].grid, 1u);
      EXPECT_EQ(fake->launches[1].values[kAppendPast], past);
      EXPECT_EQ(fake->launches[1].values[kAppendTokens], 1u);
      EXPECT_EQ(fake->launches[2].values[kLogitsPast], past);
      const auto *id = reinterpret_cast<const int32_t *>(fake->launches[0].values[1]);
      EXPECT_EQ(*id, 10 + step);
    }
    // The append and logits nodes, for the third and fourth steps.
    EXPECT_EQ(fake->nodeUpdates, 4);
    EXPECT_EQ(engine->pastTokens(), 7);
  }
  // Everything the engine allocated is freed, the graph destroyed.
  EXPECT_EQ(fake->liveAllocations, 0);
  EXPECT_EQ(fake->graphsAlive, 0);
}

} // namespace
} // namespace kiln
