// kiln-ckpt: writes synthetic Muse Spark checkpoints and checks checkpoints
// against a config. Plain argv parsing so that it builds without LLVM.
//
// Exit status: 0 success, 1 a failed check or a write error, 2 bad arguments
// (including a config that cannot be loaded).
#include "models/muse_spark/CheckpointSynth.h"
#include "models/muse_spark/Config.h"
#include "runtime/core/QuoteName.h"

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <exception>
#include <iostream>
#include <optional>
#include <string>
#include <unistd.h>
#include <vector>

using namespace kiln::muse_spark;

namespace {

const char *const kToolUsage =
    "usage: kiln-ckpt <command> [options]\n"
    "\n"
    "Synthetic Muse Spark checkpoints (model card section 3).\n"
    "\n"
    "commands:\n"
    "  synth CONFIG --format bf16|nvfp4 --seed N -o DIR [--max-shard-size BYTES]\n"
    "        write the checkpoint of CONFIG for seed N into DIR\n"
    "  check PATH [--config CONFIG] [--no-values]\n"
    "        validate a checkpoint directory or .safetensors file\n"
    "\n"
    "Run `kiln-ckpt <command> --help` for details.\n";

const char *const kSynthUsage =
    "usage: kiln-ckpt synth CONFIG --format bf16|nvfp4 --seed N -o DIR\n"
    "                       [--max-shard-size BYTES]\n"
    "\n"
    "Writes every tensor of CONFIG's checkpoint manifest with deterministic\n"
    "synthetic values (same CONFIG, format and seed: byte-identical files) as\n"
    "shards model-XXXXX-of-YYYYY.safetensors, the index and config.json.\n"
    "\n"
    "  CONFIG                  a config.json path or a built-in name\n"
    "                          (muse-spark-tiny, muse-spark-small, ...)\n"
    "  --format bf16|nvfp4     all-BF16, or NVFP4 experts for layers 1..L-2\n"
    "  --seed N                unsigned 64-bit seed\n"
    "  -o, --output DIR        output directory (created if needed)\n"
    "  --max-shard-size BYTES  tensor bytes per shard; suffixes K, M, G (powers\n"
    "                          of 1024) allowed; default 2G\n";

const char *const kCheckUsage =
    "usage: kiln-ckpt check PATH [--config CONFIG] [--no-values]\n"
    "\n"
    "Validates a checkpoint directory (index and shards) or one .safetensors\n"
    "file. With --config, compares every tensor's name, dtype and shape with\n"
    "the manifest of CONFIG in the detected format (NVFP4 when expert weights\n"
    "are U8 or config.json has quantization_config). Then reads every float\n"
    "tensor and reports each that holds NaN or infinite values (how many, and\n"
    "the first's element); --no-values skips the reading. Prints\n"
    "\"ok: N tensors, B bytes\" or the problems (exit status 1).\n";

// Thrown for bad arguments: one line, exit status 2.
struct UsageError {
  std::string message;
};

bool isHelp(const std::string &arg) { return arg == "--help" || arg == "-h"; }

// Parses a decimal uint64 with an optional K/M/G binary suffix (if allowed).
std::optional<uint64_t> parseUnsigned(const std::string &text, bool allowSuffix) {
  if (text.empty() || text[0] < '0' || text[0] > '9')
    return std::nullopt;
  uint64_t value = 0;
  size_t i = 0;
  for (; i < text.size() && text[i] >= '0' && text[i] <= '9'; ++i) {
    const uint64_t digit = static_cast<uint64_t>(text[i] - '0');
    if (value > (UINT64_MAX - digit) / 10)
      return std::nullopt;
    value = value * 10 + digit;
  }
  if (i == text.size())
    return value;
  if (!allowSuffix || i + 1 != text.size())
    return std::nullopt;
  int shift = 0;
  switch (text[i]) {
  case 'K':
  case 'k':
    shift = 10;
    break;
  case 'M':
  case 'm':
    shift = 20;
    break;
  case 'G':
  case 'g':
    shift = 30;
    break;
  default:
    return std::nullopt;
  }
  if (value > (UINT64_MAX >> shift))
    return std::nullopt;
  return value << shift;
}

// Splits argv into positionals and "--name value" / "--name=value" options.
struct ParsedArgs {
  std::vector<std::string> positionals;
  std::vector<std::pair<std::string, std::string>> options;
  bool help = false;
};

// `known` options take a value; `flags` take none.
ParsedArgs parseArgs(int argc, char **argv, int first, const std::vector<std::string> &known,
                     const std::string &command, const std::vector<std::string> &flags = {}) {
  ParsedArgs parsed;
  for (int i = first; i < argc; ++i) {
    std::string arg = argv[i];
    if (isHelp(arg)) {
      parsed.help = true;
      continue;
    }
    if (arg.size() < 2 || arg[0] != '-') {
      parsed.positionals.push_back(arg);
      continue;
    }
    std::string value;
    bool hasValue = false;
    const size_t eq = arg.find('=');
    if (arg.rfind("--", 0) == 0 && eq != std::string::npos) {
      value = arg.substr(eq + 1);
      arg = arg.substr(0, eq);
      hasValue = true;
    }
    bool isKnown = false, isFlag = false;
    for (const std::string &name : known)
      isKnown |= name == arg;
    for (const std::string &name : flags)
      isFlag |= name == arg;
    if (!isKnown && !isFlag)
      throw UsageError{command + ": unknown option " + kiln::quoteName(arg)};
    if (isFlag && hasValue)
      throw UsageError{command + ": option " + kiln::quoteName(arg) + " takes no value"};
    if (isKnown && !hasValue) {
      if (i + 1 >= argc)
        throw UsageError{command + ": option " + kiln::quoteName(arg) + " needs a value"};
      value = argv[++i];
    }
    for (const auto &option : parsed.options)
      if (option.first == arg)
        throw UsageError{command + ": option " + kiln::quoteName(arg) + " given twice"};
    parsed.options.emplace_back(arg, value);
  }
  return parsed;
}

bool flag(const ParsedArgs &args, const std::string &name) {
  for (const auto &entry : args.options)
    if (entry.first == name)
      return true;
  return false;
}

std::optional<std::string> option(const ParsedArgs &args, const std::string &name) {
  for (const auto &entry : args.options)
    if (entry.first == name)
      return entry.second;
  return std::nullopt;
}

Config loadConfigArg(const std::string &command, const std::string &what) {
  try {
    return loadConfig(what);
  } catch (const ConfigError &error) {
    throw UsageError{command + ": " + error.what()};
  }
}

std::string mib(uint64_t bytes) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.1f MiB", bytes / 1048576.0);
  return text;
}

// Progress on stderr: a rewritten line on a terminal, a line per 10%
// otherwise. Shown on a terminal or for checkpoints over 256 MiB.
class ProgressLine {
public:
  ProgressLine(std::string verb, std::string dir)
      : verb_(std::move(verb)), dir_(std::move(dir)), tty_(::isatty(STDERR_FILENO) != 0) {}

  void update(uint64_t done, uint64_t total) {
    if (!tty_ && total <= (256ull << 20))
      return;
    const int percent = total ? static_cast<int>(done * 100 / total) : 100;
    const int step = tty_ ? percent : percent / 10 * 10;
    if (step == lastStep_)
      return;
    lastStep_ = step;
    std::fprintf(stderr, "%skiln-ckpt: %s %s: %s / %s (%d%%)%s", tty_ ? "\r" : "", verb_.c_str(),
                 dir_.c_str(), mib(done).c_str(), mib(total).c_str(), percent, tty_ ? "" : "\n");
    shown_ = true;
  }

  void finish() {
    if (shown_ && tty_)
      std::fputc('\n', stderr);
  }

private:
  std::string verb_, dir_;
  bool tty_;
  bool shown_ = false;
  int lastStep_ = -1;
};

int runSynth(int argc, char **argv) {
  const std::string cmd = "synth";
  const ParsedArgs args =
      parseArgs(argc, argv, 2, {"--format", "--seed", "-o", "--output", "--max-shard-size"}, cmd);
  if (args.help) {
    std::fputs(kSynthUsage, stdout);
    return 0;
  }
  if (args.positionals.size() != 1)
    throw UsageError{cmd + ": expected one CONFIG argument, got " +
                     std::to_string(args.positionals.size())};
  const std::optional<std::string> format = option(args, "--format");
  const std::optional<std::string> seedText = option(args, "--seed");
  std::optional<std::string> dir = option(args, "-o");
  if (const std::optional<std::string> longDir = option(args, "--output")) {
    if (dir)
      throw UsageError{cmd + ": give either -o or --output, not both"};
    dir = longDir;
  }
  if (!format)
    throw UsageError{cmd + ": missing --format bf16|nvfp4"};
  if (!seedText)
    throw UsageError{cmd + ": missing --seed N"};
  if (!dir || dir->empty())
    throw UsageError{cmd + ": missing -o DIR"};

  WeightFormat weightFormat;
  if (*format == "bf16")
    weightFormat = WeightFormat::BF16;
  else if (*format == "nvfp4")
    weightFormat = WeightFormat::NVFP4;
  else
    throw UsageError{cmd + ": --format: expected bf16 or nvfp4, got " + kiln::quoteName(*format)};
  const std::optional<uint64_t> seed = parseUnsigned(*seedText, false);
  if (!seed)
    throw UsageError{cmd + ": --seed: expected an unsigned 64-bit integer, got " +
                     kiln::quoteName(*seedText)};
  uint64_t maxShard = 2ull << 30;
  if (const std::optional<std::string> text = option(args, "--max-shard-size")) {
    const std::optional<uint64_t> parsed = parseUnsigned(*text, true);
    if (!parsed || *parsed == 0)
      throw UsageError{cmd +
                       ": --max-shard-size: expected a positive byte "
                       "count (suffix K, M or G allowed), got " +
                       kiln::quoteName(*text)};
    maxShard = *parsed;
  }
  const Config config = loadConfigArg(cmd, args.positionals[0]);

  ProgressLine progress("writing", *dir);
  try {
    writeSyntheticCheckpoint(config, weightFormat, *seed, *dir, maxShard,
                             [&](uint64_t done, uint64_t total) { progress.update(done, total); });
  } catch (const std::exception &error) {
    progress.finish();
    std::fprintf(stderr, "kiln-ckpt: error: %s\n", error.what());
    return 1;
  }
  progress.finish();
  return 0;
}

int runCheck(int argc, char **argv) {
  const std::string cmd = "check";
  const ParsedArgs args = parseArgs(argc, argv, 2, {"--config"}, cmd, {"--no-values"});
  if (args.help) {
    std::fputs(kCheckUsage, stdout);
    return 0;
  }
  if (args.positionals.size() != 1)
    throw UsageError{cmd + ": expected one PATH argument, got " +
                     std::to_string(args.positionals.size())};
  const std::string &path = args.positionals[0];
  std::optional<Config> config;
  if (const std::optional<std::string> name = option(args, "--config"))
    config = loadConfigArg(cmd, *name);

  const bool values = !flag(args, "--no-values");
  ProgressLine progress("reading", path);
  const CheckpointCheck check =
      checkCheckpoint(path, config ? &*config : nullptr, values,
                      [&](uint64_t done, uint64_t total) { progress.update(done, total); });
  progress.finish();
  if (check.ok()) {
    std::printf("ok: %zu tensors, %llu bytes\n", check.numTensors,
                static_cast<unsigned long long>(check.totalBytes));
    return 0;
  }
  // Long lists (a checkpoint of another config) are cut after 50 lines.
  const size_t kShown = 50;
  for (size_t i = 0; i < check.problems.size() && i < kShown; ++i) {
    const std::string &problem = check.problems[i];
    // Reader errors already start with the file they are about.
    if (problem.rfind(path, 0) == 0)
      std::fprintf(stderr, "%s\n", problem.c_str());
    else
      std::fprintf(stderr, "%s: %s\n", path.c_str(), problem.c_str());
  }
  if (check.problems.size() > kShown)
    std::fprintf(stderr, "%s: ... and %zu more problems\n", path.c_str(),
                 check.problems.size() - kShown);
  std::fprintf(stderr, "%s: %zu problem%s\n", path.c_str(), check.problems.size(),
               check.problems.size() == 1 ? "" : "s");
  return 1;
}

} // namespace

int main(int argc, char **argv) {
  try {
    if (argc < 2)
      throw UsageError{"missing command (synth or check); see --help"};
    const std::string command = argv[1];
    if (isHelp(command)) {
      std::fputs(kToolUsage, stdout);
      return 0;
    }
    if (command == "synth")
      return runSynth(argc, argv);
    if (command == "check")
      return runCheck(argc, argv);
    throw UsageError{"unknown command " + kiln::quoteName(command) + " (expected synth or check)"};
  } catch (const UsageError &error) {
    std::fprintf(stderr, "kiln-ckpt: error: %s\n", error.message.c_str());
    return 2;
  } catch (const std::exception &error) {
    std::fprintf(stderr, "kiln-ckpt: error: %s\n", error.what());
    return 1;
  }
}
