// The verify entry against decode, on the artifact's own kernels:
//  1. `steps` greedy tokens decoded one at a time, each step's logits and its
//     top-two margin kept;
//  2. the same tokens run through verify calls of the entry's full length:
//     each row's logits against decode's for the same position;
//  3. speculative greedy decoding with drafts of those tokens, wrong at a
//     moving place (ScriptedDrafter): every accepted count and rollback
//     length occurs, and the output must be decode's tokens.
// A verify call of several tokens may run other kernels than decode's single
// token (on a GPU, tensor-core products with the rows as the narrow side
// where decode has f32 GEMVs), so sums differ in their last bits, and a bf16
// KV cache may round a key to the other neighbour: rows agree within the
// bounds of the batched check, and the speculative tokens are decode's up to
// the first step whose decode margin is a near tie (below `nearTie` of the
// largest logit), past which the two runs continue different texts. On x86
// both are exact (the tiled GEMMs treat rows alike): 0 difference, the same
// tokens.
#include "runtime/tools/kiln-check/VerifyCheck.h"

#include "runtime/engine/Reference.h"
#include "runtime/engine/Sampler.h"
#include "runtime/speculate/ScriptedDrafter.h"
#include "runtime/speculate/SpeculativeDecoder.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace kiln {

bool checkVerify(Engine &engine, const std::vector<int32_t> &prompt, int steps, double nearTie) {
  const auto vocab = static_cast<size_t>(engine.vocabSize());
  const int64_t window = engine.verifyTokens();
  if (static_cast<int64_t>(prompt.size()) + steps + window > engine.contextLength())
    steps = static_cast<int>(std::max<int64_t>(
        0, engine.contextLength() - static_cast<int64_t>(prompt.size()) - window));
  if (steps < 2) {
    std::printf("verify: the context leaves no room for the check (skipped)\n");
    return true;
  }

  // 1. Decode alone.
  engine.reset();
  std::vector<std::vector<float>> decoded = {engine.prefill(prompt)};
  std::vector<int32_t> plain;
  std::vector<float> margins;
  double scale = 0;
  for (int s = 0; s < steps; ++s) {
    const ReferenceStep step = greedyStep(decoded.back());
    plain.push_back(step.token);
    margins.push_back(step.margin);
    for (float v : decoded.back())
      scale = std::max(scale, double(std::abs(v)));
    decoded.push_back(engine.decode(step.token));
  }

  // 2. The same tokens through verify calls.
  engine.reset();
  engine.prefill(prompt);
  double worst = 0;
  int64_t rows = 0, flipped = 0;
  std::vector<double> worstOfRow;
  for (size_t at = 0; at + 1 < plain.size();) {
    const size_t n = std::min(static_cast<size_t>(window), plain.size() - 1 - at);
    const std::vector<int32_t> block(plain.begin() + static_cast<std::ptrdiff_t>(at),
                                     plain.begin() + static_cast<std::ptrdiff_t>(at + n));
    const std::vector<float> got = engine.verify(0, block);
    for (size_t r = 0; r < n; ++r) {
      const std::vector<float> &want = decoded[at + r + 1];
      double rowWorst = 0;
      for (size_t v = 0; v < vocab; ++v)
        rowWorst = std::max(rowWorst, double(std::abs(got[r * vocab + v] - want[v])));
      worst = std::max(worst, rowWorst);
      worstOfRow.push_back(rowWorst);
      ++rows;
    }
    at += n;
  }
  // As the batched check's bounds with a bf16 cache: 1e-2 of the largest
  // logit, a quarter of the rows up to 0.2 (a routing near tie flipped).
  for (double w : worstOfRow)
    flipped += w > 1e-2 * scale;
  const bool rowsOk = worst <= 0.2 * scale && 4 * flipped <= rows;
  std::printf("verify: %lld rows in calls of up to %lld tokens against decode: logits max |diff| "
              "%.2e of %.2f, %lld rows past 1e-2 of it (%s)\n",
              static_cast<long long>(rows), static_cast<long long>(window), worst, scale,
              static_cast<long long>(flipped), rowsOk ? "ok" : "FAILED");

  // 3. Speculative greedy decoding with scripted drafts.
  engine.reset();
  std::vector<int32_t> out = {greedyStep(engine.prefill(prompt)).token};
  speculate::ScriptedDrafter drafter(plain, prompt.size(), static_cast<int32_t>(vocab));
  Sampler greedy;
  speculate::SpeculativeDecoder decoder(engine, 0, drafter, greedy, window - 1);
  decoder.start(prompt, out.back());
  while (static_cast<int>(out.size()) < steps)
    for (int32_t token : decoder.step(steps - static_cast<int64_t>(out.size())))
      out.push_back(token);
  const auto firstDifference =
      static_cast<size_t>(std::mismatch(out.begin(), out.end(), plain.begin()).first - out.begin());
  bool tokensOk = true;
  std::string verdict = "identical";
  if (firstDifference < plain.size()) {
    const float margin = margins[firstDifference];
    tokensOk = margin < nearTie * scale;
    verdict = "the same up to step " + std::to_string(firstDifference) +
              ", where decode's margin is " + std::to_string(margin) +
              (tokensOk ? " (a near tie)" : " (WRONG)");
  }
  const speculate::SpeculationStats &stats = decoder.stats();
  std::printf("speculative greedy decoding: %d tokens in %lld steps (%.2f a step, %lld of %lld "
              "drafts accepted): %s (%s)\n",
              steps, static_cast<long long>(stats.steps), stats.tokensPerStep(),
              static_cast<long long>(stats.accepted), static_cast<long long>(stats.drafted),
              verdict.c_str(), tokensOk ? "ok" : "FAILED");
  engine.reset();
  return rowsOk && tokensOk;
}

} // namespace kiln
