// Building nvptx artifacts in tests: the artifact_test description
// (test/unit/artifact/ArtifactTestUtil.h) serialised with each launch's grid
// and block (looked up by the launch's op), and a tiny model whose kernels are
// hand-written PTX (kNvptxTestKernels):
//   kiln_embed   x[t][h] = bf16 embed[ids[t]][h]           grid T, block 256
//   kiln_append  K[(past + t) % slots][0][h] = x2[t][h]    grid T, block 256
//   kiln_logits  logits[0][v] = sum over slots j < past + T and h of
//                K[j][0][h] * bf16 lm_head[v][h] (one fma chain, j then h)
//                                                         grid 8, block 128
//   kiln_poison  logits[0][0] = NaN                       grid 0: never runs
// with a copy x -> x2 between embed and append. They exercise the nvptx ABI
// (expanded descriptors, i64 scalars, grids that grow with T, a skipped
// launch, a KV cache that persists, a device-to-device copy), not the model.
#pragma once

#include <gtest/gtest.h>

#include "models/muse_spark/Config.h"

#include "test/unit/artifact/ArtifactTestUtil.h"

#include <map>
#include <string>

namespace kiln::cuda_test {

namespace fb = kiln::artifact;
using namespace kiln::artifact_test;

struct LaunchShape {
  fb::Dim grid;
  uint32_t block = 0;
};
// By the op of the launch; launches not named get no shape.
using LaunchShapes = std::map<std::string, LaunchShape>;

// The PTX of the test kernels, for sm_90 (PTX ISA 7.8). Parameters follow
// docs/runtime-abi.md: per memref (allocated, aligned, offset, sizes[R],
// strides[R]), then the i64 scalars.
constexpr const char *kNvptxTestKernels = R"ptx(
.version 7.8
.target sm_90
.address_size 64

// [ids i32 [T], embed bf16 [V, H], x f32 [T, H]]; Tokens.
.visible .entry kiln_embed(
    .param .u64 ids_allocated, .param .u64 ids_aligned, .param .u64 ids_offset,
    .param .u64 ids_size0, .param .u64 ids_stride0,
    .param .u64 e_allocated, .param .u64 e_aligned, .param .u64 e_offset,
    .param .u64 e_size0, .param .u64 e_size1, .param .u64 e_stride0,
    .param .u64 e_stride1,
    .param .u64 x_allocated, .param .u64 x_aligned, .param .u64 x_offset,
    .param .u64 x_size0, .param .u64 x_size1, .param .u64 x_stride0,
    .param .u64 x_stride1,
    .param .u64 tokens)
{
  .reg .pred %p<4>;
  .reg .b16 %rs<2>;
  .reg .b32 %r<6>;
  .reg .f32 %f<2>;
  .reg .b64 %rd<20>;

  ld.param.u64 %rd1, [ids_aligned];
  ld.param.u64 %rd2, [e_aligned];
  ld.param.u64 %rd3, [e_stride0];
  ld.param.u64 %rd4, [x_aligned];
  ld.param.u64 %rd5, [x_stride0];
  ld.param.u64 %rd6, [x_size1];
  ld.param.u64 %rd7, [tokens];
  mov.u32 %r1, %ctaid.x;
  mov.u32 %r2, %tid.x;
  cvt.u64.u32 %rd8, %r1;
  cvt.u64.u32 %rd9, %r2;
  setp.ge.u64 %p1, %rd8, %rd7;
  setp.ge.u64 %p2, %rd9, %rd6;
  or.pred %p3, %p1, %p2;
  @%p3 bra EMBED_DONE;
  cvta.to.global.u64 %rd1, %rd1;
  cvta.to.global.u64 %rd2, %rd2;
  cvta.to.global.u64 %rd4, %rd4;
  shl.b64 %rd10, %rd8, 2;
  add.u64 %rd10, %rd1, %rd10;
  ld.global.s32 %r3, [%rd10];
  cvt.s64.s32 %rd11, %r3;
  mul.lo.u64 %rd12, %rd11, %rd3;
  add.u64 %rd12, %rd12, %rd9;
  shl.b64 %rd12, %rd12, 1;
  add.u64 %rd12, %rd2, %rd12;
  ld.global.u16 %rs1, [%rd12];
  cvt.u32.u16 %r4, %rs1;
  shl.b32 %r4, %r4, 16;
  mov.b32 %f1, %r4;
  mul.lo.u64 %rd13, %rd8, %rd5;
  add.u64 %rd13, %rd13, %rd9;
  shl.b64 %rd13, %rd13, 2;
  add.u64 %rd13, %rd4, %rd13;
  st.global.f32 [%rd13], %f1;
EMBED_DONE:
  ret;
}

// [x f32 [T, H], K f32 [slots, 1, H]]; PastTokens, Tokens.
.visible .entry kiln_append(
    .param .u64 x_allocated, .param .u64 x_aligned, .param .u64 x_offset,
    .param .u64 x_size0, .param .u64 x_size1, .param .u64 x_stride0,
    .param .u64 x_stride1,
    .param .u64 k_allocated, .param .u64 k_aligned, .param .u64 k_offset,
    .param .u64 k_size0, .param .u64 k_size1, .param .u64 k_size2,
    .param .u64 k_stride0, .param .u64 k_stride1, .param .u64 k_stride2,
    .param .u64 past, .param .u64 tokens)
{
  .reg .pred %p<4>;
  .reg .b32 %r<4>;
  .reg .f32 %f<2>;
  .reg .b64 %rd<20>;

  ld.param.u64 %rd1, [x_aligned];
  ld.param.u64 %rd2, [x_stride0];
  ld.param.u64 %rd3, [x_size1];
  ld.param.u64 %rd4, [k_aligned];
  ld.param.u64 %rd5, [k_size0];
  ld.param.u64 %rd6, [k_stride0];
  ld.param.u64 %rd7, [past];
  ld.param.u64 %rd8, [tokens];
  mov.u32 %r1, %ctaid.x;
  mov.u32 %r2, %tid.x;
  cvt.u64.u32 %rd9, %r1;
  cvt.u64.u32 %rd10, %r2;
  setp.ge.u64 %p1, %rd9, %rd8;
  setp.ge.u64 %p2, %rd10, %rd3;
  or.pred %p3, %p1, %p2;
  @%p3 bra APPEND_DONE;
  cvta.to.global.u64 %rd1, %rd1;
  cvta.to.global.u64 %rd4, %rd4;
  mul.lo.u64 %rd11, %rd9, %rd2;
  add.u64 %rd11, %rd11, %rd10;
  shl.b64 %rd11, %rd11, 2;
  add.u64 %rd11, %rd1, %rd11;
  ld.global.f32 %f1, [%rd11];
  add.u64 %rd12, %rd7, %rd9;
  rem.u64 %rd12, %rd12, %rd5;
  mul.lo.u64 %rd13, %rd12, %rd6;
  add.u64 %rd13, %rd13, %rd10;
  shl.b64 %rd13, %rd13, 2;
  add.u64 %rd13, %rd4, %rd13;
  st.global.f32 [%rd13], %f1;
APPEND_DONE:
  ret;
}

// [K f32 [slots, 1, H], lm bf16 [V, H], logits f32 [1, V]]; PastTokens,
// Tokens.
.visible .entry kiln_logits(
    .param .u64 k_allocated, .param .u64 k_aligned, .param .u64 k_offset,
    .param .u64 k_size0, .param .u64 k_size1, .param .u64 k_size2,
    .param .u64 k_stride0, .param .u64 k_stride1, .param .u64 k_stride2,
    .param .u64 w_allocated, .param .u64 w_aligned, .param .u64 w_offset,
    .param .u64 w_size0, .param .u64 w_size1, .param .u64 w_stride0,
    .param .u64 w_stride1,
    .param .u64 o_allocated, .param .u64 o_aligned, .param .u64 o_offset,
    .param .u64 o_size0, .param .u64 o_size1, .param .u64 o_stride0,
    .param .u64 o_stride1,
    .param .u64 past, .param .u64 tokens)
{
  .reg .pred %p<4>;
  .reg .b16 %rs<2>;
  .reg .b32 %r<8>;
  .reg .f32 %f<4>;
  .reg .b64 %rd<32>;

  ld.param.u64 %rd1, [k_aligned];
  ld.param.u64 %rd2, [k_stride0];
  ld.param.u64 %rd3, [w_aligned];
  ld.param.u64 %rd4, [w_size1];
  ld.param.u64 %rd5, [w_stride0];
  ld.param.u64 %rd6, [o_aligned];
  ld.param.u64 %rd7, [o_size1];
  ld.param.u64 %rd8, [past];
  ld.param.u64 %rd9, [tokens];
  mov.u32 %r1, %ctaid.x;
  mov.u32 %r2, %ntid.x;
  mov.u32 %r3, %tid.x;
  mad.lo.u32 %r4, %r1, %r2, %r3;
  cvt.u64.u32 %rd10, %r4;
  setp.ge.u64 %p1, %rd10, %rd7;
  @%p1 bra LOGITS_DONE;
  cvta.to.global.u64 %rd1, %rd1;
  cvta.to.global.u64 %rd3, %rd3;
  cvta.to.global.u64 %rd6, %rd6;
  add.u64 %rd11, %rd8, %rd9;
  mul.lo.u64 %rd12, %rd10, %rd5;
  shl.b64 %rd12, %rd12, 1;
  add.u64 %rd12, %rd3, %rd12;
  mov.f32 %f1, 0f00000000;
  mov.u64 %rd13, 0;
LOGITS_ROW:
  setp.ge.u64 %p2, %rd13, %rd11;
  @%p2 bra LOGITS_STORE;
  mul.lo.u64 %rd14, %rd13, %rd2;
  shl.b64 %rd14, %rd14, 2;
  add.u64 %rd14, %rd1, %rd14;
  mov.u64 %rd15, 0;
LOGITS_COLUMN:
  setp.ge.u64 %p3, %rd15, %rd4;
  @%p3 bra LOGITS_NEXT_ROW;
  shl.b64 %rd16, %rd15, 2;
  add.u64 %rd16, %rd14, %rd16;
  ld.global.f32 %f2, [%rd16];
  shl.b64 %rd17, %rd15, 1;
  add.u64 %rd17, %rd12, %rd17;
  ld.global.u16 %rs1, [%rd17];
  cvt.u32.u16 %r5, %rs1;
  shl.b32 %r5, %r5, 16;
  mov.b32 %f3, %r5;
  fma.rn.f32 %f1, %f2, %f3, %f1;
  add.u64 %rd15, %rd15, 1;
  bra LOGITS_COLUMN;
LOGITS_NEXT_ROW:
  add.u64 %rd13, %rd13, 1;
  bra LOGITS_ROW;
LOGITS_STORE:
  shl.b64 %rd18, %rd10, 2;
  add.u64 %rd18, %rd6, %rd18;
  st.global.f32 [%rd18], %f1;
LOGITS_DONE:
  ret;
}

// [logits f32 [1, V]]: poisons logit 0; its launch has a grid of 0 blocks.
.visible .entry kiln_poison(
    .param .u64 o_allocated, .param .u64 o_aligned, .param .u64 o_offset,
    .param .u64 o_size0, .param .u64 o_size1, .param .u64 o_stride0,
    .param .u64 o_stride1)
{
  .reg .f32 %f<2>;
  .reg .b64 %rd<2>;

  ld.param.u64 %rd1, [o_aligned];
  cvta.to.global.u64 %rd1, %rd1;
  mov.f32 %f1, 0f7FC00000;
  st.global.f32 [%rd1], %f1;
  ret;
}
)ptx";

constexpr int64_t kVocab = 1024, kHidden = 256;
constexpr uint32_t kPrefillTokens = 8;
// Arena: x f32 [T, H] at 0, x2 right after, for T <= 8.
constexpr uint64_t kX = 0, kX2 = kPrefillTokens * kHidden * 4, kArenaBytes = 2 * kX2;

// The PTX as an artifact's library blob: the text and its NUL.
inline std::vector<uint8_t> ptxBlob(const std::string &ptx) {
  std::vector<uint8_t> blob(ptx.begin(), ptx.end());
  blob.push_back(0);
  return blob;
}

// `a` with each launch's grid and block from `shapes` (by op).
inline std::vector<uint8_t> serializeGpu(const TestArtifact &a, const LaunchShapes &shapes);

// The test model for muse-spark-tiny's embedding and lm_head, and its shapes.
inline TestArtifact nvptxTestArtifact() {
  using fb::BufferKind;
  using fb::DType;
  using fb::ScalarKind;
  TestArtifact a;
  a.targetKind = fb::TargetKind::NVPTX;
  a.triple = "nvptx64-nvidia-cuda";
  a.chip = "sm_90";
  a.features = {"+ptx78"};
  a.modelName = "muse-spark-tiny";
  a.configJson = *muse_spark::builtinConfigText("muse-spark-tiny");
  a.weights = {{"model.embed_tokens.weight",
                0,
                0,
                {kVocab, kHidden},
                DType::BF16,
                fb::WeightTransform::None,
                -1,
                1,
                kVocab * kHidden * 2},
               {"lm_head.weight",
                0,
                0,
                {kVocab, kHidden},
                DType::BF16,
                fb::WeightTransform::None,
                -1,
                1,
                kVocab * kHidden * 2}};
  a.kvCaches = {{0, 0, 1, static_cast<uint32_t>(kHidden), DType::F32}};
  a.kernels = {{"kiln_embed", "kiln.embed", "{}"},
               {"kiln_append", "kiln.kv_append", "{}"},
               {"kiln_logits", "kiln.linear", "{}"},
               {"kiln_poison", "test.poison", "{}"}};
  a.libraryFormat = "ptx";
  a.blob = ptxBlob(kNvptxTestKernels);

  const TestBuffer x = arena(kX, {tokens(), fixed(kHidden)}, DType::F32);
  const TestBuffer x2 = arena(kX2, {tokens(), fixed(kHidden)}, DType::F32);
  const TestBuffer k{BufferKind::KvCache, 0, 0, {fixed(0), fixed(1), fixed(kHidden)}, DType::F32};
  const TestBuffer ids{BufferKind::Input, 0, 0, {tokens()}, DType::I32};
  const TestBuffer logits{BufferKind::Output, 0, 0, {fixed(1), fixed(kVocab)}, DType::F32};
  auto weight = [](uint32_t index) {
    return TestBuffer{BufferKind::Weight, index, 0, {fixed(kVocab), fixed(kHidden)}, DType::BF16};
  };
  const std::vector<TestStep> steps = {
      TestLaunch{0, {ids, weight(0), x}, {{ScalarKind::Tokens, 0}}, 1, "model.embed_tokens"},
      TestCopy{x, x2},
      TestLaunch{1,
                 {x2, k},
                 {{ScalarKind::PastTokens, 0}, {ScalarKind::Tokens, 0}},
                 1,
                 "model.layers.0.kv"},
      TestLaunch{2,
                 {k, weight(1), logits},
                 {{ScalarKind::PastTokens, 0}, {ScalarKind::Tokens, 0}},
                 1,
                 "lm_head"},
      TestLaunch{3, {logits}, {}, 1, "poison"},
  };
  a.entryPoints = {{"prefill", kPrefillTokens, kArenaBytes, steps, fixed(1)},
                   {"decode", 1, kArenaBytes, steps, fixed(1)}};
  return a;
}

inline LaunchShapes nvptxTestShapes() {
  return {{"model.embed_tokens", {tokens(), 256}},
          {"model.layers.0.kv", {tokens(), 256}},
          {"lm_head", {fixed(kVocab / 128), 128}},
          {"poison", {fixed(0), 32}}};
}

// ---------------------------------------------------------------------------

namespace detail {

inline flatbuffers::Offset<fb::StepEntry> buildGpuStep(flatbuffers::FlatBufferBuilder &fbb,
                                                       const TestStep &step,
                                                       const LaunchShapes &shapes) {
  const auto *launch = std::get_if<TestLaunch>(&step);
  if (!launch)
    return artifact_test::detail::buildStep(fbb, step);
  const auto shape = shapes.find(launch->op);
  const fb::Dim *grid = shape == shapes.end() ? nullptr : &shape->second.grid;
  const uint32_t block = shape == shapes.end() ? 0 : shape->second.block;
  auto built = artifact_test::detail::buildLaunch(fbb, *launch, grid, block);
  return fb::CreateStepEntry(fbb, fb::Step::Launch, built.Union());
}

} // namespace detail

inline std::vector<uint8_t> serializeGpu(const TestArtifact &a, const LaunchShapes &shapes) {
  flatbuffers::FlatBufferBuilder fbb;
  auto version = fb::CreateVersionDirect(fbb, a.schemaMajor, a.schemaMinor, a.compiler.c_str());
  auto features = fbb.CreateVectorOfStrings(a.features);
  auto target = fb::CreateTarget(fbb, a.targetKind, fbb.CreateString(a.triple),
                                 fbb.CreateString(a.chip), features);
  auto model =
      fb::CreateModelDirect(fbb, a.modelName.c_str(), a.configJson.c_str(), a.weightFormat.c_str());
  auto layout = fb::CreateLayout(fbb, a.tp, a.ep, a.sp, a.world);
  std::vector<flatbuffers::Offset<fb::WeightBinding>> weights;
  for (const TestWeight &w : a.weights)
    weights.push_back(fb::CreateWeightBindingDirect(fbb, w.name.c_str(), w.stack, w.firstExpert,
                                                    &w.shape, w.dtype, w.transform, w.sliceDim,
                                                    w.sliceCount, w.bytes));
  std::vector<flatbuffers::Offset<fb::KvCache>> caches;
  for (const TestKvCache &c : a.kvCaches)
    caches.push_back(fb::CreateKvCache(fbb, c.layer, c.window, c.kvHeads, c.headDim, c.dtype));
  std::vector<flatbuffers::Offset<fb::Kernel>> kernels;
  for (const TestKernel &k : a.kernels)
    kernels.push_back(
        fb::CreateKernelDirect(fbb, k.name.c_str(), k.op.c_str(), k.tiling.c_str(), k.sharedBytes));
  auto library = fb::CreateKernelLibraryDirect(fbb, a.libraryFormat.c_str(), &a.blob);
  std::vector<flatbuffers::Offset<fb::EntryPoint>> entries;
  for (const TestEntryPoint &entry : a.entryPoints) {
    std::vector<flatbuffers::Offset<fb::StepEntry>> steps;
    for (const TestStep &step : entry.steps)
      steps.push_back(detail::buildGpuStep(fbb, step, shapes));
    entries.push_back(fb::CreateEntryPointDirect(fbb, entry.name.c_str(), entry.maxTokens,
                                                 entry.arenaBytes, &steps,
                                                 entry.logitsRows ? &*entry.logitsRows : nullptr));
  }
  const fb::Digests unsealed(0, 0);
  auto root =
      fb::CreateArtifact(fbb, version, target, model, layout, a.rank, fbb.CreateVector(weights),
                         fbb.CreateVector(caches), fbb.CreateVector(kernels), library,
                         fbb.CreateVector(entries), 0, &unsealed);
  fb::FinishArtifactBuffer(fbb, root);
  artifact::sealArtifact(fbb.GetBufferPointer(), fbb.GetSize());
  return std::vector<uint8_t>(fbb.GetBufferPointer(), fbb.GetBufferPointer() + fbb.GetSize());
}

// ---------------------------------------------------------------------------
// Hopper kernels (schema 1.5): TMA bulk tensor copies through tensor maps, in
// dynamic shared memory above 48 KiB. Added to kNvptxTestKernels (PTX ISA
// 8.0) by tmaTestArtifact():
//   kiln_tma_embed  the embedding of kiln_embed, its row ids[t] loaded and
//                   x[t] stored by bulk tensor copies (maps over the weight
//                   and x, boxes of 256 x 1)              grid T, block 256
//   kiln_tma_tile   [x bf16 [R, C], y bf16 [8, C]]; block b copies x's box of
//                   8 rows of 64 columns at column 64 b (128-byte swizzle,
//                   rows past R read as zeros) to y       block 128
//   kiln_statics    1 KiB of static shared memory, for the opt-in limit
constexpr const char *kTmaTestKernels = R"ptx(
.extern .shared .align 1024 .b8 kiln_smem[];
.shared .align 4 .b8 kiln_static_words[1024];

// [x bf16 [R, C], y bf16 [8, C]]; TensorMap: x in boxes of 8 rows of 64
// columns, 128-byte swizzle. Block b copies the box at column 64 b, rows 0..7,
// to y through a tile 64 KiB into the dynamic shared memory (un-swizzled).
.visible .entry kiln_tma_tile(
    .param .u64 x_allocated, .param .u64 x_aligned, .param .u64 x_offset,
    .param .u64 x_size0, .param .u64 x_size1, .param .u64 x_stride0,
    .param .u64 x_stride1,
    .param .u64 y_allocated, .param .u64 y_aligned, .param .u64 y_offset,
    .param .u64 y_size0, .param .u64 y_size1, .param .u64 y_stride0,
    .param .u64 y_stride1,
    .param .u64 tmap)
{
  .reg .pred %p<4>;
  .reg .b16 %rs<2>;
  .reg .b32 %r<24>;
  .reg .b64 %rd<12>;

  ld.param.u64 %rd1, [tmap];
  ld.param.u64 %rd2, [y_aligned];
  ld.param.u64 %rd3, [y_size1];
  cvta.to.global.u64 %rd2, %rd2;
  mov.u32 %r1, %tid.x;
  mov.u32 %r2, %ctaid.x;
  mov.u32 %r3, kiln_smem;
  add.u32 %r4, %r3, 65536;
  add.u32 %r5, %r3, 66560;
  setp.ne.u32 %p1, %r1, 0;
  @%p1 bra TILE_SYNC;
  mbarrier.init.shared::cta.b64 [%r5], 1;
  fence.proxy.async.shared::cta;
TILE_SYNC:
  bar.sync 0;
  @%p1 bra TILE_WAIT;
  mbarrier.arrive.expect_tx.shared::cta.b64 %rd4, [%r5], 1024;
  shl.b32 %r6, %r2, 6;
  mov.u32 %r7, 0;
  cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%r4], [%rd1, {%r6, %r7}], [%r5];
TILE_WAIT:
  mbarrier.try_wait.parity.shared::cta.b64 %p2, [%r5], 0;
  @!%p2 bra TILE_WAIT;
  mov.u32 %r10, 0;
TILE_COPY:
  shl.b32 %r11, %r10, 7;
  add.u32 %r11, %r11, %r1;
  shr.u32 %r12, %r11, 6;
  and.b32 %r13, %r11, 63;
  shr.u32 %r14, %r13, 3;
  and.b32 %r15, %r12, 7;
  xor.b32 %r14, %r14, %r15;
  shl.b32 %r16, %r12, 7;
  shl.b32 %r17, %r14, 4;
  and.b32 %r18, %r13, 7;
  shl.b32 %r18, %r18, 1;
  add.u32 %r16, %r16, %r17;
  add.u32 %r16, %r16, %r18;
  add.u32 %r16, %r16, %r4;
  ld.shared.u16 %rs1, [%r16];
  cvt.u64.u32 %rd5, %r12;
  mul.lo.u64 %rd5, %rd5, %rd3;
  shl.b32 %r19, %r2, 6;
  add.u32 %r19, %r19, %r13;
  cvt.u64.u32 %rd6, %r19;
  add.u64 %rd5, %rd5, %rd6;
  shl.b64 %rd5, %rd5, 1;
  add.u64 %rd5, %rd2, %rd5;
  st.global.u16 [%rd5], %rs1;
  add.u32 %r10, %r10, 1;
  setp.lt.u32 %p3, %r10, 4;
  @%p3 bra TILE_COPY;
  ret;
}

// [ids i32 [T], embed bf16 [V, 256], x f32 [T, 256]]; Tokens, TensorMap
// (embed, box 256 x 1), TensorMap (x, box 256 x 1). Block t loads row
// ids[t] of the embedding by a bulk tensor copy, widens it to f32 in shared
// memory and stores it to x[t] by a bulk tensor copy. Block of 256.
.visible .entry kiln_tma_embed(
    .param .u64 ids_allocated, .param .u64 ids_aligned, .param .u64 ids_offset,
    .param .u64 ids_size0, .param .u64 ids_stride0,
    .param .u64 e_allocated, .param .u64 e_aligned, .param .u64 e_offset,
    .param .u64 e_size0, .param .u64 e_size1, .param .u64 e_stride0,
    .param .u64 e_stride1,
    .param .u64 x_allocated, .param .u64 x_aligned, .param .u64 x_offset,
    .param .u64 x_size0, .param .u64 x_size1, .param .u64 x_stride0,
    .param .u64 x_stride1,
    .param .u64 tokens, .param .u64 emap, .param .u64 xmap)
{
  .reg .pred %p<4>;
  .reg .b16 %rs<2>;
  .reg .b32 %r<16>;
  .reg .f32 %f<2>;
  .reg .b64 %rd<12>;

  ld.param.u64 %rd1, [ids_aligned];
  ld.param.u64 %rd2, [emap];
  ld.param.u64 %rd3, [xmap];
  cvta.to.global.u64 %rd1, %rd1;
  mov.u32 %r1, %tid.x;
  mov.u32 %r2, %ctaid.x;
  mov.u32 %r3, kiln_smem;
  add.u32 %r4, %r3, 65536;
  add.u32 %r5, %r3, 66048;
  add.u32 %r6, %r3, 67072;
  setp.ne.u32 %p1, %r1, 0;
  @%p1 bra EMBED_SYNC;
  mbarrier.init.shared::cta.b64 [%r6], 1;
  fence.proxy.async.shared::cta;
EMBED_SYNC:
  bar.sync 0;
  @%p1 bra EMBED_WAIT;
  cvt.u64.u32 %rd4, %r2;
  shl.b64 %rd4, %rd4, 2;
  add.u64 %rd4, %rd1, %rd4;
  ld.global.u32 %r7, [%rd4];
  mov.u32 %r8, 0;
  mbarrier.arrive.expect_tx.shared::cta.b64 %rd5, [%r6], 512;
  cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%r4], [%rd2, {%r8, %r7}], [%r6];
EMBED_WAIT:
  mbarrier.try_wait.parity.shared::cta.b64 %p2, [%r6], 0;
  @!%p2 bra EMBED_WAIT;
  shl.b32 %r9, %r1, 1;
  add.u32 %r9, %r4, %r9;
  ld.shared.u16 %rs1, [%r9];
  cvt.u32.u16 %r10, %rs1;
  shl.b32 %r10, %r10, 16;
  mov.b32 %f1, %r10;
  shl.b32 %r11, %r1, 2;
  add.u32 %r11, %r5, %r11;
  st.shared.f32 [%r11], %f1;
  fence.proxy.async.shared::cta;
  bar.sync 0;
  @%p1 bra EMBED_DONE;
  mov.u32 %r12, 0;
  cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%rd3, {%r12, %r2}], [%r5];
  cp.async.bulk.commit_group;
  cp.async.bulk.wait_group 0;
EMBED_DONE:
  ret;
}

// Static shared memory, for the opt-in limit: [x f32 [1]].
.visible .entry kiln_statics(
    .param .u64 x_allocated, .param .u64 x_aligned, .param .u64 x_offset,
    .param .u64 x_size0, .param .u64 x_stride0)
{
  .reg .b32 %r<4>;
  .reg .f32 %f<2>;
  .reg .b64 %rd<4>;
  ld.param.u64 %rd1, [x_aligned];
  cvta.to.global.u64 %rd1, %rd1;
  mov.u32 %r1, %tid.x;
  shl.b32 %r1, %r1, 2;
  mov.u32 %r2, kiln_static_words;
  add.u32 %r2, %r2, %r1;
  mov.f32 %f1, 0f3F800000;
  st.shared.f32 [%r2], %f1;
  bar.sync 0;
  ld.shared.f32 %f1, [%r2];
  st.global.f32 [%rd1], %f1;
  ret;
}
)ptx";

// Dynamic shared memory: 64 KiB unused, then the kernel's tiles and its
// mbarrier.
constexpr uint32_t kTmaEmbedSharedBytes = 65536 + 512 + 1024 + 8;
constexpr uint32_t kTmaTileSharedBytes = 65536 + 1024 + 8;
// Kernel indices in tmaTestArtifact().
constexpr uint32_t kTmaEmbedKernel = 4, kTmaTileKernel = 5, kStaticsKernel = 6;

inline std::string tmaTestPtx() {
  std::string ptx = kNvptxTestKernels;
  const std::string version = ".version 7.8";
  ptx.replace(ptx.find(version), version.size(), ".version 8.0");
  return ptx + kTmaTestKernels;
}

// nvptxTestArtifact() with its embedding launched as kiln_tma_embed, and the
// TMA kernels in its library.
inline TestArtifact tmaTestArtifact() {
  TestArtifact a = nvptxTestArtifact();
  a.blob = ptxBlob(tmaTestPtx());
  a.kernels.push_back({"kiln_tma_embed", "kiln.embed", "{}", kTmaEmbedSharedBytes});
  a.kernels.push_back({"kiln_tma_tile", "test.tile", "{}", kTmaTileSharedBytes});
  a.kernels.push_back({"kiln_statics", "test.statics", "{}"});
  for (TestEntryPoint &entry : a.entryPoints) {
    auto &embed = std::get<TestLaunch>(entry.steps[0]);
    embed.kernel = kTmaEmbedKernel;
    embed.scalars = {{fb::ScalarKind::Tokens, 0},
                     {fb::ScalarKind::TensorMap, 0},
                     {fb::ScalarKind::TensorMap, 1}};
    embed.tensorMaps = {{1, {static_cast<uint32_t>(kHidden), 1}, 0},
                        {2, {static_cast<uint32_t>(kHidden), 1}, 0}};
  }
  return a;
}

// The message of what `fn` throws; a test failure if it throws nothing.
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

} // namespace kiln::cuda_test
