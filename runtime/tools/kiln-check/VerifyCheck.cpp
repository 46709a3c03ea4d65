// The verify entry against decode, on the artifact's own kernels:
//  1. `steps` greedy tokens decoded one at a time, each step's logits and its
//     top-two margin kept;
//  2. the same tokens run through verify calls of the entry's full length:
//     each row's logits against decode's for the same position;
//  3. speculative greedy decoding with drafts of those tokens, wrong at a
//     moving place (ScriptedDrafter): every accepted count and rollback
//     length occurs, and the output must be decode's tokens;
//  4. with a verify_batch entry, every conversation at once (prompts of
//     their own), each against itself decoded alone, the same way.
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
#include "runtime/speculate/SpeculativeBatch.h"
#include "runtime/speculate/SpeculativeDecoder.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <string>

namespace kiln {
namespace {

// Where `out` first differs from `plain`, and whether that is allowed: only
// where decode's own top-two margin was a near tie.
bool sameUpToNearTie(const std::vector<int32_t> &out, const std::vector<int32_t> &plain,
                     const std::vector<float> &margins, double limit, std::string &verdict) {
  const auto first = static_cast<size_t>(
      std::mismatch(out.begin(), out.end(), plain.begin(), plain.end()).first - out.begin());
  if (first >= plain.size() || first >= out.size()) {
    verdict = "identical";
    return true;
  }
  const bool nearTie = margins[first] < limit;
  verdict = "the same up to step " + std::to_string(first) + ", where decode's margin is " +
            std::to_string(margins[first]) + (nearTie ? " (a near tie)" : " (WRONG)");
  return nearTie;
}

// Step 4: conversations 0..n-1 through verify_batch calls.
bool checkVerifyBatch(Engine &engine, const std::vector<int32_t> &prompt, int steps,
                      double nearTie) {
  const int64_t n = engine.conversations(), vocab = engine.vocabSize();
  std::vector<std::vector<int32_t>> prompts(n), plain(n);
  std::vector<std::vector<float>> margins(n);
  double scale = 0;
  engine.reset();
  for (int64_t c = 0; c < n; ++c) {
    // The prompt shifted per conversation: other lengths, other tokens.
    for (size_t i = static_cast<size_t>(c) % prompt.size(); i < prompt.size(); ++i)
      prompts[c].push_back(static_cast<int32_t>((prompt[i] + 11 * c) % vocab));
    std::vector<float> logits = engine.prefill(c, prompts[c]);
    for (int s = 0; s < steps; ++s) {
      const ReferenceStep step = greedyStep(logits);
      plain[c].push_back(step.token);
      margins[c].push_back(step.margin);
      for (float v : logits)
        scale = std::max(scale, double(std::abs(v)));
      logits = engine.decode(c, step.token);
    }
  }
  engine.reset();
  std::vector<std::unique_ptr<speculate::ScriptedDrafter>> drafters;
  std::vector<Sampler> greedy(static_cast<size_t>(n));
  std::vector<speculate::SpeculativeBatch::Member> members(static_cast<size_t>(n));
  std::vector<std::vector<int32_t>> out(n);
  for (int64_t c = 0; c < n; ++c) {
    drafters.push_back(std::make_unique<speculate::ScriptedDrafter>(plain[c], prompts[c].size(),
                                                                    static_cast<int32_t>(vocab)));
    auto &member = members[static_cast<size_t>(c)];
    member.drafter = drafters.back().get();
    member.accept = speculate::samplingAcceptor(greedy[static_cast<size_t>(c)]);
    member.remaining = steps - 1;
    out[c] = {greedyStep(engine.prefill(c, prompts[c])).token};
    speculate::SpeculativeBatch::start(member, prompts[c], out[c].back());
  }
  speculate::SpeculativeBatch batch(engine, engine.verifyTokens() - 1);
  while (std::all_of(members.begin(), members.end(),
                     [](const auto &member) { return member.remaining > 0; })) {
    const std::vector<std::vector<int32_t>> yielded = batch.step(members);
    for (int64_t c = 0; c < n; ++c)
      out[c].insert(out[c].end(), yielded[c].begin(), yielded[c].end());
  }
  int same = 0, nearTies = 0, wrong = 0;
  for (int64_t c = 0; c < n; ++c) {
    std::string verdict;
    if (!sameUpToNearTie(out[c], plain[c], margins[c], nearTie * scale, verdict))
      ++wrong;
    else if (verdict == "identical")
      ++same;
    else
      ++nearTies;
    if (verdict != "identical")
      std::printf("verify_batch: conversation %lld: %s\n", static_cast<long long>(c),
                  verdict.c_str());
  }
  const speculate::SpeculationStats &stats = batch.stats();
  std::printf("speculative greedy decoding, %lld conversations in verify_batch calls: %lld "
              "calls, %.2f tokens a conversation a call; %d identical to decoding alone, %d "
              "after a near tie, %d wrong (%s)\n",
              static_cast<long long>(n), static_cast<long long>(stats.verifyCalls),
              stats.tokensPerStep(), same, nearTies, wrong, wrong == 0 ? "ok" : "FAILED");
  engine.reset();
  return wrong == 0;
}

} // namespace

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
  std::string verdict;
  bool tokensOk = sameUpToNearTie(out, plain, margins, nearTie * scale, verdict);
  const speculate::SpeculationStats &stats = decoder.stats();
  std::printf("speculative greedy decoding: %d tokens in %lld steps (%.2f a step, %lld of %lld "
              "drafts accepted): %s (%s)\n",
              steps, static_cast<long long>(stats.steps), stats.tokensPerStep(),
              static_cast<long long>(stats.accepted), static_cast<long long>(stats.drafted),
              verdict.c_str(), tokensOk ? "ok" : "FAILED");
  engine.reset();
  if (engine.conversations() > 1 && engine.artifact().findEntryPoint("verify_batch"))
    tokensOk = checkVerifyBatch(engine, prompt, steps, nearTie) && tokensOk;
  return rowsOk && tokensOk;
}

} // namespace kiln
