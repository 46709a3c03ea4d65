// The GPU backend over the HIP driver table, against the stand-in runtime
// (FakeHip.h, loaded from KILN_FAKE_HIP): the device checks, memory, the code
// object, launch parameters (the same bytes as a CUDA launch's), errors that
// name the launch and stop the backend, and recording a HIP graph whose
// kernel nodes are updated and replayed.
#include "runtime/gpu/GpuGraph.h"
#include "runtime/hip/HipDriverTable.h"

#include "test/unit/runtime_hip/AmdgcnTestArtifact.h"
#include "test/unit/runtime_hip/FakeHip.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <dlfcn.h>

namespace kiln {
namespace {

using namespace kiln::hip_test;

BufferArgument buffer(DeviceAddress address, std::vector<int64_t> sizes) {
  BufferArgument argument;
  argument.address = address;
  argument.rank = static_cast<int>(sizes.size());
  for (size_t d = 0; d < sizes.size(); ++d)
    argument.sizes[d] = sizes[d];
  return argument;
}

// kiln_logits: [K f32 [slots, 1, H], lm_head bf16 [V, H], logits f32 [1, V]];
// PastTokens, Tokens.
LaunchSpec logitsSpec() {
  LaunchSpec spec;
  spec.kernel = 2;
  spec.where = "entry point 'decode', steps[3] (launch of 'kiln_logits', op "
               "'lm_head')";
  spec.ranks = {3, 2, 2};
  spec.scalarKinds = {fb::ScalarKind::PastTokens, fb::ScalarKind::Tokens};
  spec.block = 128;
  spec.maxGrid = 8;
  return spec;
}

struct LogitsCall {
  BufferArgument buffers[3] = {buffer(0x7f0000001000, {4096, 1, 256}),
                               buffer(0x7f0000200000, {1024, 256}),
                               buffer(0x7f0000300040, {1, 1024})};
  int64_t scalars[2] = {5, 1};
  LaunchCall call() const {
    LaunchCall result;
    result.buffers = buffers;
    result.scalars = scalars;
    result.grid = 8;
    return result;
  }
  std::vector<uint64_t> expected() const {
    std::vector<uint64_t> values(gpu::kernelParamCount({3, 2, 2}, 2));
    gpu::packKernelParams(buffers, 3, scalars, 2, values.data());
    return values;
  }
};

class HipBackendTest : public ::testing::Test {
protected:
  void SetUp() override {
    void *handle = ::dlopen(KILN_FAKE_HIP, RTLD_NOW | RTLD_LOCAL);
    ASSERT_NE(handle, nullptr) << ::dlerror();
    auto *state = reinterpret_cast<FakeHip *(*)()>(::dlsym(handle, "kilnFakeHip"));
    ASSERT_NE(state, nullptr);
    fake_ = state();
    fake_->reset();
    fake_->kernels = testKernelParams();
  }

  FakeHip &fake() { return *fake_; }

  std::unique_ptr<gpu::GpuBackend> create(const Artifact &artifact, int device = 0) {
    return createHipBackend(artifact, device, KILN_FAKE_HIP);
  }

  std::string createError(const Artifact &artifact, int device = 0) {
    return errorOf([&] { create(artifact, device); });
  }

  const std::string library_ = KILN_FAKE_HIP;

private:
  FakeHip *fake_ = nullptr;
};

TEST_F(HipBackendTest, DescribesTheDevice) {
  const auto backend = create(amdgcnArtifact());
  EXPECT_EQ(backend->description(),
            "AMD Instinct MI355X (gfx950:sramecc+:xnack-, 256 compute units, "
            "288.0 GiB, device 0)");
  const auto &table = static_cast<const hip::HipDriverTable &>(backend->table());
  EXPECT_EQ(table.warpSize(), 64);
  EXPECT_EQ(table.device().maxThreadsPerBlock, 1024);
  EXPECT_EQ(table.device().multiprocessors, 256);
  EXPECT_EQ(table.device().defaultSharedBytes, 65536u);
  EXPECT_EQ(table.driver().versionText(), "5.2");
  EXPECT_TRUE(backend->canRecord());
}

TEST_F(HipBackendTest, RefusesAnotherChipNamingBoth) {
  fake().name = "AMD Instinct MI300X";
  fake().gcnArchName = "gfx942:sramecc+:xnack-";
  EXPECT_EQ(createError(amdgcnArtifact()),
            "gpu.kiln: artifact is for amdgcn gfx950, which this machine "
            "cannot run: device 0 (AMD Instinct MI300X) is "
            "gfx942:sramecc+:xnack-; gfx950 code runs only on gfx950 "
            "devices (rebuild it for this machine's chip: kilnc --target)");
  // The gfx942 build of the same model runs there.
  EXPECT_NO_THROW(
      create(amdgcnArtifact(amdgcnTestArtifact(elfBytes(elfFor(kMachGfx942)), "gfx942"))));
}

TEST_F(HipBackendTest, RefusesAnXnackModeTheDeviceLacks) {
  TestArtifact a = amdgcnTestArtifact();
  a.features = {"+xnack"};
  EXPECT_EQ(createError(amdgcnArtifact(a)),
            "gpu.kiln: artifact is for amdgcn gfx950 (+xnack), which this "
            "machine cannot run: device 0 (AMD Instinct MI355X) is "
            "gfx950:sramecc+:xnack-; its code needs xnack+ (feature +xnack) "
            "(rebuild it for this machine's chip: kilnc --target)");
}

TEST_F(HipBackendTest, NoDeviceIsOneLine) {
  fake().deviceCount = 0;
  EXPECT_EQ(createError(amdgcnArtifact()),
            "gpu.kiln: no AMD GPU (" + library_ +
                ": hipGetDeviceCount found none): this artifact is for amdgcn "
                "gfx950");
  fake().reset();
  fake().initResult = 101; // what HIP 5.2 says without a GPU
  EXPECT_EQ(createError(amdgcnArtifact()),
            "gpu.kiln: no AMD GPU (" + library_ +
                ": hipInit: hipErrorInvalidDevice): this artifact is for "
                "amdgcn gfx950");
  fake().initResult = 999;
  EXPECT_EQ(createError(amdgcnArtifact()),
            "gpu.kiln: the HIP runtime (" + library_ +
                ") does not start (hipInit: hipErrorUnknown): this artifact "
                "is for amdgcn gfx950");
}

TEST_F(HipBackendTest, RefusesADeviceItDoesNotHave) {
  EXPECT_EQ(createError(amdgcnArtifact(), 2),
            "gpu.kiln: no AMD GPU 2 (this machine has 1, 0..0): this "
            "artifact is for amdgcn gfx950");
}

TEST_F(HipBackendTest, RefusesPropertiesWithoutAnArchitecture) {
  fake().gcnArchName = "";
  EXPECT_EQ(createError(amdgcnArtifact()),
            "gpu.kiln: AMD GPU 0: hipGetDeviceProperties gave no gfx "
            "architecture name (this runtime reads HIP 5's hipDeviceProp_t, "
            "which the HIP runtime 5.2 (" +
                library_ + ") does not seem to keep)");
}

TEST_F(HipBackendTest, MemoryIsZeroedAndMovesInOrder) {
  const auto backend = create(amdgcnArtifact());
  const DeviceAddress a = backend->allocate(64, "a");
  const DeviceAddress b = backend->allocate(64, "b");
  EXPECT_EQ(fake().liveAllocations, 2);
  EXPECT_EQ(backend->allocate(0, "nothing"), 0u);
  std::vector<uint8_t> bytes(64, 0xff);
  backend->download(bytes.data(), a, 64);
  EXPECT_EQ(bytes, std::vector<uint8_t>(64, 0));
  std::vector<uint8_t> pattern(64);
  for (size_t i = 0; i < pattern.size(); ++i)
    pattern[i] = static_cast<uint8_t>(i);
  backend->upload(a, pattern.data(), 64);
  backend->copy(b, a, 64);
  backend->fill(b + 8, 0xee, 8);
  backend->download(bytes.data(), b, 64);
  std::vector<uint8_t> expected = pattern;
  std::fill(expected.begin() + 8, expected.begin() + 16, 0xee);
  EXPECT_EQ(bytes, expected);
  backend->release(a);
  backend->release(b);
  backend->release(0);
  EXPECT_EQ(fake().liveAllocations, 0);
}

TEST_F(HipBackendTest, LoadsTheCodeObjectAndEveryKernel) {
  const Artifact artifact = amdgcnArtifact();
  const auto backend = create(artifact);
  backend->loadKernels(artifact);
  EXPECT_EQ(fake().loadedImage, elfBytes(elfFor(kMachGfx950)));
}

TEST_F(HipBackendTest, AMissingKernelIsAnErrorAtLoad) {
  fake().kernels.erase("kiln_poison");
  const Artifact artifact = amdgcnArtifact();
  const auto backend = create(artifact);
  EXPECT_EQ(errorOf([&] { backend->loadKernels(artifact); }),
            "gpu.kiln: kernel 'kiln_poison' (not in the code object?): "
            "hipModuleGetFunction: hipErrorNotFound");
}

TEST_F(HipBackendTest, ACodeObjectHipRefusesNamesTheTargetAndDevice) {
  fake().moduleLoadResult = 209;
  const Artifact artifact = amdgcnArtifact();
  const auto backend = create(artifact);
  EXPECT_EQ(errorOf([&] { backend->loadKernels(artifact); }),
            "gpu.kiln: loading the code object for amdgcn gfx950 on AMD "
            "Instinct MI355X (gfx950:sramecc+:xnack-): hipModuleLoadData: "
            "hipErrorNoBinaryForGpu");
}

TEST_F(HipBackendTest, LaunchPassesTheSameBytesAsCuda) {
  const Artifact artifact = amdgcnArtifact();
  const auto backend = create(artifact);
  backend->loadKernels(artifact);
  const auto prepared = backend->prepare(logitsSpec());
  const LogitsCall logits;
  backend->launch(*prepared, logits.call());
  ASSERT_EQ(fake().launches.size(), 1u);
  const FakeLaunch &launch = fake().launches[0];
  EXPECT_EQ(launch.kernel, "kiln_logits");
  EXPECT_EQ(launch.grid, 8u);
  EXPECT_EQ(launch.block, 128u);
  EXPECT_FALSE(launch.replayed);
  EXPECT_EQ(launch.values, logits.expected());
}

TEST_F(HipBackendTest, PrepareChecksBlockAndGrid) {
  fake().kernelMaxThreads = 256;
  const Artifact artifact = amdgcnArtifact();
  const auto backend = create(artifact);
  backend->loadKernels(artifact);
  const std::string where = "gpu.kiln: entry point 'decode', steps[3] (launch of 'kiln_logits', op "
                            "'lm_head')";
  LaunchSpec spec = logitsSpec();
  spec.block = 512;
  EXPECT_EQ(errorOf([&] { backend->prepare(spec); }),
            where + ": a block of 512 threads, but the compiled kernel takes "
                    "at most 256 on AMD Instinct MI355X, device 0 (its "
                    "amdgpu-flat-work-group-size)");
  spec.block = 2048;
  EXPECT_EQ(errorOf([&] { backend->prepare(spec); }),
            where + ": a block of 2048 threads; AMD Instinct MI355X, device 0 "
                    "allows 1..1024");
  spec.block = 256;
  spec.maxGrid = int64_t{1} << 31;
  EXPECT_EQ(errorOf([&] { backend->prepare(spec); }),
            where + ": a grid of 2147483648 blocks at max_tokens; AMD "
                    "Instinct MI355X, device 0 allows at most 2147483647");
  spec.maxGrid = (int64_t{1} << 31) - 1;
  EXPECT_EQ(errorOf([&] { backend->prepare(spec); }),
            where + ": a grid of 2147483647 blocks of 256 threads at "
                    "max_tokens; HIP launches at most 4294967295 threads "
                    "along x");
  spec.maxGrid = 8;
  spec.scalarKinds.push_back(fb::ScalarKind::Part);
  EXPECT_EQ(errorOf([&] { backend->prepare(spec); }),
            where + ": GPU launches take no Part or Parts scalar");
}

TEST_F(HipBackendTest, SharedBytesAreTheLaunchesDynamicLds) {
  const Artifact artifact = amdgcnArtifact();
  const auto backend = create(artifact);
  backend->loadKernels(artifact);
  LaunchSpec spec = logitsSpec();
  spec.sharedBytes = 32768;
  const auto prepared = backend->prepare(spec);
  LogitsCall call;
  backend->launch(*prepared, call.call());
  ASSERT_EQ(fake().launches.size(), 1u);
  EXPECT_EQ(fake().launches[0].sharedBytes, 32768u);
  // Recorded, and kept when a node's parameters are updated.
  std::unique_ptr<Recording> recording =
      backend->record([&] { backend->launch(*prepared, call.call()); });
  call.scalars[0] = 6;
  recording->update(*prepared, call.call());
  EXPECT_EQ(fake().nodeUpdates, 1);
  recording->replay();
  backend->synchronize();
  ASSERT_EQ(fake().launches.size(), 2u);
  EXPECT_TRUE(fake().launches[1].replayed);
  EXPECT_EQ(fake().launches[1].sharedBytes, 32768u);
  EXPECT_EQ(fake().launches[1].values[23], 6u);

  spec.sharedBytes = 65537;
  EXPECT_EQ(errorOf([&] { backend->prepare(spec); }),
            "gpu.kiln: entry point 'decode', steps[3] (launch of 'kiln_logits', op "
            "'lm_head'): 65537 bytes of dynamic shared memory, but kernel 'kiln_logits' was "
            "loaded for at most 65536 (its Kernel.shared_bytes, or the device's default)");
}

TEST_F(HipBackendTest, RefusesTensorMaps) {
  const Artifact artifact = amdgcnArtifact();
  const auto backend = create(artifact);
  backend->loadKernels(artifact);
  const std::string expected =
      "gpu.kiln: entry point 'decode', steps[3] (launch of 'kiln_logits', op 'lm_head'): "
      "TensorMap scalars are CUDA tensor maps, for nvptx artifacts; AMD GPUs have none";
  LaunchSpec spec = logitsSpec();
  spec.scalarKinds.push_back(fb::ScalarKind::TensorMap);
  EXPECT_EQ(errorOf([&] { backend->prepare(spec); }), expected);
  spec = logitsSpec();
  spec.tensorMaps.push_back({1, DType::BF16, {64, 64}, 128});
  EXPECT_EQ(errorOf([&] { backend->prepare(spec); }), expected);
}

TEST_F(HipBackendTest, ALaunchErrorNamesTheLaunchAndStopsTheBackend) {
  const Artifact artifact = amdgcnArtifact();
  const auto backend = create(artifact);
  backend->loadKernels(artifact);
  const auto prepared = backend->prepare(logitsSpec());
  fake().launchResult = 719;
  const LogitsCall logits;
  const std::string message = errorOf([&] { backend->launch(*prepared, logits.call()); });
  EXPECT_EQ(message, "gpu.kiln: entry point 'decode', steps[3] (launch of "
                     "'kiln_logits', op 'lm_head'): hipModuleLaunchKernel: "
                     "hipErrorLaunchFailure: unspecified launch failure");
  fake().launchResult = 0;
  EXPECT_EQ(errorOf([&] { backend->allocate(64, "more"); }),
            "an earlier HIP error stopped this engine: " + message);
  EXPECT_EQ(errorOf([&] { backend->synchronize(); }),
            "an earlier HIP error stopped this engine: " + message);
}

TEST_F(HipBackendTest, RecordsUpdatesAndReplaysAGraph) {
  const Artifact artifact = amdgcnArtifact();
  const auto backend = create(artifact);
  backend->loadKernels(artifact);
  const auto logits = backend->prepare(logitsSpec());
  LaunchSpec poisonSpec;
  poisonSpec.kernel = 3;
  poisonSpec.where = "poison";
  poisonSpec.ranks = {2};
  poisonSpec.block = 32;
  poisonSpec.maxGrid = 1;
  const auto poison = backend->prepare(poisonSpec);
  const DeviceAddress a = backend->allocate(16, "a");
  const DeviceAddress b = backend->allocate(16, "b");
  const uint8_t ones[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1};
  backend->upload(a, ones, 16);

  LogitsCall call;
  const BufferArgument out = buffer(0x1000, {1, 1024});
  LaunchCall poisonCall;
  poisonCall.buffers = &out;
  std::unique_ptr<Recording> recording = backend->record([&] {
    backend->launch(*logits, call.call());
    backend->copy(b, a, 16);
    backend->launch(*poison, poisonCall);
  });
  // Captured, not run.
  EXPECT_TRUE(fake().launches.empty());
  uint8_t bytes[16] = {};
  backend->download(bytes, b, 16);
  EXPECT_EQ(bytes[0], 0);

  recording->replay();
  backend->synchronize();
  ASSERT_EQ(fake().launches.size(), 2u);
  EXPECT_TRUE(fake().launches[0].replayed);
  EXPECT_EQ(fake().launches[0].values, call.expected());
  EXPECT_EQ(fake().launches[1].kernel, "kiln_poison");
  backend->download(bytes, b, 16);
  EXPECT_EQ(bytes[15], 1);

  // The next decode step: PastTokens moved on.
  call.scalars[0] = 6;
  recording->update(*logits, call.call());
  EXPECT_EQ(fake().nodeUpdates, 1);
  recording->update(*logits, call.call()); // unchanged: nothing to do
  EXPECT_EQ(fake().nodeUpdates, 1);
  auto &graph = static_cast<gpu::GpuGraph &>(*recording);
  EXPECT_EQ(graph.numLaunches(), 2u);
  EXPECT_EQ(graph.numUpdates(), 1u);
  recording->replay();
  ASSERT_EQ(fake().launches.size(), 4u);
  EXPECT_EQ(fake().launches[2].values, call.expected());
  EXPECT_EQ(fake().launches[2].values[23], 6u);
  EXPECT_THROW(recording->update(*backend->prepare(logitsSpec()), call.call()), std::logic_error);

  recording.reset();
  EXPECT_EQ(fake().graphsAlive, 0);
  backend->release(a);
  backend->release(b);
}

TEST_F(HipBackendTest, AFailedRecordingLeavesNoCapture) {
  const Artifact artifact = amdgcnArtifact();
  const auto backend = create(artifact);
  backend->loadKernels(artifact);
  const auto logits = backend->prepare(logitsSpec());
  const LogitsCall call;
  EXPECT_THROW(backend->record([&] {
    backend->launch(*logits, call.call());
    throw RuntimeError("a step failed");
  }),
               RuntimeError);
  EXPECT_EQ(fake().graphsAlive, 0);
  // The stream runs work again.
  backend->launch(*logits, call.call());
  EXPECT_EQ(fake().launches.size(), 1u);
}

TEST_F(HipBackendTest, LaunchBlockingTurnsRecordingOff) {
  const auto backend = create(amdgcnArtifact());
  ::setenv("HIP_LAUNCH_BLOCKING", "1", 1);
  EXPECT_FALSE(backend->canRecord());
  ::unsetenv("HIP_LAUNCH_BLOCKING");
  EXPECT_TRUE(backend->canRecord());
}

} // namespace
} // namespace kiln
