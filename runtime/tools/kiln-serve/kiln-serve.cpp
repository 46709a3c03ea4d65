// kiln-serve: an OpenAI-compatible HTTP server over a Kiln artifact
// (runtime/serve/).
#include "runtime/artifact/Artifact.h"
#include "runtime/artifact/ArtifactMemory.h"
#include "runtime/artifact/ModelFacts.h"
#include "runtime/comm/LeaderChannel.h"
#include "runtime/comm/RankInfo.h"
#include "runtime/comm/RankLauncher.h"
#include "runtime/core/FlagValue.h"
#include "runtime/core/QuoteName.h"
#include "runtime/engine/Engine.h"
#include "runtime/serve/PlannedPool.h"
#include "runtime/serve/RankFollowing.h"
#include "runtime/serve/Scheduler.h"
#include "runtime/serve/Server.h"
#include "runtime/text/Tokenizer.h"

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <iostream>
#include <map>
#include <pthread.h>
#include <string>
#include <thread>
#include <vector>

namespace {

constexpr const char *kUsage =
    R"(usage: kiln-serve ARTIFACT --weights DIR|synthetic:SEED [--tokenizer DIR] [options]

Serves a Kiln artifact over HTTP with OpenAI's completions APIs:
  POST /v1/chat/completions  {"messages": [{"role", "content"}], "tools",
                        "max_tokens", "temperature", "top_p", "seed", "stop",
                        "logprobs", "top_logprobs", "stream"}: the messages
                        through the tokenizer's chat template
  POST /v1/completions  {"prompt": "text" | [ids], "max_tokens", "temperature",
                        "top_p", "seed", "stop", "logprobs", "stream"}
                        (both also take Kiln's "draft_tokens": this
                        request's speculative drafts a step, 0 for none)
  GET  /v1/models, /health, /metrics (Prometheus)
Requests join and leave the running batch at any step (the artifact's
decode_batch conversations: kilnc --decode-batch N); long prompts prefill in
chunks between decode steps. Text needs the checkpoint's tokenizer; without
one, prompts are token ids and replies carry token_ids only.

  --weights DIR|synthetic:SEED  the checkpoint, or generated weights
  --tokenizer DIR               tokenizer.json and tokenizer_config.json
  --host H                      address to listen on (default 127.0.0.1)
  --port P                      port (default 8000; 0: any free port)
  --model-name NAME             the model's name in the API (default: the
                                artifact's model)
  --context N                   positions each conversation's KV caches hold
                                (default: min(4096, max_position_embeddings))
  --kv-pages N                  an artifact with paged KV caches (kilnc
                                --kv-page-tokens): the pool's pages (default:
                                those the artifact's memory plan leaves on the
                                device kilnc planned for, --device-memory or
                                the chip's, less the saved histories' rings;
                                without a plan, as an x86 artifact compiled
                                without --device-memory, every slot's whole
                                context); a request waits
                                until the pool can promise the pages of its
                                prompt and max_tokens beside the running
                                ones', cached histories are forgotten, least
                                recently used first, to make room
  --kv-memory GIB               the pool by its size instead: the pages whose
                                K and V (every paged layer, the cache's
                                element type) fit in GIB GiB
  --max-waiting N               queued requests beyond which the server
                                answers 429 (default 64)
  --prefill-tokens-per-step N   prompt tokens one step prefills (default: the
                                artifact's prefill chunk, kilnc
                                --max-prefill-tokens, and at least 512)
  --decode batch|each           one decode_batch call a step for the decoding
                                requests, the slots between them that are not
                                decoding as idle rows (batch, the default), or
                                one decode call each, whose tokens are exactly
                                kiln-run's (each)
  --speculate lookup            speculative decoding (an artifact compiled with
                                kilnc --verify-tokens N): each request drafts
                                from earlier occurrences of its last n-gram,
                                verified in one call a step (verify_batch for
                                slots 0..n-1); greedy replies are the same
  --draft-tokens K              drafts a step at most (default: N - 1)
  --ngram-min N, --ngram-max N  lookup's n-gram lengths (default 2, 4)
  --check-weights               scan the checkpoint's tensors as they load and
                                refuse non-finite values, naming the tensor
  --saved-histories N           an artifact with paged KV caches: histories
                                kept beside the slots (their pages, shared,
                                and a copy of their sliding layers' windows,
                                the banner's bytes each): a cached slot's
                                when another request takes the slot, and a
                                prefix prompts share (a system prompt); the
                                least recently used goes first (default: 4
                                per slot; with the artifact's memory plan,
                                as many as their rings fit in an eighth of
                                the KV pool's memory, 4 to 64 per slot; 0:
                                none)
  --no-prefix-reuse             forget a slot's caches when its request ends
                                (by default a new request whose prompt begins
                                with what a free slot holds, such as the next
                                turn of a conversation, takes that slot and
                                prefills only the rest)
  --threads N                   CPU threads (x86 artifacts)
  --device N                    the GPU (nvptx, amdgcn artifacts)
  --nproc N                     a multi-rank artifact (kilnc --tp/--ep): N
                                processes on this machine, one per rank (GPU
                                r for rank r); rank 0 serves and schedules,
                                the others make its engine calls with it
  --http-threads N              HTTP worker threads (default 16)
  --help                        this text

It prints "kiln-serve: listening on http://HOST:PORT" once it serves. SIGINT
or SIGTERM drains it: the requests in flight finish (streams to their end),
new ones are answered 503, then it exits; a second signal (a second or more
later) stops it at once.
)";

struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

int64_t integer(const std::string &flag, const std::string &text, int64_t low, int64_t high) {
  if (std::optional<int64_t> value = kiln::integerIn(text, low, high))
    return *value;
  throw UsageError(kiln::notAnIntegerIn(flag, text, low, high));
}

int run(const std::vector<std::string> &args) {
  std::string artifactPath;
  std::map<std::string, std::string> values;
  static const char *const kFlags[] = {
      "--weights",    "--tokenizer",    "--host",         "--port",
      "--model-name", "--context",      "--threads",      "--device",
      "--decode",     "--max-waiting",  "--http-threads", "--prefill-tokens-per-step",
      "--speculate",  "--draft-tokens", "--ngram-min",    "--ngram-max",
      "--nproc",      "--kv-pages",     "--kv-memory",    "--saved-histories"};
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string &arg = args[i];
    if (arg == "--help" || arg == "-h") {
      std::cout << kUsage;
      return 0;
    }
    if (arg == "--no-prefix-reuse" || arg == "--check-weights") {
      values[arg] = "";
      continue;
    }
    if (arg.rfind("--", 0) != 0) {
      if (!artifactPath.empty())
        throw UsageError("one artifact only ('" + arg.substr(0, 100) + "' is a second)");
      artifactPath = arg;
      continue;
    }
    const size_t equals = arg.find('=');
    const std::string flag = arg.substr(0, equals);
    bool known = false;
    for (const char *name : kFlags)
      known = known || flag == name;
    if (!known)
      throw UsageError("unknown option " + kiln::quoteName(flag));
    std::string value;
    if (equals != std::string::npos)
      value = arg.substr(equals + 1);
    else if (i + 1 < args.size())
      value = args[++i];
    else
      throw UsageError(flag + " needs a value");
    if (!values.emplace(flag, value).second)
      throw UsageError(flag + " is given twice");
  }
  if (artifactPath.empty())
    throw UsageError("no artifact given");
  if (!values.count("--weights"))
    throw UsageError("--weights is required");
  if (values.count("--nproc")) {
    const int nproc = static_cast<int>(integer("--nproc", values["--nproc"], 1, 1024));
    if (nproc > 1)
      return kiln::launchRanks("kiln-serve", kiln::withoutNproc(args), nproc, std::cerr);
  }

  kiln::serve::ServerOptions serverOptions;
  kiln::serve::SchedulerOptions schedulerOptions;
  kiln::EngineOptions engineOptions;
  engineOptions.weights = values["--weights"];
  engineOptions.checkWeights = values.count("--check-weights") > 0;
  if (values.count("--host"))
    serverOptions.host = values["--host"];
  if (values.count("--port"))
    serverOptions.port = static_cast<int>(integer("--port", values["--port"], 0, 65535));
  if (values.count("--http-threads"))
    serverOptions.httpThreads =
        static_cast<int>(integer("--http-threads", values["--http-threads"], 1, 1024));
  if (values.count("--max-waiting"))
    schedulerOptions.maxWaiting = integer("--max-waiting", values["--max-waiting"], 0, 1 << 20);
  if (values.count("--prefill-tokens-per-step"))
    schedulerOptions.prefillTokensPerStep =
        integer("--prefill-tokens-per-step", values["--prefill-tokens-per-step"], 1, 1 << 24);
  if (values.count("--decode")) {
    if (values["--decode"] != "batch" && values["--decode"] != "each")
      throw UsageError("--decode: 'batch' or 'each', not '" + values["--decode"].substr(0, 40) +
                       "'");
    schedulerOptions.batchedDecode = values["--decode"] == "batch";
  }
  schedulerOptions.prefixReuse = !values.count("--no-prefix-reuse");
  schedulerOptions.savedHistories =
      values.count("--saved-histories")
          ? integer("--saved-histories", values["--saved-histories"], 0, 1 << 20)
          : -1; // 4 per slot, once the engine says how many
  if (values.count("--speculate") && values["--speculate"] != "lookup")
    throw UsageError("--speculate: 'lookup', not " + kiln::quoteName(values["--speculate"]));
  for (const char *flag : {"--draft-tokens", "--ngram-min", "--ngram-max"})
    if (values.count(flag) && !values.count("--speculate"))
      throw UsageError(std::string(flag) + " needs --speculate lookup");
  if (values.count("--draft-tokens"))
    schedulerOptions.draftTokens = integer("--draft-tokens", values["--draft-tokens"], 1, 256);
  if (values.count("--ngram-min"))
    schedulerOptions.ngramMin =
        static_cast<int>(integer("--ngram-min", values["--ngram-min"], 1, 64));
  if (values.count("--ngram-max"))
    schedulerOptions.ngramMax =
        static_cast<int>(integer("--ngram-max", values["--ngram-max"], 1, 64));
  if (schedulerOptions.ngramMin > schedulerOptions.ngramMax)
    throw UsageError("--ngram-min exceeds --ngram-max");
  if (values.count("--context"))
    engineOptions.contextLength = integer("--context", values["--context"], 1, int64_t{1} << 40);
  if (values.count("--kv-pages"))
    engineOptions.kvPages = integer("--kv-pages", values["--kv-pages"], 1, int64_t{1} << 31);
  if (values.count("--kv-memory")) {
    if (values.count("--kv-pages"))
      throw UsageError("--kv-pages and --kv-memory both size the KV pool: give one");
    const std::optional<double> gib = kiln::finiteNumber(values["--kv-memory"]);
    if (!gib || *gib <= 0 || *gib > 1 << 20)
      throw UsageError("--kv-memory: a number of GiB above 0 and at most 2^20, not '" +
                       values["--kv-memory"] + "'");
    engineOptions.kvPoolBytes = static_cast<uint64_t>(*gib * double(uint64_t{1} << 30));
  }
  if (values.count("--threads"))
    engineOptions.threads = static_cast<int>(integer("--threads", values["--threads"], 1, 4096));
  if (values.count("--device"))
    engineOptions.device = static_cast<int>(integer("--device", values["--device"], 0, 1023));

  // SIGINT and SIGTERM go to a thread of their own, which stops the server:
  // blocked here, before any thread starts, so that every thread inherits it.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  // A rank of a multi-rank job (kiln-serve --nproc, mpirun): rank 0 listens
  // for the others before its weights load, and they connect after theirs.
  const std::optional<kiln::RankInfo> rank = kiln::rankFromEnvironment();
  const bool follower = rank && rank->rank > 0;
  std::unique_ptr<kiln::LeaderChannel> leaderChannel;
  if (rank && rank->world > 1 && rank->rank == 0)
    leaderChannel = kiln::LeaderChannel::listen(*rank);

  // Refused before the weights load: the artifact, the tokenizer.
  kiln::Artifact artifact = kiln::Artifact::load(artifactPath);
  const kiln::ModelFacts facts = kiln::readModelFacts(artifact);
  std::shared_ptr<const kiln::text::Tokenizer> tokenizer;
  if (values.count("--tokenizer")) {
    tokenizer = kiln::text::Tokenizer::load(values["--tokenizer"]);
    if (tokenizer->idLimit() > facts.vocabSize)
      throw std::runtime_error(
          "--tokenizer: " + tokenizer->source() + " has " + std::to_string(tokenizer->idLimit()) +
          " token ids; the model's vocabulary has " + std::to_string(facts.vocabSize));
  }
  // A step's prompt tokens: a whole prefill call of the artifact's at least
  // (on one H200 the proxy's 4096-token chunks served 3x the tokens/s of
  // 512 at 128 sessions, docs/gpu-notes.md).
  if (!values.count("--prefill-tokens-per-step"))
    if (const kiln::artifact::EntryPoint *prefill = artifact.findEntryPoint("prefill"))
      schedulerOptions.prefillTokensPerStep =
          std::max<int64_t>(schedulerOptions.prefillTokensPerStep, prefill->max_tokens());
  if (values.count("--speculate")) {
    // The verify entry's tokens: the pending one and N - 1 drafts.
    const kiln::artifact::EntryPoint *verify = artifact.findEntryPoint("verify");
    const int64_t verifyTokens = verify ? verify->max_tokens() : 0;
    if (verifyTokens < 2)
      throw std::runtime_error("--speculate: '" + artifactPath.substr(0, 200) +
                               "' has no verify entry point (compile it with kilnc "
                               "--verify-tokens N)");
    if (schedulerOptions.draftTokens > verifyTokens - 1)
      throw UsageError("--draft-tokens " + std::to_string(schedulerOptions.draftTokens) +
                       ": the verify entry takes at most " + std::to_string(verifyTokens - 1) +
                       " drafts");
    if (schedulerOptions.draftTokens == 0)
      schedulerOptions.draftTokens = verifyTokens - 1;
  }
  // A paged artifact's pool, unless sized here: the memory plan's
  // (runtime/serve/PlannedPool.h).
  const kiln::ArtifactMemory memory = kiln::artifactMemory(artifact);
  if (schedulerOptions.savedHistories < 0)
    schedulerOptions.savedHistories = kiln::serve::defaultSavedHistories(memory);
  std::string poolSource;
  if (!values.count("--kv-pages") && !values.count("--kv-memory"))
    if (const std::optional<kiln::serve::PlannedPool> pool = kiln::serve::plannedPool(
            memory,
            engineOptions.contextLength > 0 ? engineOptions.contextLength
                                            : kiln::defaultContextLength(facts),
            schedulerOptions.savedHistories, schedulerOptions.prefixReuse)) {
      engineOptions.kvPages = pool->pages;
      poolSource = ", " + pool->source;
    }
  const flatbuffers::String *modelName = artifact->model()->name();
  kiln::serve::ModelInfo model;
  model.name = values.count("--model-name") ? values["--model-name"]
                                            : (modelName ? modelName->str() : "model");
  uint64_t lastPercent = 101;
  if (!follower)
    engineOptions.progress = [&](uint64_t done, uint64_t total) {
      const uint64_t percent = total ? 100 * done / total : 100;
      if (percent / 10 != lastPercent / 10) {
        std::fprintf(stderr, "kiln-serve: loading weights %3llu%%\n",
                     static_cast<unsigned long long>(percent));
        lastPercent = percent;
      }
    };
  std::unique_ptr<kiln::Engine> engine = kiln::Engine::create(std::move(artifact), engineOptions);
  if (follower) {
    // Signals stay blocked here: rank 0 drains on SIGTERM, then says stop.
    std::unique_ptr<kiln::FollowerChannel> channel = kiln::FollowerChannel::connect(*rank);
    kiln::serve::followRank0(*engine, *channel);
    return 0;
  }
  std::unique_ptr<kiln::serve::RankLeader> leader;
  if (leaderChannel)
    leader = std::make_unique<kiln::serve::RankLeader>(*engine, std::move(leaderChannel));
  model.vocab = engine->vocabSize();
  model.contextLength = engine->contextLength();
  std::string saving;
  if (engine->canSave() && schedulerOptions.prefixReuse && schedulerOptions.savedHistories > 0) {
    char gib[32];
    std::snprintf(gib, sizeof gib, "%.2f",
                  double(engine->savedBytes()) * double(schedulerOptions.savedHistories) /
                      double(uint64_t{1} << 30));
    saving = ", up to " + std::to_string(schedulerOptions.savedHistories) + " saved histories (" +
             std::to_string(engine->savedBytes()) + " bytes each beside their pages, " + gib +
             " GiB in all)";
  }

  kiln::serve::Metrics metrics;
  kiln::serve::Scheduler scheduler(*engine, tokenizer, metrics, schedulerOptions);
  kiln::serve::Server server(scheduler, metrics, model, tokenizer, serverOptions);
  const int port = server.bind();
  // The first signal drains (the requests in flight finish, new ones are
  // refused), a later one stops at once. One that comes within a second is
  // the same one again: under --nproc a terminal's Ctrl-C reaches rank 0
  // from the terminal and from the launcher.
  std::thread([&server, signals] {
    int received = 0;
    sigwait(&signals, &received);
    const auto first = std::chrono::steady_clock::now();
    std::fprintf(stderr, "kiln-serve: draining %lld requests (%s again stops at once)\n",
                 static_cast<long long>(server.drain()), received == SIGINT ? "SIGINT" : "SIGTERM");
    do
      sigwait(&signals, &received);
    while (std::chrono::steady_clock::now() - first < std::chrono::seconds(1));
    server.stop();
  }).detach();
  std::fprintf(
      stderr,
      "kiln-serve: %s on %s%s, %lld conversation slots of %lld positions%s, up to %lld prompt "
      "tokens a step, %s%s%s\n"
      "kiln-serve: listening on http://%s:%d\n",
      model.name.c_str(), engine->device().c_str(),
      engine->worldSize() > 1 ? (" (rank 0 of " + std::to_string(engine->worldSize()) + ")").c_str()
                              : "",
      static_cast<long long>(engine->conversations()), static_cast<long long>(model.contextLength),
      engine->kvPageTokens() ? (" (KV in " + std::to_string(engine->kvPages()) + " pages of " +
                                std::to_string(engine->kvPageTokens()) + poolSource + ")")
                                   .c_str()
                             : "",
      static_cast<long long>(schedulerOptions.prefillTokensPerStep),
      tokenizer ? "text and token ids" : "token ids only (no --tokenizer)",
      schedulerOptions.draftTokens ? ", speculative decoding by lookup" : "", saving.c_str(),
      serverOptions.host.c_str(), port);
  if (!server.serve())
    throw std::runtime_error("the HTTP server stopped on an error");
  std::fprintf(stderr, "kiln-serve: stopped\n");
  return 0;
}

} // namespace

int main(int argc, char **argv) {
  try {
    return run(std::vector<std::string>(argv + 1, argv + argc));
  } catch (const UsageError &error) {
    std::cerr << "kiln-serve: error: " << error.what() << " (kiln-serve --help for usage)\n";
    return 2;
  } catch (const std::exception &error) {
    std::cerr << "kiln-serve: error: " << error.what() << "\n";
    return 1;
  }
}
