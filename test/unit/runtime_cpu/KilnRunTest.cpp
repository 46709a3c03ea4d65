// kiln-run: generation output and timings, the loading progress on a
// terminal and elsewhere, and a one-line error with a non-zero exit for
// every bad input.
#include "runtime/tools/kiln-run/KilnRun.h"

#include "runtime/engine/Engine.h"
#include "runtime/engine/Sampler.h"

#include "test/unit/runtime_cpu/EngineTestArtifact.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

namespace kiln {
namespace {

using namespace kiln::runtime_test;

struct Result {
  int status;
  std::string out, err;
};

#define EXPECT_HAS(text, part)                                                                     \
  EXPECT_NE(std::string(text).find(part), std::string::npos)                                       \
      << "missing \"" << part << "\" in: " << text

class KilnRunTest : public ::testing::Test {
protected:
  void SetUp() override {
    if (!haveTestCompiler())
      GTEST_SKIP() << "no C compiler to build test kernels";
    std::string pattern = ::testing::TempDir() + "/kiln-run-XXXXXX";
    ASSERT_NE(::mkdtemp(pattern.data()), nullptr);
    dir_ = pattern;
    artifact_ = write("test.kiln", testArtifact());
  }
  void TearDown() override {
    std::error_code error;
    if (!dir_.empty())
      std::filesystem::remove_all(dir_, error);
  }

  std::string write(const std::string &name, const TestArtifact &a) {
    const std::vector<uint8_t> bytes = serialize(a);
    const std::string path = dir_ + "/" + name;
    std::ofstream(path, std::ios::binary)
        .write(reinterpret_cast<const char *>(bytes.data()), bytes.size());
    return path;
  }

  static Result run(const std::vector<std::string> &args, bool terminal = false) {
    std::ostringstream out, err;
    const int status = kilnRunMain(args, out, err, terminal);
    return {status, out.str(), err.str()};
  }

  // Arguments that work, with `extra` appended.
  std::vector<std::string> args(std::vector<std::string> extra = {}) const {
    std::vector<std::string> all = {artifact_,
                                    "--weights",
                                    "synthetic:5",
                                    "--prompt-ids",
                                    "1,2,3,500,1023",
                                    "--max-new-tokens",
                                    "6",
                                    "--threads",
                                    "2"};
    all.insert(all.end(), extra.begin(), extra.end());
    return all;
  }

  // A failure: the status, and exactly one line on stderr naming `part`.
  static void expectError(const Result &result, int status, const std::string &part) {
    EXPECT_EQ(result.status, status) << result.err;
    EXPECT_EQ(result.err.rfind("kiln-run: error: ", 0), 0u) << result.err;
    EXPECT_EQ(std::count(result.err.begin(), result.err.end(), '\n'), 1) << result.err;
    EXPECT_HAS(result.err, part);
  }

  std::string dir_, artifact_;
};

std::string firstLine(const std::string &text) { return text.substr(0, text.find('\n')); }

TEST_F(KilnRunTest, Help) {
  const Result result = run({"--help"});
  EXPECT_EQ(result.status, 0);
  EXPECT_HAS(result.out, "usage: kiln-run ARTIFACT");
  EXPECT_HAS(result.out, "--top-p");
}

TEST_F(KilnRunTest, GreedyGenerationMatchesTheEngine) {
  const Result result = run(args());
  ASSERT_EQ(result.status, 0) << result.err;

  EngineOptions options;
  options.weights = "synthetic:5";
  options.threads = 2;
  auto engine = Engine::load(artifact_, options);
  std::vector<float> logits = engine->prefill({1, 2, 3, 500, 1023});
  std::string expected;
  for (int i = 0; i < 6; ++i) {
    const int32_t token = argmax(logits.data(), logits.size());
    expected += (i ? "," : "") + std::to_string(token);
    if (i < 5)
      logits = engine->decode(token);
  }
  EXPECT_EQ(firstLine(result.out), expected);
  EXPECT_HAS(result.out, "\ntime to first token: ");
  EXPECT_HAS(result.out, " ms\ntime per output token: ");
  EXPECT_HAS(result.out, " ms\ntokens/s: ");
  // Not a terminal: no bar, one summary line.
  EXPECT_EQ(result.err.find('\r'), std::string::npos);
  EXPECT_EQ(std::count(result.err.begin(), result.err.end(), '\n'), 1);
  EXPECT_HAS(result.err, "kiln-run: muse-spark-tiny for x86 sapphirerapids: "
                         "1.1 MiB of weights loaded in ");
  EXPECT_HAS(result.err, "2 threads, context 4096");
}

TEST_F(KilnRunTest, ProgressBarOnATerminal) {
  const Result result = run(args(), true);
  ASSERT_EQ(result.status, 0) << result.err;
  EXPECT_HAS(result.err, "\rloading weights [");
  EXPECT_HAS(result.err, "##############################] 100% 1.1 MiB");
  EXPECT_HAS(result.err, "\nkiln-run: muse-spark-tiny");
}

TEST_F(KilnRunTest, SamplingIsSeeded) {
  const auto sampled = [&](const std::string &seed) {
    Result result = run(
        args({"--temperature", "1.5", "--top-p", "0.95", "--seed", seed, "--max-new-tokens=12"}));
    EXPECT_EQ(result.status, 2); // --max-new-tokens given twice
    result = run({artifact_, "--weights=synthetic:5", "--prompt-ids=4,5", "--max-new-tokens=12",
                  "--temperature=1.5", "--top-p=0.95", "--seed=" + seed, "--context=64"});
    EXPECT_EQ(result.status, 0) << result.err;
    return firstLine(result.out);
  };
  const std::string a = sampled("1");
  EXPECT_EQ(std::count(a.begin(), a.end(), ','), 11);
  EXPECT_EQ(a, sampled("1"));
  EXPECT_NE(a, sampled("2"));
}

TEST_F(KilnRunTest, UsageErrors) {
  expectError(run({}), 2, "no artifact given");
  expectError(run(args({"--frobnicate", "1"})), 2, "unknown option '--frobnicate'");
  expectError(run(args({"-x"})), 2, "unknown option '-x'");
  expectError(run(args({"other.kiln"})), 2, "unexpected argument");
  expectError(run({artifact_, "--prompt-ids", "1", "--max-new-tokens", "1"}), 2,
              "--weights is required");
  expectError(run({artifact_, "--weights", "synthetic:1", "--prompt-ids", "1"}), 2,
              "--max-new-tokens is required");
  expectError(run(args({"--seed"})), 2, "--seed needs a value");
  expectError(run(args({"--threads", "2"})), 2, "--threads is given twice");
  const auto withIds = [&](const std::string &ids) {
    return run(
        {artifact_, "--weights", "synthetic:1", "--prompt-ids", ids, "--max-new-tokens", "1"});
  };
  expectError(withIds("1,x,3"), 2, "--prompt-ids: 'x' is not an integer");
  expectError(withIds("-4"), 2, "'-4' is not an integer in 0..");
  expectError(withIds("1,,2"), 2, "'' is not an integer");
  expectError(withIds(""), 2, "'' is not an integer");
  expectError(withIds("99999999999"), 2, "'99999999999'");
  expectError(run(args({"--top-p", "1.5"})), 2, "--top-p: must be in (0, 1]");
  expectError(run(args({"--top-p", "0"})), 2, "--top-p: must be in (0, 1]");
  expectError(run(args({"--temperature", "-1"})), 2, "must be >= 0");
  expectError(run(args({"--temperature", "hot"})), 2, "'hot' is not a number");
  expectError(run(args({"--temperature", "nan"})), 2, "'nan' is not a number");
  expectError(
      run({artifact_, "--weights", "synthetic:1", "--prompt-ids", "1", "--max-new-tokens", "0"}), 2,
      "--max-new-tokens: '0' is not an integer in 1..");
  expectError(run(args({"--context", "0"})), 2, "--context: '0'");
  expectError(run(args({"--seed", "-3"})), 2, "--seed: '-3'");
}

TEST_F(KilnRunTest, RuntimeErrors) {
  expectError(run(args({"--context", "9"})), 1,
              "5 prompt tokens and 6 new tokens need a context of 10; it "
              "holds 9");
  expectError(run({artifact_, "--weights", "synthetic:1", "--prompt-ids", "1,1024",
                   "--max-new-tokens", "1"}),
              1, "token id 1024 is outside the vocabulary 0..1023");
  std::vector<std::string> missing = args();
  missing[0] = dir_ + "/nothing.kiln";
  expectError(run(missing), 1, "nothing.kiln: cannot open");

  TestArtifact gpu = testArtifact();
  gpu.targetKind = fb::TargetKind::NVPTX;
  gpu.libraryFormat = "ptx";
  gpu.chip = "sm_90";
  std::vector<std::string> wrongTarget = args();
  wrongTarget[0] = write("gpu.kiln", gpu);
  expectError(run(wrongTarget), 1, "artifact is for nvptx sm_90");

  std::vector<std::string> noWeights = args();
  noWeights[2] = dir_ + "/no-checkpoint";
  expectError(run(noWeights), 1, "no-checkpoint");
  std::vector<std::string> badSeed = args();
  badSeed[2] = "synthetic:seven";
  expectError(run(badSeed), 1, "seed 'seven'");

  TestArtifact mismatch = testArtifact();
  mismatch.weights[0].shape = {kHidden, kVocab};
  std::vector<std::string> wrongShape = args();
  wrongShape[0] = write("mismatch.kiln", mismatch);
  expectError(run(wrongShape), 1, "'model.embed_tokens.weight'");

  std::vector<std::string> garbage = args();
  garbage[0] = dir_ + "/garbage.kiln";
  std::ofstream(garbage[0]) << "not an artifact at all";
  expectError(run(garbage), 1, "not a Kiln artifact");
}

} // namespace
} // namespace kiln
