#include "runtime/tools/kiln-run/KilnRun.h"
#include "runtime/core/FlagValue.h"
#include "runtime/core/QuoteName.h"

#include "runtime/artifact/Artifact.h"
#include "runtime/comm/Collectives.h"
#include "runtime/comm/RankLauncher.h"
#include "runtime/core/InputFile.h"
#include "runtime/engine/Engine.h"
#include "runtime/engine/Sampler.h"
#include "runtime/speculate/LookupDrafter.h"
#include "runtime/speculate/ModelDrafter.h"
#include "runtime/speculate/SpeculativeDecoder.h"
#include "runtime/text/Tokenizer.h"
#include "runtime/text/Utf8.h"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <map>
#include <optional>
#include <sstream>
#include <stdexcept>

namespace kiln {
namespace {

using Clock = std::chrono::steady_clock;

constexpr const char *kUsage =
    R"(usage: kiln-run ARTIFACT --weights DIR|synthetic:SEED --prompt-ids IDS
                --max-new-tokens N [options]
       kiln-run ARTIFACT --weights DIR|synthetic:SEED --tokenizer DIR
                (--prompt TEXT | --prompt-file PATH) --max-new-tokens N [options]

Generates tokens with a Kiln artifact, x86 (kilnc --target=x86) on this CPU,
nvptx (kilnc --target=sm_90, sm_100, ...) on an NVIDIA GPU or amdgcn (kilnc
--target=gfx942, gfx950, ...) on an AMD GPU, and reports the time
to first token, the time per output token and tokens/s.

  ARTIFACT                  the .kiln file
  --weights DIR             a safetensors checkpoint directory
  --weights synthetic:SEED  weights generated from SEED (as kiln-ckpt synth)
  --prompt-ids 1,2,3        the prompt, as token ids (the new tokens are
                            printed as ids)
  --tokenizer DIR           the checkpoint's tokenizer (tokenizer.json and
                            tokenizer_config.json): the new tokens are printed
                            as text as they come, and generation stops at the
                            EOS token
  --prompt TEXT             the prompt, as text (UTF-8; with its BOS)
  --prompt-file PATH        the prompt, the text of a file
  --max-new-tokens N        tokens to generate (N >= 1)
  --temperature T           0 (default): greedy; else sample softmax(logits/T)
  --top-p P                 sample from the smallest set of tokens whose
                            probability reaches P, 0 < P <= 1 (default 1)
  --seed S                  sampling seed (default 0)
  --context N               positions the KV caches hold
                            (default: min(4096, max_position_embeddings))
  --threads N               threads (default: all hardware threads)
  --device N                the GPU an nvptx/amdgcn artifact runs on (default:
                            KILN_LOCAL_RANK, else 0)
  --check-weights           scan the checkpoint's tensors as they load and
                            refuse one holding NaN or infinite values
  --speculate lookup        speculative decoding (an artifact compiled with
                            kilnc --verify-tokens N): each step drafts tokens
                            from an earlier occurrence of the conversation's
                            last n-gram and verifies them in one call
  --speculate draft:PATH    the same, drafted by a small model: the artifact
                            PATH (same vocabulary; compiled with
                            --verify-tokens of at least --draft-tokens + 1)
                            with --draft-weights
  --draft-weights W         the draft model's weights (DIR or synthetic:SEED)
  --draft-tokens K          tokens drafted a step (default: the verify entry's
                            N - 1)
  --ngram-min N, --ngram-max N
                            lookup drafting's n-gram lengths (default 2, 4)
                            Greedy output is the same with and without
                            speculation; sampled output keeps the model's
                            distribution (speculative sampling)
  --nproc N                 start N processes on this machine, one per rank
                            of a multi-rank artifact (kilnc --tp/--ep), each
                            on GPU KILN_LOCAL_RANK; rank 0 prints the tokens
  --help                    this text

A multi-rank artifact runs as one process per rank, started by --nproc, by
mpirun or by a scheduler: each reads KILN_RANK and KILN_WORLD_SIZE (or
OMPI_COMM_WORLD_RANK/SIZE, PMI_RANK/SIZE, SLURM_PROCID/NTASKS) and meets the
others at the path KILN_RENDEZVOUS. A collective that waits longer than
KILN_COMM_TIMEOUT seconds (default 60) for a rank stops every rank with an
error naming it.
)";

// Bad command lines: exit status 2 and a pointer to --help.
class UsageError : public std::runtime_error {
public:
  using std::runtime_error::runtime_error;
};

struct Options {
  std::string artifact;
  std::string weights;
  std::vector<int32_t> promptIds;
  std::string tokenizer;
  std::optional<std::string> prompt, promptFile;
  int64_t maxNewTokens = 0;
  SamplingOptions sampling;
  int64_t context = 0;
  int threads = 0;
  int device = -1; // -1: KILN_LOCAL_RANK, else 0
  int nproc = 1;
  // Speculative decoding: "", "lookup" or "draft" (with draftArtifact).
  std::string speculate;
  std::string draftArtifact, draftWeights;
  int64_t draftTokens = 0; // 0: the verify entry's N - 1
  int ngramMin = 2, ngramMax = 4;
  bool checkWeights = false;
  bool help = false;
};

template <typename Int>
Int parseInteger(const std::string &flag, const std::string &text, Int min, Int max) {
  if (std::optional<Int> value = integerIn(text, min, max))
    return *value;
  throw UsageError(notAnIntegerIn(flag, text, min, max));
}

double parseNumber(const std::string &flag, const std::string &text) {
  const std::optional<double> value = finiteNumber(text);
  if (!value)
    throw UsageError(flag + ": " + quoteName(text) + " is not a number");
  return *value;
}

std::vector<int32_t> parseIds(const std::string &text) {
  std::vector<int32_t> ids;
  size_t start = 0;
  for (;;) {
    const size_t comma = text.find(',', start);
    std::string item = text.substr(start, comma - start);
    const size_t first = item.find_first_not_of(' ');
    item = first == std::string::npos ? ""
                                      : item.substr(first, item.find_last_not_of(' ') - first + 1);
    ids.push_back(
        parseInteger<int32_t>("--prompt-ids", item, 0, std::numeric_limits<int32_t>::max()));
    if (comma == std::string::npos)
      return ids;
    start = comma + 1;
  }
}

Options parseArgs(const std::vector<std::string> &args) {
  Options options;
  std::map<std::string, std::string> values;
  static const char *const kFlags[] = {
      "--weights",      "--prompt-ids", "--max-new-tokens", "--temperature", "--top-p",
      "--seed",         "--context",    "--threads",        "--device",      "--nproc",
      "--tokenizer",    "--prompt",     "--prompt-file",    "--speculate",   "--draft-weights",
      "--draft-tokens", "--ngram-min",  "--ngram-max"};
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string &arg = args[i];
    if (arg == "--help" || arg == "-h") {
      options.help = true;
      return options;
    }
    if (arg == "--check-weights") {
      options.checkWeights = true;
      continue;
    }
    if (arg.size() < 2 || arg.compare(0, 2, "--") != 0 || arg == "--") {
      if (arg.size() > 1 && arg[0] == '-')
        throw UsageError("unknown option " + quoteName(arg));
      if (!options.artifact.empty())
        throw UsageError("unexpected argument " + quoteName(arg) + " (one artifact only)");
      options.artifact = arg;
      continue;
    }
    const size_t equals = arg.find('=');
    const std::string flag = arg.substr(0, equals);
    bool known = false;
    for (const char *name : kFlags)
      known = known || flag == name;
    if (!known)
      throw UsageError("unknown option " + quoteName(flag));
    std::string value;
    if (equals != std::string::npos) {
      value = arg.substr(equals + 1);
    } else {
      if (i + 1 >= args.size())
        throw UsageError(flag + " needs a value");
      value = args[++i];
    }
    if (!values.emplace(flag, value).second)
      throw UsageError(flag + " is given twice");
  }

  if (options.artifact.empty())
    throw UsageError("no artifact given");
  for (const char *required : {"--weights", "--max-new-tokens"})
    if (!values.count(required))
      throw UsageError(std::string(required) + " is required");
  options.weights = values["--weights"];
  if (options.weights.empty())
    throw UsageError("--weights: empty (a directory or synthetic:SEED)");
  const int prompts = static_cast<int>(values.count("--prompt-ids") + values.count("--prompt") +
                                       values.count("--prompt-file"));
  if (prompts != 1)
    throw UsageError(prompts ? "give one of --prompt-ids, --prompt and --prompt-file"
                             : "--prompt-ids (or --prompt or --prompt-file) is required");
  if (values.count("--prompt-ids"))
    options.promptIds = parseIds(values["--prompt-ids"]);
  if (values.count("--prompt"))
    options.prompt = values["--prompt"];
  if (values.count("--prompt-file"))
    options.promptFile = values["--prompt-file"];
  if (values.count("--tokenizer"))
    options.tokenizer = values["--tokenizer"];
  if ((options.prompt || options.promptFile) && options.tokenizer.empty())
    throw UsageError(std::string(options.prompt ? "--prompt" : "--prompt-file") +
                     " needs --tokenizer (the checkpoint's tokenizer folder)");
  options.maxNewTokens =
      parseInteger<int64_t>("--max-new-tokens", values["--max-new-tokens"], 1, int64_t{1} << 40);
  if (values.count("--temperature")) {
    options.sampling.temperature = parseNumber("--temperature", values["--temperature"]);
    if (options.sampling.temperature < 0)
      throw UsageError("--temperature: must be >= 0");
  }
  if (values.count("--top-p")) {
    options.sampling.topP = parseNumber("--top-p", values["--top-p"]);
    if (!(options.sampling.topP > 0 && options.sampling.topP <= 1))
      throw UsageError("--top-p: must be in (0, 1]");
  }
  if (values.count("--seed"))
    options.sampling.seed =
        parseInteger<uint64_t>("--seed", values["--seed"], 0, std::numeric_limits<uint64_t>::max());
  if (values.count("--context"))
    options.context = parseInteger<int64_t>("--context", values["--context"], 1, int64_t{1} << 40);
  if (values.count("--threads"))
    options.threads = parseInteger<int>("--threads", values["--threads"], 1, 4096);
  if (values.count("--device"))
    options.device = parseInteger<int>("--device", values["--device"], 0, 1023);
  if (values.count("--nproc"))
    options.nproc = parseInteger<int>("--nproc", values["--nproc"], 1, 1024);
  if (values.count("--speculate")) {
    const std::string &how = values["--speculate"];
    if (how == "lookup") {
      options.speculate = how;
    } else if (how.rfind("draft:", 0) == 0 && how.size() > 6) {
      options.speculate = "draft";
      options.draftArtifact = how.substr(6);
    } else {
      throw UsageError("--speculate: " + quoteName(how) + " is not lookup or draft:ARTIFACT");
    }
  }
  for (const char *flag : {"--draft-weights", "--draft-tokens", "--ngram-min", "--ngram-max"})
    if (values.count(flag) && options.speculate.empty())
      throw UsageError(std::string(flag) + " needs --speculate");
  if (values.count("--draft-weights") != (options.speculate == "draft" ? 1u : 0u))
    throw UsageError(options.speculate == "draft"
                         ? "--speculate draft:ARTIFACT needs --draft-weights"
                         : "--draft-weights is for --speculate draft:ARTIFACT");
  if (values.count("--draft-weights"))
    options.draftWeights = values["--draft-weights"];
  if (values.count("--draft-tokens"))
    options.draftTokens = parseInteger<int64_t>("--draft-tokens", values["--draft-tokens"], 1, 256);
  if (values.count("--ngram-min"))
    options.ngramMin = parseInteger<int>("--ngram-min", values["--ngram-min"], 1, 64);
  if (values.count("--ngram-max"))
    options.ngramMax = parseInteger<int>("--ngram-max", values["--ngram-max"], 1, 64);
  if (options.ngramMin > options.ngramMax)
    throw UsageError("--ngram-min " + std::to_string(options.ngramMin) + " exceeds --ngram-max " +
                     std::to_string(options.ngramMax));
  return options;
}

std::string humanBytes(uint64_t bytes) {
  static const char *const kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double value = static_cast<double>(bytes);
  int unit = 0;
  while (value >= 1024 && unit < 4) {
    value /= 1024;
    ++unit;
  }
  char text[32];
  std::snprintf(text, sizeof text, unit == 0 ? "%.0f %s" : "%.1f %s", value, kUnits[unit]);
  return text;
}

std::string milliseconds(double ms) {
  char text[32];
  std::snprintf(text, sizeof text, "%.3f", ms);
  return text;
}

// The weight loading bar: redrawn in place on a terminal (at most every
// 100 ms), nothing elsewhere; the caller prints a summary line at the end.
class ProgressBar {
public:
  ProgressBar(std::ostream &err, bool terminal) : err_(err), terminal_(terminal) {}

  void update(uint64_t done, uint64_t total) {
    if (!terminal_ || total == 0)
      return;
    const Clock::time_point now = Clock::now();
    if (drawn_ && done < total && now - lastDraw_ < std::chrono::milliseconds(100))
      return;
    lastDraw_ = now;
    drawn_ = true;
    constexpr int kWidth = 30;
    const int filled = static_cast<int>(kWidth * done / total);
    err_ << "\rloading weights [" << std::string(filled, '#') << std::string(kWidth - filled, '.')
         << "] " << static_cast<int>(100 * done / total) << "% " << humanBytes(done) << " / "
         << humanBytes(total) << std::flush;
  }

  // Ends the bar's line, if one was drawn.
  void finish() {
    if (drawn_)
      err_ << "\n";
    drawn_ = false;
  }

private:
  std::ostream &err_;
  bool terminal_;
  bool drawn_ = false;
  Clock::time_point lastDraw_;
};

double msSince(Clock::time_point start, Clock::time_point end) {
  return std::chrono::duration<double, std::milli>(end - start).count();
}

// A prompt file's text, read whole (at most 1 GiB).
std::string readPromptFile(const std::string &path) {
  try {
    return readInputFile(path, uint64_t{1} << 30, "a prompt");
  } catch (const std::runtime_error &error) {
    throw std::runtime_error(std::string("--prompt-file: ") + error.what());
  }
}

int run(const Options &options, std::ostream &out, std::ostream &err, bool errIsTerminal) {
  // What can be refused without the weights is refused before loading them.
  Artifact artifact = Artifact::load(options.artifact);
  const ModelFacts model = readModelFacts(artifact);
  std::shared_ptr<const text::Tokenizer> tokenizer;
  std::vector<int32_t> promptIds = options.promptIds;
  std::string promptFlag = "--prompt-ids";
  if (!options.tokenizer.empty()) {
    tokenizer = text::Tokenizer::load(options.tokenizer);
    if (tokenizer->idLimit() > model.vocabSize)
      throw std::runtime_error("--tokenizer: " + tokenizer->source() + " has " +
                               std::to_string(tokenizer->idLimit()) +
                               " token ids; the model's "
                               "vocabulary has " +
                               std::to_string(model.vocabSize));
    if (options.prompt || options.promptFile) {
      promptFlag = options.prompt ? "--prompt" : "--prompt-file";
      try {
        promptIds = tokenizer->encode(options.prompt ? *options.prompt
                                                     : readPromptFile(*options.promptFile));
      } catch (const std::runtime_error &error) {
        throw std::runtime_error(promptFlag + ": " + error.what());
      }
      if (promptIds.empty())
        throw std::runtime_error(promptFlag + ": the prompt has no tokens");
    }
  }
  for (int32_t id : promptIds)
    if (id >= model.vocabSize)
      throw std::runtime_error(promptFlag + ": token id " + std::to_string(id) +
                               " is outside the vocabulary 0.." +
                               std::to_string(model.vocabSize - 1));
  const int64_t context = options.context ? options.context : defaultContextLength(model);
  // The last generated token is never fed back.
  const int64_t needed = static_cast<int64_t>(promptIds.size()) + options.maxNewTokens - 1;
  if (needed > context)
    throw std::runtime_error(std::to_string(promptIds.size()) + " prompt tokens and " +
                             std::to_string(options.maxNewTokens) +
                             " new tokens need a context of " + std::to_string(needed) +
                             "; it holds " + std::to_string(context) + " (--context)");
  Sampler sampler(options.sampling);
  // Speculation needs the verify entry point, and drafts fewer than it takes.
  const artifact::EntryPoint *verify = artifact.findEntryPoint("verify");
  const int64_t verifyTokens = verify ? verify->max_tokens() : 0;
  if (!options.speculate.empty()) {
    if (verifyTokens < 2)
      throw std::runtime_error("--speculate: " + quoteName(options.artifact) +
                               " has no verify entry point (compile it with kilnc "
                               "--verify-tokens N)");
    if (options.draftTokens > verifyTokens - 1)
      throw std::runtime_error("--draft-tokens " + std::to_string(options.draftTokens) +
                               ": the verify entry takes " + std::to_string(verifyTokens) +
                               " tokens, the last accepted one and at most " +
                               std::to_string(verifyTokens - 1) + " drafts");
  }

  ProgressBar bar(err, errIsTerminal);
  EngineOptions engineOptions;
  engineOptions.weights = options.weights;
  engineOptions.checkWeights = options.checkWeights;
  engineOptions.contextLength = options.context;
  engineOptions.threads = options.threads;
  engineOptions.device = options.device;
  engineOptions.progress = [&](uint64_t done, uint64_t total) { bar.update(done, total); };
  const Clock::time_point loadStart = Clock::now();
  std::unique_ptr<Engine> engine;
  try {
    engine = Engine::create(std::move(artifact), engineOptions);
  } catch (...) {
    bar.finish();
    throw;
  }
  bar.finish();
  const Artifact &loaded = engine->artifact();
  char seconds[32];
  std::snprintf(seconds, sizeof seconds, "%.2f", msSince(loadStart, Clock::now()) / 1000);
  const flatbuffers::String *modelName = loaded->model()->name();
  // The CPU runs x86 artifacts on its threads; a GPU is named.
  const std::string runsOn = loaded->target()->kind() == artifact::TargetKind::X86
                                 ? std::to_string(engine->numThreads()) + " threads"
                                 : "on " + engine->device();
  const std::string ranks = engine->worldSize() > 1
                                ? " (rank " + std::to_string(engine->rank()) + " of " +
                                      std::to_string(engine->worldSize()) + ")"
                                : "";
  std::ostringstream line; // one write: ranks share stderr
  line << "kiln-run: " << (modelName ? modelName->str() : "model") << ranks << " for "
       << describeTarget(*loaded->target()) << ": " << humanBytes(engine->weightBytes())
       << " of weights loaded in " << seconds << " s; " << runsOn << ", context "
       << engine->contextLength() << ", KV cache " << humanBytes(engine->kvCacheBytes()) << "\n";
  err << line.str() << std::flush;

  // With a tokenizer the text streams out as it comes, whole characters
  // only, and the EOS token ends it.
  text::Utf8Stream stream;
  const auto show = [&](int32_t id) {
    if (!tokenizer)
      return;
    // Ids the model has and the tokenizer lacks (a padded vocabulary) show
    // as U+FFFD.
    out << stream.push(id < tokenizer->idLimit() && tokenizer->hasToken(id)
                           ? tokenizer->tokenBytes(id, /*skipSpecialTokens=*/true)
                           : std::string("\xef\xbf\xbd"))
        << std::flush;
  };
  const std::optional<int32_t> eos = tokenizer ? tokenizer->eos() : std::nullopt;
  // Speculative decoding: the drafter, and for a draft model its engine.
  std::unique_ptr<speculate::Drafter> drafter;
  std::unique_ptr<Engine> draftEngine;
  std::optional<speculate::SpeculativeDecoder> speculative;
  if (!options.speculate.empty()) {
    const int64_t draftTokens = options.draftTokens ? options.draftTokens : verifyTokens - 1;
    if (options.speculate == "lookup") {
      drafter = std::make_unique<speculate::LookupDrafter>(speculate::LookupOptions{
          options.ngramMin, options.ngramMax, static_cast<int>(draftTokens)});
    } else {
      EngineOptions draftOptions = engineOptions;
      draftOptions.weights = options.draftWeights;
      draftOptions.progress = nullptr;
      try {
        draftEngine = Engine::load(options.draftArtifact, draftOptions);
      } catch (const std::exception &error) {
        throw std::runtime_error("--speculate draft: " + std::string(error.what()));
      }
      drafter = std::make_unique<speculate::ModelDrafter>(*draftEngine, engine->vocabSize());
    }
    speculative.emplace(*engine, 0, *drafter, sampler, draftTokens);
  }

  std::vector<int32_t> generated;
  generated.reserve(static_cast<size_t>(options.maxNewTokens));
  const Clock::time_point start = Clock::now();
  std::vector<float> logits = engine->prefill(promptIds);
  generated.push_back(sampler.sample(logits));
  const Clock::time_point firstToken = Clock::now();
  show(generated.back());
  if (speculative)
    speculative->start(promptIds, generated.back());
  while (static_cast<int64_t>(generated.size()) < options.maxNewTokens && generated.back() != eos) {
    if (speculative) {
      // A step yields one or more tokens; EOS among them ends the reply.
      for (int32_t token :
           speculative->step(options.maxNewTokens - static_cast<int64_t>(generated.size()))) {
        generated.push_back(token);
        show(token);
        if (token == eos)
          break;
      }
      continue;
    }
    logits = engine->decode(generated.back());
    generated.push_back(sampler.sample(logits));
    show(generated.back());
  }
  const Clock::time_point end = Clock::now();

  if (tokenizer) {
    out << stream.finish() << "\n";
    if (generated.back() == eos)
      out << "(stopped at the EOS token)\n";
  } else {
    for (size_t i = 0; i < generated.size(); ++i)
      out << (i ? "," : "") << generated[i];
    out << "\n";
  }
  const double ttft = msSince(start, firstToken);
  const int64_t decoded = static_cast<int64_t>(generated.size()) - 1;
  // With one new token there is no decode step: its time is the prefill's.
  const double perToken =
      decoded > 0 ? msSince(firstToken, end) / static_cast<double>(decoded) : ttft;
  out << "time to first token: " << milliseconds(ttft) << " ms\n"
      << "time per output token: " << milliseconds(perToken) << " ms\n"
      << "tokens/s: " << milliseconds(perToken > 0 ? 1000 / perToken : 0) << "\n";
  if (speculative) {
    const speculate::SpeculationStats &stats = speculative->stats();
    char perStep[32];
    std::snprintf(perStep, sizeof perStep, "%.2f", stats.tokensPerStep());
    out << "speculation (" << options.speculate << "): " << stats.steps << " steps ("
        << stats.verifyCalls << " verify calls), " << perStep << " tokens a step ("
        << stats.accepted << " of " << stats.drafted << " drafts accepted)\n";
  }
  return 0;
}

// An error message on one line.
std::string oneLine(std::string text) {
  for (char &c : text)
    if (c == '\n' || c == '\r')
      c = ' ';
  return text;
}

} // namespace

int kilnRunMain(const std::vector<std::string> &args, std::ostream &out, std::ostream &err,
                bool errIsTerminal) {
  Options options;
  try {
    options = parseArgs(args);
  } catch (const UsageError &error) {
    err << "kiln-run: error: " << oneLine(error.what()) << " (kiln-run --help for usage)\n";
    return 2;
  }
  if (options.help) {
    out << kUsage;
    return 0;
  }
  if (options.nproc > 1) {
    out << std::flush;
    return launchRanks("kiln-run", withoutNproc(args), options.nproc, err);
  }
  try {
    return run(options, out, err, errIsTerminal);
  } catch (const std::exception &error) {
    out << std::flush;
    const char *rank = std::getenv("KILN_RANK");
    err << ("kiln-run: error: " + (rank && *rank ? "rank " + std::string(rank) + ": " : "") +
            oneLine(error.what()) + "\n")
        << std::flush;
    // A failed collective leaves work on the device that waits for a lost
    // peer; exiting now skips teardown that would wait for it.
    if (dynamic_cast<const CollectiveError *>(&error)) {
      err << std::flush;
      std::_Exit(1);
    }
    return 1;
  }
}

} // namespace kiln
