// The CPU backend on its own: memory that is the process's own (adopted
// without a copy), ordered uploads, fills and copies, and the refusal of
// other targets.
#include "runtime/engine/CpuBackend.h"

#include "runtime/cpu/RuntimeError.h"
#include "runtime/cpu/ThreadPool.h"

#include "test/unit/artifact/ArtifactTestUtil.h"

#include <gtest/gtest.h>

#include <cstring>

namespace kiln {
namespace {

using namespace kiln::artifact_test;

Artifact sseArtifact() {
  TestArtifact a = minimalArtifact();
  a.features = {"sse2"};
  return Artifact::fromBytes(serialize(a), "test.kiln");
}

TEST(CpuBackendTest, MemoryIsTheProcesss) {
  ThreadPool pool(2);
  auto backend = CpuBackend::create(sseArtifact(), pool);
  EXPECT_EQ(backend->description(), "CPU (2 threads)");
  EXPECT_FALSE(backend->canRecord());
  EXPECT_EQ(backend->allocate(0, "nothing"), 0u);

  DeviceMemory a = DeviceMemory::allocate(*backend, 100, "a");
  DeviceMemory b = DeviceMemory::allocate(*backend, 100, "b");
  ASSERT_NE(a.address(), 0u);
  EXPECT_EQ(a.address() % AlignedBuffer::kAlignment, 0u);
  const auto *bytes = reinterpret_cast<const uint8_t *>(a.address());
  for (int i = 0; i < 100; ++i)
    ASSERT_EQ(bytes[i], 0) << i;

  const char text[] = "kiln";
  backend->upload(a.address() + 10, text, sizeof text);
  backend->fill(a.address(), 'x', 3);
  backend->copy(b.address(), a.address(), 20);
  char back[20];
  backend->download(back, b.address(), sizeof back);
  EXPECT_EQ(std::memcmp(back, "xxx\0\0\0\0\0\0\0kiln", 15), 0);

  // Adopted memory keeps its address: no copy.
  AlignedBuffer host(64, "host");
  host.data()[5] = 42;
  const DeviceAddress where = reinterpret_cast<uintptr_t>(host.data());
  DeviceMemory adopted(*backend, backend->adopt(std::move(host), "w"), 64);
  EXPECT_EQ(adopted.address(), where);
  EXPECT_EQ(reinterpret_cast<const uint8_t *>(adopted.address())[5], 42);
}

TEST(CpuBackendTest, RefusesGpuLaunchFeatures) {
  // Dynamic shared memory and tensor maps: the artifact's checks keep them
  // out of x86 artifacts; a LaunchSpec with them is refused all the same.
  ThreadPool pool(1);
  auto backend = CpuBackend::create(sseArtifact(), pool);
  LaunchSpec spec;
  spec.where = "entry point 'decode', steps[0]";
  spec.ranks = {2};
  spec.sharedBytes = 1024;
  auto error = [&] {
    try {
      backend->prepare(spec);
    } catch (const RuntimeError &error) {
      return std::string(error.what());
    }
    return std::string("nothing thrown");
  };
  EXPECT_EQ(error(), "entry point 'decode', steps[0]: 1024 bytes of dynamic shared memory, "
                     "which x86 kernels do not have");
  spec.sharedBytes = 0;
  spec.scalarKinds = {fb::ScalarKind::TensorMap};
  EXPECT_EQ(error(), "entry point 'decode', steps[0]: TensorMap scalars are CUDA tensor maps, "
                     "for nvptx artifacts; x86 kernels take none");
}

TEST(CpuBackendTest, RefusesOtherTargets) {
  TestArtifact a = minimalArtifact();
  a.targetKind = fb::TargetKind::NVPTX;
  a.libraryFormat = "ptx";
  a.chip = "sm_90";
  a.features = {};
  ThreadPool pool(1);
  try {
    CpuBackend::create(Artifact::fromBytes(serialize(a), "gpu.kiln"), pool);
    ADD_FAILURE() << "nothing thrown";
  } catch (const std::exception &error) {
    EXPECT_NE(std::string(error.what()).find("artifact is for nvptx sm_90"), std::string::npos)
        << error.what();
  }
}

} // namespace
} // namespace kiln
