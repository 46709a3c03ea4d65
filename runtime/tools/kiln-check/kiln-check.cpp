// kiln-check: runs an artifact against a reference run (kiln-interp's, or a
// trusted runtime's) and says whether they agree: the prompt's last logits
// within a tolerance, then greedy steps that follow the reference's tokens
// (teacher forcing) and must choose the same token, except where the
// reference itself had a near tie; with --step-tolerance, their logits too
// must be within it of the reference's (kiln-interp and --write keep them);
// the same steps through decodeGreedy (on a GPU, the token chosen where the
// logits are) must choose what the host's argmax chose.
// Or writes such a reference from this run.
// An artifact with a decode_batch entry is also checked against itself:
// every conversation decoded in batches must match the same conversation
// decoded alone, token for token with logits within 5e-5 of the largest (a
// few conversations may differ more where a routing near tie flipped), and
// the batched greedy choice (on a GPU, where the logits are) the same tokens.
// An artifact with a verify entry (speculative decoding) is checked against
// its own decode entry too (VerifyCheck.cpp).
//
//   kiln-check ARTIFACT --weights W --reference FILE
//   kiln-check ARTIFACT --weights W --prompt-ids 1,2,3 --steps 64 --write FILE
#include "runtime/comm/Collectives.h"
#include "runtime/comm/RankLauncher.h"
#include "runtime/core/FlagValue.h"
#include "runtime/cpu/RuntimeError.h"
#include "runtime/engine/Engine.h"
#include "runtime/engine/Reference.h"
#include "runtime/engine/WeightBinder.h"

#include "runtime/safetensors/NonFinite.h"
#include "runtime/tools/kiln-check/VerifyCheck.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <limits>
#include <optional>
#include <string>
#include <vector>

using namespace kiln;

namespace {

void usage() {
  std::fprintf(
      stderr,
      "usage: kiln-check ARTIFACT --weights DIR|synthetic:SEED --reference FILE\n"
      "                  [--tolerance T] [--near-tie F] [--max-near-ties N] [--device N]\n"
      "       kiln-check ARTIFACT --weights DIR|synthetic:SEED --prompt-ids 1,2,3\n"
      "                  --steps N --write FILE [--device N]\n"
      "       kiln-check ARTIFACT --weights DIR|synthetic:SEED --load-only [--rank R]\n\n"
      "Checks an artifact's logits and greedy tokens against a reference run, or\n"
      "writes a reference from this run. Exit 0: agreed (or written); 1: not.\n\n"
      "  --tolerance T      prefill logits: max |diff| < T * max|logit|, relative RMS < T/2\n"
      "                     (default 0.02)\n"
      "  --near-tie F       a step may choose another token where the reference's own\n"
      "                     margin is below F * max|logit| (default 0.01)\n"
      "  --max-near-ties N  how many such steps may differ (default 2)\n"
      "  --step-tolerance T  also hold each decode step's logits to T (relative RMS below\n"
      "                     T/2, every |diff| below T * max|logit|), where the reference\n"
      "                     kept them: for a reference made with the artifact's own\n"
      "                     roundings (an expert routing near tie moves logits far)\n"
      "  --batch-steps N    with a decode_batch entry: greedy steps of the batched\n"
      "                     check (default 16; 0 skips it)\n"
      "  --verify-steps N   with a verify entry (kilnc --verify-tokens): greedy steps\n"
      "                     checked through verify calls and speculative decoding\n"
      "                     against decode (default 48; 0 skips it)\n"
      "  --synthesize W     where synthetic:SEED weights are made: host, or device (the\n"
      "                     artifact's synthesis kernels, the same bytes); default: device\n"
      "                     for GPU artifacts, host for x86\n"
      "  --no-check-weights  do not scan the checkpoint's tensors for NaN and\n"
      "                     infinite values as they load (scanned by default; a\n"
      "                     tensor holding one is refused by name)\n"
      "  --device N         the GPU (default: KILN_LOCAL_RANK, else 0)\n"
      "  --context N        positions the KV caches hold (default: min(4096, the\n"
      "                     model's max_position_embeddings)); a longer prompt needs more\n"
      "  --nproc N          a multi-rank artifact: N processes, one per rank (as\n"
      "                     kiln-run --nproc); rank 0 reports\n"
      "  --load-only        only load the artifact with its weights and report what\n"
      "                     it holds (no --reference or --write)\n"
      "  --rank R           with --load-only, a multi-rank artifact: load rank R's\n"
      "                     share alone, without its job (nothing runs), to see that\n"
      "                     it loads and fits one rank at a time\n");
}

std::vector<int32_t> parseIds(const std::string &text) {
  std::vector<int32_t> ids;
  size_t at = 0;
  while (at <= text.size()) {
    size_t comma = text.find(',', at);
    std::string piece =
        text.substr(at, comma == std::string::npos ? std::string::npos : comma - at);
    const std::optional<int32_t> id =
        integerIn<int32_t>(piece, 0, std::numeric_limits<int32_t>::max());
    if (!id)
      throw RuntimeError(
          notAnIntegerIn<int32_t>("--prompt-ids", piece, 0, std::numeric_limits<int32_t>::max()));
    ids.push_back(*id);
    if (comma == std::string::npos)
      break;
    at = comma + 1;
  }
  return ids;
}

// Bad command lines: exit status 2.
struct UsageError {
  std::string message;
};

// `text` as an integer in [min, max] (the whole text, 64-bit), or a usage
// error naming the flag and the range.
int64_t parseInteger(const std::string &flag, const std::string &text, int64_t min, int64_t max) {
  if (std::optional<int64_t> value = integerIn(text, min, max))
    return *value;
  throw UsageError{notAnIntegerIn(flag, text, min, max)};
}

std::string formatNumber(double value) {
  char text[32];
  std::snprintf(text, sizeof text, "%g", value);
  return text;
}

// `text` as a finite number in (0, max].
double parsePositive(const std::string &flag, const std::string &text, double max) {
  const std::optional<double> value = finiteNumber(text);
  if (!value || *value <= 0 || *value > max)
    throw UsageError{flag + " takes a number above 0 and at most " + formatNumber(max) + ", not " +
                     quoteName(text)};
  return *value;
}

// Logits holding NaN or infinities mean the artifact computed a non-finite
// value (or read one from its weights): refused by name, rather than
// compared (a NaN compares false with everything) or turned into a token.
void requireFinite(const std::vector<float> &logits, const std::string &what) {
  const std::string found = nonFiniteLogits(logits.data(), logits.size());
  if (!found.empty())
    throw RuntimeError(what + ": " + found + ": the artifact computed a non-finite value");
}

// Conversation c's prompt: the reference prompt without its first c tokens,
// ids shifted by 7c, so that conversations differ in content and length.
std::vector<int32_t> conversationPrompt(const std::vector<int32_t> &prompt, int64_t c,
                                        int64_t vocab) {
  std::vector<int32_t> out;
  for (size_t i = static_cast<size_t>(c) % prompt.size(); i < prompt.size(); ++i)
    out.push_back(static_cast<int32_t>((prompt[i] + 7 * c) % vocab));
  return out;
}

// Every conversation greedy-decoded `steps` times through decodeBatch, then
// the same tokens one conversation at a time: the two must choose the same
// tokens, their logits within kBatchTolerance of the largest. The batched
// entry may compute them with other kernels: on a GPU its products run on
// tensor cores, each f32 activation as two bf16 parts (about 16 bits of it),
// where a single token's GEMVs multiply in f32 (but see aloneInF16Pairs), so
// sums differ in their last bits. Where a router's top-k had a near tie that
// such a difference flips, one token takes another expert: that row's logits
// move by a few percent, and the conversation's later rows a little (they
// attend to its K/V). So a few conversations (kBatchFlipShare of them) may go
// past kBatchTolerance, never past kBatchFlipTolerance; a wrong row, expert
// or kernel is off in every conversation, and by far more.
//
// A bf16 KV cache widens all three: a key or value whose products differ in
// their last bits between the two runs may round to the other bf16
// neighbour (2^-8 of it), which moves later logits by up to about 1e-2 of the
// largest and makes routing near ties flip more often; where one did, the
// greedy choice may differ too, within the flip tolerance of the alone run's
// best (measured on an H200: tiny 5e-4 in every conversation, small 2e-2 to
// 0.16 in a few, 5 tokens of 1024 at batch 64).
struct BatchBounds {
  double tolerance, flipTolerance, flipShare;
  bool tokensMayDiffer;
  std::string why; // "; bf16 KV cache" and the like where something widened them
};
//
// An FP8 cache widens them further: its neighbours are 1/16 of a value apart
// (bf16's 1/256), so the rare key that rounds the other way moves the logits
// sixteen times as far.
//
// Where the single token's NVFP4 expert products are packed f16 pairs
// (tiling kind "staged-gemv_nvfp4_f16x2": its vector rounded to f16, sixteen
// products summed in f16), the alone run rounds too, and a near tie flips
// from either side: twice the share of conversations. Measured on small
// NVFP4 (H100), the same artifacts with f32 products: 12 of 64 and 2 of 24
// conversations past 1e-2; with the f16 pairs 24 of 64 and 7 of 24, the
// largest difference the same (0.85 of 5.35) in all four.
bool aloneInF16Pairs(const Artifact &artifact) {
  if (const auto *kernels = artifact->kernels())
    for (const auto *kernel : *kernels)
      if (tilingField(*kernel, "kind") == "staged-gemv_nvfp4_f16x2")
        return true;
  return false;
}

BatchBounds batchBounds(const Artifact &artifact) {
  bool bf16Cache = false, fp8Cache = false;
  if (const auto *caches = artifact->kv_caches())
    for (const auto *cache : *caches) {
      bf16Cache = bf16Cache || toDType(cache->dtype()) == DType::BF16;
      fp8Cache = fp8Cache || toDType(cache->dtype()) == DType::F8_E4M3;
    }
  BatchBounds bounds{5e-5, 0.1, 1.0 / 8, false, ""};
  if (fp8Cache)
    bounds = {5e-2, 0.3, 1.0 / 4, true, "; fp8 KV cache"};
  else if (bf16Cache)
    bounds = {1e-2, 0.2, 1.0 / 4, true, "; bf16 KV cache"};
  if (aloneInF16Pairs(artifact)) {
    bounds.flipShare *= 2;
    bounds.why += bounds.why.empty() ? "; " : ", ";
    bounds.why += "the alone run's expert products in f16 pairs";
  }
  return bounds;
}

// How far `got` is from `want`: relative RMS and largest difference, beside
// the largest |want|.
struct LogitsDistance {
  double relative = 0, worst = 0, scale = 0;
  bool within(double tolerance) const {
    return relative < tolerance / 2 && worst < tolerance * scale;
  }
};
LogitsDistance distance(const std::vector<float> &got, const std::vector<float> &want) {
  LogitsDistance d;
  double diff2 = 0, ref2 = 0;
  for (size_t i = 0; i < want.size() && i < got.size(); ++i) {
    d.scale = std::max(d.scale, double(std::abs(want[i])));
    d.worst = std::max(d.worst, double(std::abs(got[i] - want[i])));
    diff2 += double(got[i] - want[i]) * (got[i] - want[i]);
    ref2 += double(want[i]) * want[i];
  }
  d.relative = std::sqrt(diff2 / std::max(ref2, 1e-30));
  return d;
}

bool checkBatched(Engine &engine, const std::vector<int32_t> &prompt, int steps) {
  const BatchBounds bounds = batchBounds(engine.artifact());
  const double kBatchTolerance = bounds.tolerance, kBatchFlipTolerance = bounds.flipTolerance,
               kBatchFlipShare = bounds.flipShare;
  const int64_t n = engine.conversations(), vocab = engine.vocabSize();
  engine.reset();
  std::vector<std::vector<float>> logits(n);
  for (int64_t c = 0; c < n; ++c) {
    logits[c] = engine.prefill(c, conversationPrompt(prompt, c, vocab));
    requireFinite(logits[c], "batched check: conversation " + std::to_string(c) + "'s prefill");
  }
  std::vector<std::vector<int32_t>> chosen(n);
  std::vector<std::vector<std::vector<float>>> batched(n);
  for (int s = 0; s < steps; ++s) {
    std::vector<int32_t> tokens(n);
    for (int64_t c = 0; c < n; ++c)
      chosen[c].push_back(tokens[c] = greedyStep(logits[c]).token);
    std::vector<float> rows = engine.decodeBatch(tokens);
    for (int64_t c = 0; c < n; ++c) {
      logits[c].assign(rows.begin() + c * vocab, rows.begin() + (c + 1) * vocab);
      requireFinite(logits[c], "batched decode step " + std::to_string(s) + ", conversation " +
                                   std::to_string(c));
      batched[c].push_back(logits[c]);
    }
  }
  engine.reset();
  double worst = 0, scale = 0;
  int differing = 0, farChoices = 0; // tokens chosen otherwise; past the flip tolerance
  // Each conversation's largest difference and largest logit.
  std::vector<double> worstOf(n, 0.0), scaleOf(n, 0.0);
  for (int64_t c = 0; c < n; ++c) {
    std::vector<float> alone = engine.prefill(c, conversationPrompt(prompt, c, vocab));
    for (int s = 0; s < steps; ++s) {
      if (const int32_t best = greedyStep(alone).token; best != chosen[c][s]) {
        ++differing;
        farChoices += alone[size_t(best)] - alone[size_t(chosen[c][s])] >
                      kBatchFlipTolerance * std::abs(alone[size_t(best)]);
      }
      alone = engine.decode(c, chosen[c][s]);
      requireFinite(alone,
                    "decode step " + std::to_string(s) + ", conversation " + std::to_string(c));
      for (int64_t v = 0; v < vocab; ++v) {
        worstOf[c] = std::max(worstOf[c], double(std::abs(alone[v] - batched[c][s][v])));
        scaleOf[c] = std::max(scaleOf[c], double(std::abs(alone[v])));
      }
    }
    worst = std::max(worst, worstOf[c]);
    scale = std::max(scale, scaleOf[c]);
  }
  int64_t moved = 0;
  for (int64_t c = 0; c < n; ++c)
    moved += worstOf[c] > kBatchTolerance * scale;
  const double closest = [&] {
    double d = 0;
    for (int64_t c = 0; c < n; ++c)
      if (worstOf[c] <= kBatchTolerance * scale)
        d = std::max(d, worstOf[c]);
    return d;
  }();
  const bool tokensOk = bounds.tokensMayDiffer
                            ? farChoices == 0 && double(differing) <= kBatchFlipShare * double(n)
                            : differing == 0;
  const bool ok = tokensOk && worst <= kBatchFlipTolerance * scale &&
                  double(moved) <= kBatchFlipShare * double(n);
  std::printf("batched decode: %lld conversations x %d steps against each decoded alone: %d "
              "tokens differ, logits max |diff| %.2e of %.2f; %lld conversations past %.0e of "
              "the largest (a routing near tie; at most %.0f%% may be, within %.0e), the others "
              "within %.2e%s (%s)\n",
              static_cast<long long>(n), steps, differing, worst, scale,
              static_cast<long long>(moved), kBatchTolerance, 100 * kBatchFlipShare,
              kBatchFlipTolerance, closest, bounds.why.c_str(), ok ? "ok" : "FAILED");
  // The same steps choosing their tokens through decodeBatchGreedy (on a
  // GPU, where the logits are): the same tokens.
  engine.reset();
  std::vector<int32_t> tokens(static_cast<size_t>(n));
  for (int64_t c = 0; c < n; ++c)
    tokens[size_t(c)] = greedyStep(engine.prefill(c, conversationPrompt(prompt, c, vocab))).token;
  int greedyDiffering = 0;
  for (int s = 0; s < steps; ++s) {
    for (int64_t c = 0; c < n; ++c)
      greedyDiffering += tokens[size_t(c)] != chosen[c][s];
    tokens = engine.decodeBatchGreedy(tokens);
  }
  std::printf("batched greedy choice: %lld conversations x %d steps: %d tokens differ (%s)\n",
              static_cast<long long>(n), steps, greedyDiffering,
              greedyDiffering == 0 ? "ok" : "FAILED");
  return ok && greedyDiffering == 0;
}

// The reference's steps again through decodeGreedy (on a GPU the token is
// chosen where the logits are, only it comes back): after each forced token
// it must choose what the host's argmax of the same step's downloaded logits
// chose (hostChoices[s + 1]; the runs are the same bits).
bool checkDecodeGreedy(Engine &engine, const Reference &reference,
                       const std::vector<int32_t> &hostChoices) {
  engine.reset();
  engine.prefill(reference.prompt);
  int differing = 0, compared = 0;
  for (size_t s = 0; s < reference.steps.size(); ++s) {
    const int32_t chosen = engine.decodeGreedy(0, reference.steps[s].token);
    if (s + 1 < hostChoices.size()) {
      ++compared;
      differing += chosen != hostChoices[s + 1];
    }
  }
  std::printf("greedy choice where the logits are: %d steps: %d tokens differ from the host's "
              "argmax (%s)\n",
              compared, differing, differing == 0 ? "ok" : "FAILED");
  return differing == 0;
}

double gib(uint64_t bytes) { return double(bytes) / double(1ull << 30); }

// --load-only: the artifact loaded with its weights (rank `rank` alone, when
// given), then what it holds, with the load's time and progress.
int loadAndReport(const std::string &path, EngineOptions options, int rank) {
  Artifact artifact = Artifact::load(path);
  const int world = static_cast<int>(artifact->layout()->world());
  if (rank >= 0) {
    if (world == 1)
      throw RuntimeError(path + ": --rank: the artifact is for one rank");
    if (rank >= world)
      throw RuntimeError(path + ": --rank " + std::to_string(rank) +
                         ": the artifact has ranks 0 to " + std::to_string(world - 1));
    options.rank = RankInfo{rank, world, std::string(), 60};
    options.loadAlone = true;
  }
  options.progress = progressLines(stderr);
  const auto start = std::chrono::steady_clock::now();
  std::unique_ptr<Engine> engine = Engine::create(std::move(artifact), options);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const std::string which =
      rank >= 0 ? " rank " + std::to_string(rank) + " of " + std::to_string(world) + " alone" : "";
  std::printf("kiln-check: loaded %s%s on %s in %.1f s: weights %.2f GiB (%llu bytes), KV "
              "caches %.2f GiB (%lld conversations of %lld tokens), activation arena %.2f GiB\n",
              path.c_str(), which.c_str(), engine->device().c_str(), seconds,
              gib(engine->weightBytes()), static_cast<unsigned long long>(engine->weightBytes()),
              gib(engine->kvCacheBytes()), static_cast<long long>(engine->conversations()),
              static_cast<long long>(engine->contextLength()), gib(engine->arenaBytes()));
  return 0;
}

} // namespace

int main(int argc, char **argv) {
  std::string artifact, weights, referencePath, writePath, prompt;
  double tolerance = 0.02, nearTie = 0.01, stepTolerance = 0;
  int maxNearTies = 2, steps = 0, device = -1, batchSteps = 16, verifySteps = 48, nproc = 1,
      loadRank = -1;
  int64_t context = 0;
  bool loadOnly = false, checkWeights = true;
  EngineOptions::Synthesis synthesis = EngineOptions::Synthesis::Auto;
  try {
    for (int i = 1; i < argc; ++i) {
      std::string arg = argv[i];
      auto value = [&]() -> std::string {
        if (i + 1 >= argc) {
          std::fprintf(stderr, "kiln-check: %s needs a value\n", arg.c_str());
          std::exit(2);
        }
        return argv[++i];
      };
      if (arg == "--help" || arg == "-h") {
        usage();
        return 0;
      } else if (arg == "--weights") {
        weights = value();
      } else if (arg == "--reference") {
        referencePath = value();
      } else if (arg == "--write") {
        writePath = value();
      } else if (arg == "--prompt-ids") {
        prompt = value();
      } else if (arg == "--steps") {
        steps = static_cast<int>(parseInteger(arg, value(), 0, 1 << 20));
      } else if (arg == "--tolerance") {
        tolerance = parsePositive(arg, value(), 1);
      } else if (arg == "--step-tolerance") {
        stepTolerance = parsePositive(arg, value(), 1);
      } else if (arg == "--near-tie") {
        nearTie = parsePositive(arg, value(), 1);
      } else if (arg == "--max-near-ties") {
        maxNearTies = static_cast<int>(parseInteger(arg, value(), 0, 1 << 20));
      } else if (arg == "--batch-steps") {
        batchSteps = static_cast<int>(parseInteger(arg, value(), 0, 1 << 20));
      } else if (arg == "--verify-steps") {
        verifySteps = static_cast<int>(parseInteger(arg, value(), 0, 1 << 20));
      } else if (arg == "--synthesize") {
        const std::string where = value();
        if (where != "host" && where != "device") {
          std::fprintf(stderr, "kiln-check: --synthesize takes host or device, not %s\n",
                       quoteName(where).c_str());
          return 2;
        }
        synthesis =
            where == "host" ? EngineOptions::Synthesis::Host : EngineOptions::Synthesis::Device;
      } else if (arg == "--device") {
        device = static_cast<int>(parseInteger(arg, value(), 0, 1023));
      } else if (arg == "--context") {
        context = parseInteger(arg, value(), 1, int64_t{1} << 40);
      } else if (arg == "--nproc") {
        nproc = static_cast<int>(parseInteger(arg, value(), 1, 1024));
      } else if (arg == "--load-only") {
        loadOnly = true;
      } else if (arg == "--no-check-weights") {
        checkWeights = false;
      } else if (arg == "--rank") {
        loadRank = static_cast<int>(parseInteger(arg, value(), 0, 1023));
      } else if (!arg.empty() && arg[0] != '-' && artifact.empty()) {
        artifact = arg;
      } else {
        std::fprintf(stderr, "kiln-check: unknown argument %s\n", quoteName(arg).c_str());
        usage();
        return 2;
      }
    }
  } catch (const UsageError &error) {
    std::fprintf(stderr, "kiln-check: %s\n", error.message.c_str());
    return 2;
  }
  if (artifact.empty() || weights.empty() ||
      (loadOnly ? !referencePath.empty() || !writePath.empty()
                : referencePath.empty() == writePath.empty())) {
    usage();
    return 2;
  }
  if (loadRank >= 0 && (!loadOnly || nproc > 1)) {
    std::fprintf(stderr, "kiln-check: --rank loads one rank alone: it goes with --load-only and "
                         "without --nproc\n");
    return 2;
  }
  if (synthesis != EngineOptions::Synthesis::Auto && weights.rfind("synthetic:", 0) != 0) {
    std::fprintf(stderr, "kiln-check: --synthesize applies to synthetic:SEED weights, not %s\n",
                 quoteName(weights).c_str());
    return 2;
  }
  if (nproc > 1)
    return launchRanks("kiln-check", withoutNproc(std::vector<std::string>(argv + 1, argv + argc)),
                       nproc, std::cerr);
  try {
    EngineOptions options;
    options.weights = weights;
    options.device = device;
    options.synthesis = synthesis;
    options.checkWeights = checkWeights;
    if (context > 0)
      options.contextLength = context;
    if (loadOnly)
      return loadAndReport(artifact, options, loadRank);
    std::unique_ptr<Engine> engine = Engine::load(artifact, options);

    if (!writePath.empty()) {
      Reference reference;
      reference.source = "kiln-check " + artifact;
      reference.prompt = parseIds(prompt);
      std::vector<float> logits = engine->prefill(reference.prompt);
      requireFinite(logits, "prefill of " + std::to_string(reference.prompt.size()) + " tokens");
      reference.logits = logits;
      for (int s = 0; s < steps; ++s) {
        ReferenceStep step = greedyStep(logits);
        if (s > 0)
          step.logits = logits;
        reference.steps.push_back(step);
        logits = engine->decode(step.token);
        requireFinite(logits, "decode step " + std::to_string(s));
      }
      if (engine->rank() == 0) // every rank computed the same; one writes
        writeReference(writePath, reference);
      std::printf("kiln-check: wrote %s: %zu prompt tokens, %d greedy steps\n", writePath.c_str(),
                  reference.prompt.size(), steps);
      return 0;
    }

    Reference reference = readReference(referencePath);
    std::vector<float> got = engine->prefill(reference.prompt);
    requireFinite(got, "prefill of " + std::to_string(reference.prompt.size()) + " tokens");
    const std::vector<float> &want = reference.logits;
    if (got.size() != want.size())
      throw RuntimeError("the artifact's vocabulary (" + std::to_string(got.size()) +
                         ") differs from the reference's (" + std::to_string(want.size()) + ")");
    const LogitsDistance prefill = distance(got, want);
    const double scale = prefill.scale;
    bool ok = prefill.within(tolerance);
    std::printf("prefill of %zu tokens: logits relative RMS %.2e, max |diff| %.2e of %.2f (%s)\n",
                reference.prompt.size(), prefill.relative, prefill.worst, scale,
                ok ? "ok" : "TOO FAR");
    int same = 0, nearTies = 0, wrong = 0;
    std::vector<int32_t> hostChoices; // each step's argmax of the downloaded logits
    // With --step-tolerance, each decode step's logits against the
    // reference's, where it kept them: the worst step is reported.
    LogitsDistance worstStep;
    size_t worstAt = 0, stepsCompared = 0, stepsTooFar = 0;
    for (size_t s = 0; s < reference.steps.size(); ++s) {
      const ReferenceStep &expected = reference.steps[s];
      if (stepTolerance > 0 && !expected.logits.empty()) {
        const LogitsDistance d = distance(got, expected.logits);
        ++stepsCompared;
        stepsTooFar += d.within(stepTolerance) ? 0 : 1;
        if (d.relative >= worstStep.relative) {
          worstStep = d;
          worstAt = s;
        }
      }
      int32_t chosen = greedyStep(got).token;
      hostChoices.push_back(chosen);
      if (chosen == expected.token) {
        ++same;
      } else if (expected.margin < nearTie * scale) {
        ++nearTies;
        std::printf("step %zu: chose %d, reference %d by a margin of %.4f (near tie)\n", s, chosen,
                    expected.token, expected.margin);
      } else {
        ++wrong;
        std::printf("step %zu: chose %d, reference %d by a margin of %.4f (WRONG)\n", s, chosen,
                    expected.token, expected.margin);
      }
      got = engine->decode(expected.token);
      requireFinite(got, "decode step " + std::to_string(s));
    }
    bool stepsOk = wrong == 0 && nearTies <= maxNearTies;
    std::printf("%zu greedy steps: %d identical, %d near ties, %d wrong (%s)\n",
                reference.steps.size(), same, nearTies, wrong, stepsOk ? "ok" : "FAILED");
    if (stepTolerance > 0 && stepsCompared == 0)
      throw RuntimeError("--step-tolerance: " + referencePath +
                         " keeps no step's logits (write it again with kiln-interp "
                         "--max-new-tokens 2 or more)");
    if (stepsCompared > 0) {
      std::printf("decode steps' logits: %zu compared, worst at step %zu: relative RMS %.2e, max "
                  "|diff| %.2e of %.2f; %zu too far (%s)\n",
                  stepsCompared, worstAt, worstStep.relative, worstStep.worst, worstStep.scale,
                  stepsTooFar, stepsTooFar ? "TOO FAR" : "ok");
      stepsOk = stepsOk && stepsTooFar == 0;
    }
    if (!reference.steps.empty())
      stepsOk = checkDecodeGreedy(*engine, reference, hostChoices) && stepsOk;
    if (engine->conversations() > 1 && batchSteps > 0)
      stepsOk = checkBatched(*engine, reference.prompt, batchSteps) && stepsOk;
    if (engine->verifyTokens() > 1 && verifySteps > 0)
      stepsOk = checkVerify(*engine, reference.prompt, verifySteps, nearTie) && stepsOk;
    std::printf("%s\n", ok && stepsOk ? "kiln-check: PASS" : "kiln-check: FAIL");
    return ok && stepsOk ? 0 : 1;
  } catch (const std::exception &error) {
    std::fprintf(stderr, "kiln-check: %s\n", error.what());
    if (dynamic_cast<const CollectiveError *>(&error)) { // see kiln-run
      std::fflush(nullptr);
      std::_Exit(1);
    }
    return 1;
  }
}
