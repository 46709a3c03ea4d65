// The hand-built artifact of the engine and kiln-run tests: the tiny model's
// config and weights, and six C kernels (TestKernels.h) compiled at test time
// into its library. See TestKernels.h for what each launch computes.
#pragma once

#include "models/muse_spark/Config.h"

#include "test/unit/artifact/ArtifactTestUtil.h"
#include "test/unit/runtime_cpu/CompileC.h"
#include "test/unit/runtime_cpu/TestKernels.h"

namespace kiln::runtime_test {

namespace fb = kiln::artifact;
using namespace kiln::artifact_test;

constexpr int64_t kVocab = 1024, kHidden = 256, kWidth = 64, kLatent = 128;
constexpr int64_t kWindow = 8;
constexpr uint32_t kPrefillTokens = 8;

// Arena layout for at most 16 rows (T <= 8 rounded up to the tile height).
constexpr uint64_t kX = 0, kG = 16384, kS = 18432, kS2 = 20480, kMv = 22528, kStamp = 30720,
                   kArenaBytes = 30752;

inline const std::vector<uint8_t> &testKernelBlob() {
  static const std::vector<uint8_t> blob = compileSharedObject(kTestKernelsSource);
  return blob;
}

inline TestBuffer buffer(fb::BufferKind kind, uint32_t index, std::vector<fb::Dim> shape,
                         fb::DType dtype, uint64_t offset = 0) {
  return {kind, index, offset, std::move(shape), dtype};
}
inline TestBuffer kvRef(uint32_t index) {
  return buffer(fb::BufferKind::KvCache, index, {fixed(0), fixed(2), fixed(32)}, fb::DType::F32);
}

// The steps of an entry point: one conversation (n = 0), or a batched call
// where token t continues conversation t of n (the batch kernels, every
// token's logits).
inline std::vector<TestStep> testSteps(int64_t n) {
  using fb::BufferKind;
  using fb::DType;
  using fb::ScalarKind;
  const TestBuffer x = arena(kX, {tokens(16), fixed(kHidden)}, DType::F32);
  const TestBuffer g = arena(kG, {tokens(), fixed(kWidth)}, DType::F32);
  const TestBuffer s = arena(kS, {tokens(), fixed(kWidth)}, DType::F32);
  const TestBuffer s2 = arena(kS2, {tokens(), fixed(kWidth)}, DType::F32);
  const TestBuffer mv = arena(kMv, {tokens(16), fixed(kLatent)}, DType::F32);
  const TestBuffer stamp = arena(kStamp, {fixed(8)}, DType::F32);
  const TestBuffer ids = buffer(BufferKind::Input, 0, {tokens()}, DType::I32);
  const TestBuffer positions = buffer(BufferKind::Input, 1, {tokens()}, DType::I32);
  auto launch = [](uint32_t kernel, std::vector<TestBuffer> buffers,
                   std::vector<TestScalar> scalars, uint32_t maxParts, std::string op) {
    return TestLaunch{kernel, std::move(buffers), std::move(scalars), maxParts, std::move(op)};
  };
  return {
      launch(
          0, {ids, buffer(BufferKind::Weight, 0, {fixed(kVocab), fixed(kHidden)}, DType::BF16), x},
          {{ScalarKind::Tokens}, {ScalarKind::Part}, {ScalarKind::Parts}}, 4, "model.embed_tokens"),
      n ? launch(6, {x, positions, kvRef(0), kvRef(1)},
                 {{ScalarKind::Tokens}, {ScalarKind::Constant, n}}, 1, "model.layers.3.kv")
        : launch(1, {x, positions, kvRef(0), kvRef(1)},
                 {{ScalarKind::Tokens}, {ScalarKind::PastTokens}}, 1, "model.layers.3.kv"),
      n ? launch(6, {x, positions, kvRef(2), kvRef(3)},
                 {{ScalarKind::Tokens}, {ScalarKind::Constant, n}}, 1, "model.layers.2.kv")
        : launch(1, {x, positions, kvRef(2), kvRef(3)},
                 {{ScalarKind::Tokens}, {ScalarKind::PastTokens}}, 1, "model.layers.2.kv"),
      n ? launch(7, {kvRef(0), kvRef(1), positions, g},
                 {{ScalarKind::Tokens}, {ScalarKind::Constant, 0}, {ScalarKind::Constant, n}}, 1,
                 "model.layers.3.self_attn")
        : launch(2, {kvRef(0), kvRef(1), g},
                 {{ScalarKind::Tokens}, {ScalarKind::PastTokens}, {ScalarKind::Constant, 0}}, 1,
                 "model.layers.3.self_attn"),
      n ? launch(7, {kvRef(2), kvRef(3), positions, s},
                 {{ScalarKind::Tokens}, {ScalarKind::Constant, kWindow}, {ScalarKind::Constant, n}},
                 1, "model.layers.2.self_attn")
        : launch(2, {kvRef(2), kvRef(3), s},
                 {{ScalarKind::Tokens}, {ScalarKind::PastTokens}, {ScalarKind::Constant, kWindow}},
                 1, "model.layers.2.self_attn"),
      TestCopy{s, s2},
      launch(
          3,
          {x, buffer(BufferKind::Weight, 2, {fixed(2), fixed(kLatent * kLatent)}, DType::BF16), mv},
          {{ScalarKind::Tokens}, {ScalarKind::Constant, kLatent}}, 1, "model.layers.0.mlp.experts"),
      launch(4, {stamp}, {{ScalarKind::Part}, {ScalarKind::Parts}}, 8, "stamp"),
      launch(5,
             {g, s2, mv,
              buffer(BufferKind::Weight, 1, {fixed(kVocab), fixed(kHidden)}, DType::BF16), stamp,
              buffer(BufferKind::Output, 0, {n ? tokens() : fixed(1), fixed(kVocab)}, DType::F32)},
             {{ScalarKind::Tokens},
              {ScalarKind::Part},
              {ScalarKind::Parts},
              {ScalarKind::Constant, 3}},
             4, "lm_head"),
  };
}

// The test model, for prefill chunks of 8 tokens.
inline TestArtifact testArtifact() {
  using fb::BufferKind;
  using fb::DType;
  using fb::ScalarKind;
  TestArtifact a;
  a.features = {"sse2"};
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
                kVocab * kHidden * 2},
               {"model.layers.0.mlp.experts.{e}.up_proj.weight",
                2,
                1,
                {kLatent, kLatent},
                DType::BF16,
                fb::WeightTransform::VnniBf16,
                -1,
                1,
                2 * kLatent * kLatent * 2}};
  a.kvCaches = {{3, 0, 2, 32, DType::F32}, {2, kWindow, 2, 32, DType::F32}};
  a.kernels = {{"kiln_embed_f32", "kiln.embed", "{}"},
               {"kiln_kv_append", "kiln.kv_append", "{}"},
               {"kiln_attend", "kiln.attention", "{}"},
               {"kiln_expert_matvec", "kiln.linear", "{}"},
               {"kiln_stamp_parts", "test.stamp", "{}"},
               {"kiln_logits", "kiln.linear", "{}"},
               {"kiln_kv_append_batch", "kiln.kv_append", "{}"},
               {"kiln_attend_batch", "kiln.attention", "{}"}};
  a.blob = testKernelBlob();

  const std::vector<TestStep> steps = testSteps(0);
  a.entryPoints = {{"prefill", kPrefillTokens, kArenaBytes, steps, fixed(1)},
                   {"decode", 1, kArenaBytes, steps, fixed(1)}};
  return a;
}

// The test model with a decode_batch entry for `n` conversations.
inline TestArtifact batchTestArtifact(uint32_t n) {
  TestArtifact a = testArtifact();
  a.entryPoints.push_back({"decode_batch", n, kArenaBytes, testSteps(n), tokens(), n});
  return a;
}

} // namespace kiln::runtime_test
