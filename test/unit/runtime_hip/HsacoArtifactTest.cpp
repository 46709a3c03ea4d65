// The amdgcn parts of the artifact contract that need no GPU: what the loader
// checks of an hsaco library (its ELF64 header: magic, class, e_machine, the
// processor in e_flags against target.chip; Artifact.cpp), the amdgcn rules
// the HIP backend checks before it looks for a runtime (checkAmdgcnArtifact),
// and which devices a chip runs on.
#include "runtime/hip/AmdgcnArtifact.h"

#include "runtime/cpu/RuntimeError.h"

#include "test/unit/runtime_hip/AmdgcnTestArtifact.h"

#include <gtest/gtest.h>

namespace kiln {
namespace {

using namespace kiln::hip_test;

std::string loadError(const TestArtifact &a) {
  return errorOf([&] { amdgcnArtifact(a); });
}

std::string blobError(const ElfHeader &header, const std::string &chip, size_t extra = 0) {
  return loadError(amdgcnTestArtifact(elfBytes(header, extra), chip));
}

const std::string kBut = "gpu.kiln: artifact is for amdgcn gfx950, but "
                         "library.blob ";

TEST(HsacoArtifactTest, AcceptsAWellFormedHeaderForEachChip) {
  const Artifact gfx950 = amdgcnArtifact();
  EXPECT_EQ(gfx950->target()->kind(), fb::TargetKind::AMDGCN);
  EXPECT_EQ(gfx950->library()->format()->str(), "hsaco");
  EXPECT_NO_THROW(checkAmdgcnArtifact(gfx950));
  EXPECT_NO_THROW(
      amdgcnArtifact(amdgcnTestArtifact(elfBytes(elfFor(kMachGfx942), 4096), "gfx942")));
  // The feature bits beside the processor do not matter to the loader.
  ElfHeader plain = elfFor(kMachGfx950);
  plain.flags = kMachGfx950;
  EXPECT_NO_THROW(amdgcnArtifact(amdgcnTestArtifact(elfBytes(plain))));
}

TEST(HsacoArtifactTest, RefusesWhatIsNotAnElfFile) {
  ElfHeader header = elfFor(kMachGfx950);
  header.magic[1] = 'X';
  EXPECT_EQ(blobError(header, "gfx950"),
            kBut + "is not an ELF file (it starts with 0x7f 0x58 0x4c 0x46, "
                   "not the magic 0x7f 'E' 'L' 'F'): an amdgcn library is an "
                   "hsaco code object");
  // PTX text where the code object should be.
  TestArtifact ptx = amdgcnTestArtifact(ptxBlob(kNvptxTestKernels));
  EXPECT_HAS(loadError(ptx), "is not an ELF file (it starts with 0x0a 0x2e "
                             "0x76 0x65");
  TestArtifact tiny = amdgcnTestArtifact({0x7f, 'E', 'L'});
  EXPECT_HAS(loadError(tiny), "is not an ELF file (it starts with 0x7f 0x45 "
                              "0x4c, not");
  // The magic, but cut short.
  std::vector<uint8_t> cut = elfBytes(elfFor(kMachGfx950));
  cut.resize(40);
  EXPECT_EQ(loadError(amdgcnTestArtifact(cut)),
            kBut + "is 40 bytes, shorter than an ELF64 header (64)");
}

TEST(HsacoArtifactTest, RefusesAnotherClassOrByteOrder) {
  ElfHeader header = elfFor(kMachGfx950);
  header.elfClass = 1;
  EXPECT_EQ(blobError(header, "gfx950"), kBut + "is not ELF64 (EI_CLASS 1, expected 2)");
  header = elfFor(kMachGfx950);
  header.data = 2;
  EXPECT_EQ(blobError(header, "gfx950"), kBut + "is not little-endian ELF (EI_DATA 2, expected 1)");
}

TEST(HsacoArtifactTest, RefusesAnotherMachine) {
  ElfHeader header = elfFor(kMachGfx950);
  header.machine = 62; // EM_X86_64
  EXPECT_EQ(blobError(header, "gfx950"), kBut +
                                             "is not AMDGPU code (e_machine 62, expected EM_AMDGPU "
                                             "224)");
  header.machine = 190; // EM_CUDA
  EXPECT_HAS(blobError(header, "gfx950"), "(e_machine 190, expected");
}

TEST(HsacoArtifactTest, RefusesAnObjectForAnotherRuntimeOrUnlinked) {
  ElfHeader header = elfFor(kMachGfx950);
  header.osAbi = 66; // ELFOSABI_AMDGPU_MESA3D
  EXPECT_EQ(blobError(header, "gfx950"), kBut + "is not an HSA code object (EI_OSABI 66, expected "
                                                "ELFOSABI_AMDGPU_HSA 64)");
  header = elfFor(kMachGfx950);
  header.type = 1; // ET_REL: llc's output before ld.lld
  EXPECT_EQ(blobError(header, "gfx950"),
            kBut + "is not a linked code object (e_type 1, expected ET_DYN 3: "
                   "link llc's object with ld.lld -shared)");
}

TEST(HsacoArtifactTest, TheProcessorMustBeTheTargetChip) {
  EXPECT_EQ(blobError(elfFor(kMachGfx942), "gfx950"),
            kBut + "is code for gfx942 (EF_AMDGPU_MACH 0x4c), not for gfx950 "
                   "(EF_AMDGPU_MACH 0x4f)");
  EXPECT_EQ(blobError(elfFor(kMachGfx950), "gfx942"),
            "gpu.kiln: artifact is for amdgcn gfx942, but library.blob is "
            "code for gfx950 (EF_AMDGPU_MACH 0x4f), not for gfx942 "
            "(EF_AMDGPU_MACH 0x4c)");
  EXPECT_HAS(blobError(elfFor(0x3f), "gfx950"),
             "is code for gfx90a (EF_AMDGPU_MACH 0x3f), not for gfx950");
  EXPECT_HAS(blobError(elfFor(0x5f), "gfx950"), "is code for gfx9-4-generic (EF_AMDGPU_MACH 0x5f)");
  EXPECT_HAS(blobError(elfFor(0x2a), "gfx950"), "is code for EF_AMDGPU_MACH 0x2a, not for gfx950");
  EXPECT_EQ(blobError(elfFor(0x36), "gfx1030"),
            "gpu.kiln: artifact is for amdgcn gfx1030, but this runtime does "
            "not know the amdgcn chip 'gfx1030' (it runs gfx942, gfx950, gfx1100)");
  // A chip of the table (runtime/core/Chips.def) is known by its machine.
  EXPECT_EQ(blobError(elfFor(0x41), "gfx950"),
            kBut + "is code for gfx1100 (EF_AMDGPU_MACH 0x41), not for gfx950 "
                   "(EF_AMDGPU_MACH 0x4f)");
}

TEST(HsacoArtifactTest, TheFormatIsHsaco) {
  TestArtifact a = amdgcnTestArtifact();
  a.libraryFormat = "ptx";
  EXPECT_EQ(loadError(a), "gpu.kiln: library.format 'ptx' is not the amdgcn "
                          "kernel format (expected 'hsaco')");
}

TEST(HsacoArtifactTest, AnArtifactWithoutKernelsMayHaveNoBlob) {
  TestArtifact a = amdgcnTestArtifact({});
  a.kernels.clear();
  for (TestEntryPoint &entry : a.entryPoints)
    entry.steps = {std::get<TestCopy>(entry.steps[1])};
  EXPECT_NO_THROW(amdgcnArtifact(a));
}

TEST(HsacoArtifactTest, AcceptsWhatLlvmMakesForEachChip) {
  if (!haveAmdgpuTools())
    GTEST_SKIP() << "no llc / ld.lld with amdgcn here";
  for (const char *chip : {"gfx942", "gfx950"}) {
    std::string error;
    const std::vector<uint8_t> hsaco = compileHsaco(chip, error);
    ASSERT_FALSE(hsaco.empty()) << error;
    EXPECT_NO_THROW(amdgcnArtifact(amdgcnTestArtifact(hsaco, chip))) << chip;
    const char *other = std::string(chip) == "gfx942" ? "gfx950" : "gfx942";
    EXPECT_HAS(loadError(amdgcnTestArtifact(hsaco, other)),
               "library.blob is code for " + std::string(chip));
  }
}

// --- the amdgcn rules (checkAmdgcnArtifact) ---------------------------------

std::string ruleError(const TestArtifact &a) {
  const Artifact artifact = amdgcnArtifact(a);
  return errorOf([&] { checkAmdgcnArtifact(artifact); });
}

TEST(HsacoArtifactTest, FeaturesMustBeKnown) {
  TestArtifact a = amdgcnTestArtifact();
  a.features = {"+xnack", "-sramecc", "+wavefrontsize64", "cumode"};
  EXPECT_NO_THROW(checkAmdgcnArtifact(amdgcnArtifact(a)));
  a.features = {"+xnack", "+wavefrontsize32", "-wavefrontsize64", "+avx2"};
  EXPECT_EQ(ruleError(a), "gpu.kiln: artifact is for amdgcn gfx950 (+xnack, "
                          "+wavefrontsize32, -wavefrontsize64, +avx2), but this runtime "
                          "does not know the amdgcn feature(s) +wavefrontsize32, "
                          "-wavefrontsize64, +avx2");
}

TEST(HsacoArtifactTest, LaunchesNeedAShapeAndNoParts) {
  TestArtifact a = amdgcnTestArtifact();
  std::get<TestLaunch>(a.entryPoints[1].steps[0]).scalars.push_back({fb::ScalarKind::Part, 0});
  EXPECT_EQ(ruleError(a), "gpu.kiln: artifact is for amdgcn gfx950, but entry point "
                          "'decode', steps[0] (launch of 'kiln_embed', op "
                          "'model.embed_tokens') takes a Part scalar (scalars[1]): GPU "
                          "kernels derive their part from their block and thread indices");
  // Without a launch shape (serialised without the GPU fields).
  const Artifact bare = Artifact::fromBytes(serializeGpu(amdgcnTestArtifact(), {}), "gpu.kiln");
  EXPECT_HAS(errorOf([&] { checkAmdgcnArtifact(bare); }),
             "op 'model.embed_tokens') has no grid (GPU launches need "
             "Launch.grid and Launch.block)");
}

TEST(HsacoArtifactTest, ChipsMustBeKnown) {
  // The loader passes an unknown chip without a blob to check; the rules
  // refuse it.
  TestArtifact a = amdgcnTestArtifact({}, "gfx1030");
  a.kernels.clear();
  for (TestEntryPoint &entry : a.entryPoints)
    entry.steps = {std::get<TestCopy>(entry.steps[1])};
  EXPECT_EQ(ruleError(a), "gpu.kiln: artifact is for amdgcn gfx1030, but this runtime does "
                          "not know the chip 'gfx1030' (amdgcn chips are gfx942, "
                          "gfx950, gfx1100)");
  EXPECT_TRUE(isKnownAmdgcnChip("gfx942"));
  EXPECT_TRUE(isKnownAmdgcnChip("gfx950"));
  EXPECT_TRUE(isKnownAmdgcnChip("gfx1100"));
  EXPECT_FALSE(isKnownAmdgcnChip("sm_90a"));
  EXPECT_FALSE(isKnownAmdgcnChip("gfx90a"));
  EXPECT_FALSE(isKnownAmdgcnChip("gfx942:xnack-"));
}

TEST(HsacoArtifactTest, WhichDevicesAChipRunsOn) {
  TestArtifact a = amdgcnTestArtifact();
  auto support = [&](const char *gcnArchName) {
    return amdgcnChipSupport(*amdgcnArtifact(a)->target(), gcnArchName);
  };
  EXPECT_EQ(support("gfx950:sramecc+:xnack-"), "");
  EXPECT_EQ(support("gfx950"), "");
  EXPECT_EQ(support("gfx942:sramecc+:xnack-"), "gfx950 code runs only on gfx950 devices");
  EXPECT_EQ(support("gfx9500"), "gfx950 code runs only on gfx950 devices");
  // XNACK and SRAMECC: code built for one setting runs only where the device
  // has it; without the features the code object runs on either ("any").
  a.features = {"+xnack", "+sramecc"};
  EXPECT_EQ(support("gfx950:sramecc+:xnack-"), "its code needs xnack+ (feature +xnack)");
  EXPECT_EQ(support("gfx950:sramecc+:xnack+"), "");
  EXPECT_EQ(support("gfx950"), "its code needs xnack+ (feature +xnack)");
  a.features = {"-sramecc"};
  EXPECT_EQ(support("gfx950:sramecc+:xnack-"), "its code needs sramecc- (feature -sramecc)");
  EXPECT_EQ(support("gfx950:sramecc-:xnack-"), "");
}

} // namespace
} // namespace kiln
