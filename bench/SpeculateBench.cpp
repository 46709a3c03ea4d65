// kiln-bench-speculate: tokens/s per user with and without speculative
// decoding, at batch 1 and, with a verify_batch entry (kilnc --verify-tokens
// N --decode-batch M), at batch M, on replies the bench generates, beside
// plain decoding of the same replies in the same run (the yardstick).
//
//   kiln-bench-speculate ARTIFACT [--weights synthetic:1] [--file-tokens 1500]
//                        [--draft-tokens K] [--ngram-min 2] [--ngram-max 4]
//
// ARTIFACT needs a verify entry point (kilnc --verify-tokens N). At batch M
// each conversation replays its own workload (other seeds), plain decoding
// through decode_batch calls, speculation through verify_batch calls, and
// per-user tokens/s counts the tokens all of them got until the first
// reply ended. Two
// workloads, each a prompt and the reply to it:
//  - code-edit: the prompt holds a file (seeded random tokens), the reply is
//    the file rewritten with a small change every 30 to 90 tokens (a few
//    tokens replaced, inserted or deleted): what an agent's edit looks like;
//  - free-text: a reply of fresh random tokens, which lookup rarely drafts.
// The reply is replayed: each step the scripted reply decides which drafts
// are accepted and what comes next (synthetic weights would not write it),
// while every call the engine makes is real: the verify calls of 1 + k
// tokens, the rollbacks, a plain decode call where nothing was drafted. So
// the figures are the speed of Kiln's kernels on these shapes at this
// acceptance; with real weights acceptance is what the model's reply gives.
#include "runtime/artifact/Artifact.h"
#include "runtime/core/FlagValue.h"
#include "runtime/engine/Engine.h"
#include "runtime/speculate/LookupDrafter.h"
#include "runtime/speculate/SpeculativeBatch.h"
#include "runtime/speculate/SpeculativeDecoder.h"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <random>
#include <string>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;
using Tokens = std::vector<int32_t>;

struct Options {
  std::string artifact;
  std::string weights = "synthetic:1";
  int64_t fileTokens = 1500;
  int64_t draftTokens = 0; // 0: the verify entry's N - 1
  int ngramMin = 2, ngramMax = 4;
};

[[noreturn]] void usage(const char *why, int status = 2) {
  std::fprintf(status ? stderr : stdout,
               "kiln-bench-speculate: %s\n"
               "usage: kiln-bench-speculate ARTIFACT [--weights SPEC] [--file-tokens N]\n"
               "                            [--draft-tokens K] [--ngram-min N] [--ngram-max N]\n"
               "  ARTIFACT         compiled with kilnc --verify-tokens N\n"
               "  --weights SPEC   checkpoint directory or synthetic:SEED (default synthetic:1)\n"
               "  --file-tokens N  the code-edit file's length, and the free-text reply's\n"
               "                   (default 1500)\n"
               "  --draft-tokens K tokens drafted a step (default: the verify entry's N - 1)\n"
               "  --ngram-min N, --ngram-max N  lookup's n-gram lengths (default 2, 4)\n",
               why);
  std::exit(status);
}

long long integer(const char *flag, const std::string &text, long long min, long long max) {
  const std::optional<long long> value = kiln::integerIn(text, min, max);
  if (!value)
    usage(kiln::notAnIntegerIn(flag, text, min, max).c_str());
  return *value;
}

Options parse(int argc, char **argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc)
        usage(("missing value after " + a).c_str());
      return argv[++i];
    };
    if (a == "--help" || a == "-h")
      usage("speculative decoding's tokens/s per user beside plain decoding", 0);
    else if (a == "--weights")
      o.weights = value();
    else if (a == "--file-tokens")
      o.fileTokens = integer("--file-tokens", value(), 16, 1 << 20);
    else if (a == "--draft-tokens")
      o.draftTokens = integer("--draft-tokens", value(), 1, 256);
    else if (a == "--ngram-min")
      o.ngramMin = static_cast<int>(integer("--ngram-min", value(), 1, 64));
    else if (a == "--ngram-max")
      o.ngramMax = static_cast<int>(integer("--ngram-max", value(), 1, 64));
    else if (!a.empty() && a[0] == '-')
      usage(("unknown option " + a).c_str());
    else if (o.artifact.empty())
      o.artifact = a;
    else
      usage("more than one artifact given");
  }
  if (o.artifact.empty())
    usage("no artifact given");
  if (o.ngramMin > o.ngramMax)
    usage("--ngram-min exceeds --ngram-max");
  return o;
}

struct Workload {
  const char *name;
  Tokens prompt, reply;
};

// Random tokens away from the lowest ids (special tokens in real vocabularies).
Tokens randomTokens(std::mt19937 &rng, int64_t count, int64_t vocab) {
  std::uniform_int_distribution<int32_t> token(16, static_cast<int32_t>(vocab - 1));
  Tokens tokens(static_cast<size_t>(count));
  for (int32_t &t : tokens)
    t = token(rng);
  return tokens;
}

Workload codeEdit(int64_t fileTokens, int64_t vocab, unsigned seed = 11) {
  std::mt19937 rng(seed);
  const Tokens file = randomTokens(rng, fileTokens, vocab);
  Workload w{"code-edit", randomTokens(rng, 48, vocab), {}};
  w.prompt.insert(w.prompt.end(), file.begin(), file.end());
  const Tokens ask = randomTokens(rng, 24, vocab);
  w.prompt.insert(w.prompt.end(), ask.begin(), ask.end());
  std::uniform_int_distribution<int> gap(30, 90), size(1, 4), kind(0, 2);
  for (size_t i = 0; i < file.size();) {
    const size_t next = std::min(file.size(), i + static_cast<size_t>(gap(rng)));
    w.reply.insert(w.reply.end(), file.begin() + static_cast<std::ptrdiff_t>(i),
                   file.begin() + static_cast<std::ptrdiff_t>(next));
    i = next;
    if (i >= file.size())
      break;
    const int n = size(rng);
    switch (kind(rng)) {
    case 0: // replace n tokens
      i += static_cast<size_t>(n);
      [[fallthrough]];
    case 1: { // insert n tokens
      const Tokens fresh = randomTokens(rng, n, vocab);
      w.reply.insert(w.reply.end(), fresh.begin(), fresh.end());
      break;
    }
    default: // delete n tokens
      i += static_cast<size_t>(n);
    }
  }
  return w;
}

Workload freeText(int64_t tokens, int64_t vocab, unsigned seed = 12) {
  std::mt19937 rng(seed);
  return {"free-text", randomTokens(rng, 512, vocab), randomTokens(rng, tokens, vocab)};
}

struct Run {
  double msPerToken = 0;
  kiln::speculate::SpeculationStats stats;
};

// Acceptance by the script: the drafts that match the reply from token
// `done` (the reply's tokens yielded so far) on, then the reply's next.
kiln::speculate::Acceptor scriptAcceptor(const Tokens &reply, const size_t &done) {
  return [&reply, &done](const float *, int64_t, const Tokens &drafts) {
    kiln::speculate::Verdict verdict;
    while (verdict.accepted < static_cast<int64_t>(drafts.size()) &&
           done + static_cast<size_t>(verdict.accepted) < reply.size() &&
           drafts[static_cast<size_t>(verdict.accepted)] ==
               reply[done + static_cast<size_t>(verdict.accepted)])
      ++verdict.accepted;
    verdict.next = reply[std::min(reply.size() - 1, done + static_cast<size_t>(verdict.accepted))];
    return verdict;
  };
}

// The reply replayed with plain decode calls.
Run plain(kiln::Engine &engine, const Workload &w) {
  engine.reset();
  engine.prefill(w.prompt);
  const auto start = Clock::now();
  for (size_t i = 0; i + 1 < w.reply.size(); ++i)
    engine.decode(w.reply[i]);
  Run run;
  run.msPerToken = std::chrono::duration<double, std::milli>(Clock::now() - start).count() /
                   static_cast<double>(w.reply.size() - 1);
  return run;
}

// The reply replayed with lookup drafts, verified by the script.
Run speculative(kiln::Engine &engine, const Workload &w, const Options &o, int64_t draftTokens) {
  engine.reset();
  engine.prefill(w.prompt);
  kiln::speculate::LookupDrafter drafter({o.ngramMin, o.ngramMax, static_cast<int>(draftTokens)});
  kiln::Sampler sampler;
  kiln::speculate::SpeculativeDecoder decoder(engine, 0, drafter, sampler, draftTokens);
  size_t done = 1; // reply tokens yielded
  decoder.setAcceptor(scriptAcceptor(w.reply, done));
  decoder.start(w.prompt, w.reply[0]);
  const auto start = Clock::now();
  while (done < w.reply.size())
    done += decoder.step(static_cast<int64_t>(w.reply.size() - done)).size();
  Run run;
  run.msPerToken = std::chrono::duration<double, std::milli>(Clock::now() - start).count() /
                   static_cast<double>(w.reply.size() - 1);
  run.stats = decoder.stats();
  return run;
}

// Conversations 0..n-1 replay their workloads through decode_batch calls
// until the shortest reply ends.
Run plainBatch(kiln::Engine &engine, const std::vector<Workload> &ws) {
  engine.reset();
  size_t length = SIZE_MAX;
  for (size_t c = 0; c < ws.size(); ++c) {
    engine.prefill(static_cast<int64_t>(c), ws[c].prompt);
    length = std::min(length, ws[c].reply.size());
  }
  const auto start = Clock::now();
  Tokens step(ws.size());
  for (size_t i = 0; i + 1 < length; ++i) {
    for (size_t c = 0; c < ws.size(); ++c)
      step[c] = ws[c].reply[i];
    engine.decodeBatch(step);
  }
  Run run;
  run.msPerToken = std::chrono::duration<double, std::milli>(Clock::now() - start).count() /
                   static_cast<double>(length - 1);
  return run;
}

// The same through verify_batch calls with lookup drafts, each member
// accepted by its own script, until one reply ends; per user, the mean of
// the tokens they got.
Run speculativeBatch(kiln::Engine &engine, const std::vector<Workload> &ws, const Options &o,
                     int64_t draftTokens) {
  engine.reset();
  const size_t n = ws.size();
  std::vector<kiln::speculate::LookupDrafter> drafters(
      n, kiln::speculate::LookupDrafter({o.ngramMin, o.ngramMax, static_cast<int>(draftTokens)}));
  std::vector<size_t> done(n, 1);
  std::vector<kiln::speculate::SpeculativeBatch::Member> members(n);
  for (size_t c = 0; c < n; ++c) {
    engine.prefill(static_cast<int64_t>(c), ws[c].prompt);
    members[c].drafter = &drafters[c];
    members[c].accept = scriptAcceptor(ws[c].reply, done[c]);
    members[c].remaining = static_cast<int64_t>(ws[c].reply.size()) - 1;
    kiln::speculate::SpeculativeBatch::start(members[c], ws[c].prompt, ws[c].reply[0]);
  }
  kiln::speculate::SpeculativeBatch batch(engine, draftTokens);
  const auto start = Clock::now();
  size_t yielded = 0;
  while (std::all_of(members.begin(), members.end(),
                     [](const auto &member) { return member.remaining > 0; })) {
    const std::vector<Tokens> out = batch.step(members);
    for (size_t c = 0; c < n; ++c) {
      done[c] += out[c].size();
      yielded += out[c].size();
    }
  }
  Run run;
  run.msPerToken = std::chrono::duration<double, std::milli>(Clock::now() - start).count() /
                   (static_cast<double>(yielded) / static_cast<double>(n));
  run.stats = batch.stats();
  return run;
}

void print(const char *name, size_t batch, size_t prompt, size_t reply, const Run &base,
           const Run &fast) {
  std::printf("%-9s batch %zu, prompt %zu, reply %zu tokens: plain %.3f ms/token (%.1f tokens/s "
              "per user); speculative %.3f ms/token (%.1f tokens/s per user), %.2f tokens a "
              "step (%lld calls, %lld of %lld drafts accepted): %.2fx\n",
              name, batch, prompt, reply, base.msPerToken, 1000 / base.msPerToken, fast.msPerToken,
              1000 / fast.msPerToken, fast.stats.tokensPerStep(),
              static_cast<long long>(fast.stats.verifyCalls),
              static_cast<long long>(fast.stats.accepted),
              static_cast<long long>(fast.stats.drafted), base.msPerToken / fast.msPerToken);
}

} // namespace

int main(int argc, char **argv) {
  const Options o = parse(argc, argv);
  try {
    kiln::EngineOptions options;
    options.weights = o.weights;
    auto engine = kiln::Engine::load(o.artifact, options);
    if (engine->verifyTokens() < 2)
      usage("the artifact has no verify entry point (compile it with kilnc --verify-tokens N)");
    const int64_t draftTokens = std::min(o.draftTokens ? o.draftTokens : engine->verifyTokens() - 1,
                                         engine->verifyTokens() - 1);
    std::printf("kiln-bench-speculate: %s on %s, verify entry of %lld tokens, lookup drafts of "
                "up to %lld (n-grams %d..%d)\n",
                o.artifact.c_str(), engine->device().c_str(),
                static_cast<long long>(engine->verifyTokens()), static_cast<long long>(draftTokens),
                o.ngramMin, o.ngramMax);
    for (const Workload &w : {codeEdit(o.fileTokens, engine->vocabSize()),
                              freeText(o.fileTokens, engine->vocabSize())}) {
      if (static_cast<int64_t>(w.prompt.size() + w.reply.size()) > engine->contextLength())
        usage("the workload does not fit the context: lower --file-tokens");
      plain(*engine, w); // warm-up: CUDA graphs recorded, caches touched
      const Run base = plain(*engine, w);
      const Run fast = speculative(*engine, w, o, draftTokens);
      print(w.name, 1, w.prompt.size(), w.reply.size(), base, fast);
    }
    // The batch: every conversation its own workload.
    const int64_t n = engine->conversations();
    if (n > 1) {
      for (const bool edit : {true, false}) {
        std::vector<Workload> ws;
        for (int64_t c = 0; c < n; ++c)
          ws.push_back(edit ? codeEdit(o.fileTokens, engine->vocabSize(), 100 + unsigned(c))
                            : freeText(o.fileTokens, engine->vocabSize(), 200 + unsigned(c)));
        plainBatch(*engine, ws); // warm-up
        const Run base = plainBatch(*engine, ws);
        Run fast;
        try {
          fast = speculativeBatch(*engine, ws, o, draftTokens);
        } catch (const std::exception &error) {
          std::printf("batch %lld: %s\n", static_cast<long long>(n), error.what());
          break;
        }
        print(ws[0].name, ws.size(), ws[0].prompt.size(), ws[0].reply.size(), base, fast);
      }
    }
  } catch (const std::exception &error) {
    std::fprintf(stderr, "kiln-bench-speculate: error: %s\n", error.what());
    return 1;
  }
  return 0;
}
