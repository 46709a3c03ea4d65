// Building amdgcn artifacts in tests: the nvptx test model
// (test/unit/runtime_cuda/NvptxTestArtifact.h) retargeted to amdgcn, with a
// library blob that is either a hand-made 64-byte ELF64 header (what the
// loader reads of an hsaco) or a real code object compiled from
// kAmdgcnTestKernels, the same four kernels in LLVM IR, by llc and ld.lld
// where the build found them (KILN_TEST_AMDGPU_LLC, KILN_TEST_AMDGPU_LLD).
#pragma once

#include "test/unit/runtime_cuda/NvptxTestArtifact.h"

#include <cstdlib>
#include <fstream>
#include <iterator>
#include <map>
#include <sstream>
#include <string>
#include <unistd.h>
#include <vector>

namespace kiln::hip_test {

using namespace kiln::cuda_test;

// The fields of an ELF64 header that matter to an hsaco's check; the others
// are written as a linker would (e_version 1, e_ehsize 64).
struct ElfHeader {
  uint8_t magic[4] = {0x7f, 'E', 'L', 'F'};
  uint8_t elfClass = 2;   // ELFCLASS64
  uint8_t data = 1;       // ELFDATA2LSB
  uint8_t osAbi = 64;     // ELFOSABI_AMDGPU_HSA
  uint8_t abiVersion = 3; // code object v5
  uint16_t type = 3;      // ET_DYN
  uint16_t machine = 224; // EM_AMDGPU
  uint32_t flags = 0x54f; // gfx950, XNACK and SRAMECC "any"
};

// EF_AMDGPU_MACH values (llvm/BinaryFormat/ELF.h).
constexpr uint32_t kMachGfx942 = 0x4c, kMachGfx950 = 0x4f;

inline ElfHeader elfFor(uint32_t mach) {
  ElfHeader header;
  header.flags = 0x500 | mach;
  return header;
}

// The header's 64 bytes, followed by `extra` zero bytes.
inline std::vector<uint8_t> elfBytes(const ElfHeader &header, size_t extra = 0) {
  std::vector<uint8_t> bytes(64 + extra, 0);
  auto put = [&](size_t offset, uint64_t value, size_t width) {
    for (size_t i = 0; i < width; ++i)
      bytes[offset + i] = static_cast<uint8_t>(value >> (8 * i));
  };
  for (size_t i = 0; i < 4; ++i)
    bytes[i] = header.magic[i];
  bytes[4] = header.elfClass;
  bytes[5] = header.data;
  bytes[6] = 1; // EI_VERSION
  bytes[7] = header.osAbi;
  bytes[8] = header.abiVersion;
  put(16, header.type, 2);
  put(18, header.machine, 2);
  put(20, 1, 4); // e_version
  put(48, header.flags, 4);
  put(52, 64, 2); // e_ehsize
  return bytes;
}

// The test model for amdgcn `chip` with `blob` as its code object.
inline TestArtifact amdgcnTestArtifact(std::vector<uint8_t> blob = elfBytes(elfFor(kMachGfx950)),
                                       const std::string &chip = "gfx950") {
  TestArtifact a = nvptxTestArtifact();
  a.targetKind = fb::TargetKind::AMDGCN;
  a.triple = "amdgcn-amd-amdhsa";
  a.chip = chip;
  a.features = {};
  a.libraryFormat = "hsaco";
  a.blob = std::move(blob);
  return a;
}

inline Artifact amdgcnArtifact(const TestArtifact &a = amdgcnTestArtifact()) {
  return Artifact::fromBytes(serializeGpu(a, nvptxTestShapes()), "gpu.kiln");
}

// Each test kernel's parameter count: 3 + 2R per memref, then the scalars.
inline std::map<std::string, int> testKernelParams() {
  return {{"kiln_embed", 5 + 7 + 7 + 1},
          {"kiln_append", 7 + 9 + 2},
          {"kiln_logits", 9 + 7 + 7 + 2},
          {"kiln_poison", 7}};
}

// The test kernels (NvptxTestArtifact.h describes them) for amdgcn-amd-amdhsa,
// code object v5. Parameters follow docs/runtime-abi.md: per memref
// (allocated, aligned, offset, sizes[R], strides[R]), then the i64 scalars.
constexpr const char *kAmdgcnTestKernels = R"ll(
target triple = "amdgcn-amd-amdhsa"

declare i32 @llvm.amdgcn.workgroup.id.x()
declare i32 @llvm.amdgcn.workitem.id.x()
declare ptr addrspace(4) @llvm.amdgcn.dispatch.ptr()
declare float @llvm.fma.f32(float, float, float)

; [ids i32 [T], embed bf16 [V, H], x f32 [T, H]]; Tokens.
define amdgpu_kernel void @kiln_embed(
    ptr addrspace(1) %ids_allocated, ptr addrspace(1) %ids, i64 %ids_offset,
    i64 %ids_size0, i64 %ids_stride0,
    ptr addrspace(1) %e_allocated, ptr addrspace(1) %e, i64 %e_offset,
    i64 %e_size0, i64 %e_size1, i64 %e_stride0, i64 %e_stride1,
    ptr addrspace(1) %x_allocated, ptr addrspace(1) %x, i64 %x_offset,
    i64 %x_size0, i64 %x_size1, i64 %x_stride0, i64 %x_stride1,
    i64 %tokens) {
entry:
  %b32 = call i32 @llvm.amdgcn.workgroup.id.x()
  %t32 = call i32 @llvm.amdgcn.workitem.id.x()
  %b = zext i32 %b32 to i64
  %t = zext i32 %t32 to i64
  %row_ok = icmp ult i64 %b, %tokens
  %column_ok = icmp ult i64 %t, %x_size1
  %ok = and i1 %row_ok, %column_ok
  br i1 %ok, label %body, label %done
body:
  %id_at = getelementptr i32, ptr addrspace(1) %ids, i64 %b
  %id32 = load i32, ptr addrspace(1) %id_at
  %id = sext i32 %id32 to i64
  %e_row = mul i64 %id, %e_stride0
  %e_index = add i64 %e_row, %t
  %e_at = getelementptr i16, ptr addrspace(1) %e, i64 %e_index
  %bits16 = load i16, ptr addrspace(1) %e_at
  %bits32 = zext i16 %bits16 to i32
  %bits = shl i32 %bits32, 16
  %value = bitcast i32 %bits to float
  %x_row = mul i64 %b, %x_stride0
  %x_index = add i64 %x_row, %t
  %x_at = getelementptr float, ptr addrspace(1) %x, i64 %x_index
  store float %value, ptr addrspace(1) %x_at
  br label %done
done:
  ret void
}

; [x f32 [T, H], K f32 [slots, 1, H]]; PastTokens, Tokens.
define amdgpu_kernel void @kiln_append(
    ptr addrspace(1) %x_allocated, ptr addrspace(1) %x, i64 %x_offset,
    i64 %x_size0, i64 %x_size1, i64 %x_stride0, i64 %x_stride1,
    ptr addrspace(1) %k_allocated, ptr addrspace(1) %k, i64 %k_offset,
    i64 %k_size0, i64 %k_size1, i64 %k_size2, i64 %k_stride0, i64 %k_stride1,
    i64 %k_stride2,
    i64 %past, i64 %tokens) {
entry:
  %b32 = call i32 @llvm.amdgcn.workgroup.id.x()
  %t32 = call i32 @llvm.amdgcn.workitem.id.x()
  %b = zext i32 %b32 to i64
  %t = zext i32 %t32 to i64
  %row_ok = icmp ult i64 %b, %tokens
  %column_ok = icmp ult i64 %t, %x_size1
  %ok = and i1 %row_ok, %column_ok
  br i1 %ok, label %body, label %done
body:
  %x_row = mul i64 %b, %x_stride0
  %x_index = add i64 %x_row, %t
  %x_at = getelementptr float, ptr addrspace(1) %x, i64 %x_index
  %value = load float, ptr addrspace(1) %x_at
  %position = add i64 %past, %b
  %slot = urem i64 %position, %k_size0
  %k_row = mul i64 %slot, %k_stride0
  %k_index = add i64 %k_row, %t
  %k_at = getelementptr float, ptr addrspace(1) %k, i64 %k_index
  store float %value, ptr addrspace(1) %k_at
  br label %done
done:
  ret void
}

; [K f32 [slots, 1, H], lm bf16 [V, H], logits f32 [1, V]]; PastTokens,
; Tokens.
define amdgpu_kernel void @kiln_logits(
    ptr addrspace(1) %k_allocated, ptr addrspace(1) %k, i64 %k_offset,
    i64 %k_size0, i64 %k_size1, i64 %k_size2, i64 %k_stride0, i64 %k_stride1,
    i64 %k_stride2,
    ptr addrspace(1) %w_allocated, ptr addrspace(1) %w, i64 %w_offset,
    i64 %w_size0, i64 %w_size1, i64 %w_stride0, i64 %w_stride1,
    ptr addrspace(1) %o_allocated, ptr addrspace(1) %o, i64 %o_offset,
    i64 %o_size0, i64 %o_size1, i64 %o_stride0, i64 %o_stride1,
    i64 %past, i64 %tokens) {
entry:
  %b32 = call i32 @llvm.amdgcn.workgroup.id.x()
  %t32 = call i32 @llvm.amdgcn.workitem.id.x()
  %dispatch = call ptr addrspace(4) @llvm.amdgcn.dispatch.ptr()
  %size_at = getelementptr i8, ptr addrspace(4) %dispatch, i64 4
  %size16 = load i16, ptr addrspace(4) %size_at, align 4
  %size = zext i16 %size16 to i32
  %first = mul i32 %b32, %size
  %v32 = add i32 %first, %t32
  %v = zext i32 %v32 to i64
  %v_ok = icmp ult i64 %v, %o_size1
  br i1 %v_ok, label %start, label %done
start:
  %rows = add i64 %past, %tokens
  %w_row = mul i64 %v, %w_stride0
  br label %row
row:
  %j = phi i64 [ 0, %start ], [ %j_next, %row_end ]
  %sum_row = phi float [ 0.0, %start ], [ %sum, %row_end ]
  %rows_done = icmp uge i64 %j, %rows
  br i1 %rows_done, label %store, label %row_start
row_start:
  %k_row = mul i64 %j, %k_stride0
  br label %column
column:
  %h = phi i64 [ 0, %row_start ], [ %h_next, %column_body ]
  %sum = phi float [ %sum_row, %row_start ], [ %sum_next, %column_body ]
  %columns_done = icmp uge i64 %h, %w_size1
  br i1 %columns_done, label %row_end, label %column_body
column_body:
  %k_index = add i64 %k_row, %h
  %k_at = getelementptr float, ptr addrspace(1) %k, i64 %k_index
  %kv = load float, ptr addrspace(1) %k_at
  %w_index = add i64 %w_row, %h
  %w_at = getelementptr i16, ptr addrspace(1) %w, i64 %w_index
  %w16 = load i16, ptr addrspace(1) %w_at
  %w32 = zext i16 %w16 to i32
  %w_bits = shl i32 %w32, 16
  %wv = bitcast i32 %w_bits to float
  %sum_next = call float @llvm.fma.f32(float %kv, float %wv, float %sum)
  %h_next = add i64 %h, 1
  br label %column
row_end:
  %j_next = add i64 %j, 1
  br label %row
store:
  %o_at = getelementptr float, ptr addrspace(1) %o, i64 %v
  store float %sum_row, ptr addrspace(1) %o_at
  br label %done
done:
  ret void
}

; [logits f32 [1, V]]: poisons logit 0; its launch has a grid of 0 blocks.
define amdgpu_kernel void @kiln_poison(
    ptr addrspace(1) %o_allocated, ptr addrspace(1) %o, i64 %o_offset,
    i64 %o_size0, i64 %o_size1, i64 %o_stride0, i64 %o_stride1) {
  store float 0x7FF8000000000000, ptr addrspace(1) %o
  ret void
}

!llvm.module.flags = !{!0}
!0 = !{i32 1, !"amdhsa_code_object_version", i32 500}
)ll";

// Whether compileHsaco can work here.
inline bool haveAmdgpuTools() {
#if defined(KILN_TEST_AMDGPU_LLC) && defined(KILN_TEST_AMDGPU_LLD)
  return true;
#else
  return false;
#endif
}

// kAmdgcnTestKernels compiled for `chip` and linked: an hsaco. Empty, with
// the reason in `error`, when the tools are missing or fail.
inline std::vector<uint8_t> compileHsaco(const std::string &chip, std::string &error) {
#if defined(KILN_TEST_AMDGPU_LLC) && defined(KILN_TEST_AMDGPU_LLD)
  std::string dir = ::testing::TempDir() + "/kiln-hsaco-XXXXXX";
  if (!::mkdtemp(dir.data())) {
    error = "mkdtemp failed";
    return {};
  }
  std::ofstream(dir + "/kernels.ll") << kAmdgcnTestKernels;
  const std::string command = std::string(KILN_TEST_AMDGPU_LLC) +
                              " -mtriple=amdgcn-amd-amdhsa -mcpu=" + chip + " -filetype=obj " +
                              dir + "/kernels.ll -o " + dir + "/kernels.o 2>" + dir + "/log && " +
                              KILN_TEST_AMDGPU_LLD + " -shared " + dir + "/kernels.o -o " + dir +
                              "/kernels.hsaco 2>>" + dir + "/log";
  if (std::system(command.c_str()) != 0) {
    std::ifstream log(dir + "/log");
    error = "compiling the test kernels failed: " +
            std::string(std::istreambuf_iterator<char>(log), {});
    return {};
  }
  std::ifstream in(dir + "/kernels.hsaco", std::ios::binary);
  std::vector<uint8_t> blob(std::istreambuf_iterator<char>(in), {});
  for (const char *file : {"/kernels.ll", "/kernels.o", "/kernels.hsaco", "/log"})
    ::unlink((dir + file).c_str());
  ::rmdir(dir.c_str());
  return blob;
#else
  (void)chip;
  error = "llc and ld.lld for amdgcn were not found at configure time";
  return {};
#endif
}

} // namespace kiln::hip_test
