// Config parsing and validation against the model card (sections 1 and 6).
#include "models/muse_spark/Config.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <fstream>
#include <string>

namespace kiln::muse_spark {
namespace {

using nlohmann::ordered_json;

std::string builtinText(const std::string &name) {
  std::optional<std::string> text = builtinConfigText(name);
  EXPECT_TRUE(text.has_value()) << name;
  return text.value_or("");
}

// The tiny config as a JSON object, to edit one field for a rejection case.
ordered_json tinyJson() { return ordered_json::parse(builtinText("muse-spark-tiny")); }

// Parses `text` and returns the ConfigError message ("" if none was thrown).
std::string errorOfText(const std::string &text) {
  try {
    parseConfig(text, "test.json");
  } catch (const ConfigError &error) {
    return error.what();
  }
  return "";
}

std::string errorOf(const ordered_json &value) { return errorOfText(value.dump()); }

::testing::AssertionResult mentions(const std::string &message, const std::string &needle) {
  if (message.empty())
    return ::testing::AssertionFailure() << "no ConfigError was thrown";
  if (message.find(needle) == std::string::npos)
    return ::testing::AssertionFailure()
           << "message \"" << message << "\" does not mention \"" << needle << "\"";
  return ::testing::AssertionSuccess();
}

TEST(MuseSparkConfig, BuiltinNamesAreTheThreeConfigs) {
  std::vector<std::string> names = builtinConfigNames();
  std::sort(names.begin(), names.end());
  EXPECT_EQ(names, (std::vector<std::string>{"muse-spark-open-816b-a42b", "muse-spark-small",
                                             "muse-spark-tiny"}));
  EXPECT_FALSE(builtinConfigText("muse-spark-huge").has_value());
}

TEST(MuseSparkConfig, FullConfigMatchesTheModelCard) {
  Config c = loadConfig("muse-spark-open-816b-a42b");
  EXPECT_EQ(c.name, "muse-spark-open-816b-a42b");
  EXPECT_EQ(c.modelType, "muse_spark");
  EXPECT_EQ(c.vocabSize, 202048);
  EXPECT_EQ(c.hiddenSize, 8192);
  EXPECT_EQ(c.numHiddenLayers, 62);
  EXPECT_EQ(c.numAttentionHeads, 96);
  EXPECT_EQ(c.numKeyValueHeads, 8);
  EXPECT_EQ(c.headDim, 128);
  EXPECT_EQ(c.slidingWindow, 2048);
  EXPECT_EQ(c.globalAttentionPeriod, 4);
  EXPECT_DOUBLE_EQ(c.ropeTheta, 10000000.0);
  EXPECT_EQ(c.maxPositionEmbeddings, 1048576);
  EXPECT_DOUBLE_EQ(c.rmsNormEps, 1e-5);
  EXPECT_EQ(c.numExperts, 256);
  EXPECT_EQ(c.numExpertsPerTok, 8);
  EXPECT_EQ(c.moeLatentSize, 4096);
  EXPECT_EQ(c.moeIntermediateSize, 4096);
  EXPECT_FALSE(c.tieWordEmbeddings);
  EXPECT_FALSE(c.quantization.has_value());
  EXPECT_EQ(c.qWidth(), 12288);
  EXPECT_EQ(c.kvWidth(), 1024);
}

TEST(MuseSparkConfig, TinyConfigMatchesTheModelCard) {
  Config c = loadConfig("muse-spark-tiny");
  EXPECT_EQ(c.name, "muse-spark-tiny");
  EXPECT_EQ(c.vocabSize, 1024);
  EXPECT_EQ(c.hiddenSize, 256);
  EXPECT_EQ(c.numHiddenLayers, 4);
  EXPECT_EQ(c.numAttentionHeads, 6);
  EXPECT_EQ(c.numKeyValueHeads, 2);
  EXPECT_EQ(c.headDim, 32);
  EXPECT_EQ(c.slidingWindow, 8);
  EXPECT_EQ(c.globalAttentionPeriod, 4);
  EXPECT_DOUBLE_EQ(c.ropeTheta, 10000000.0);
  EXPECT_EQ(c.maxPositionEmbeddings, 1048576);
  EXPECT_DOUBLE_EQ(c.rmsNormEps, 1e-5);
  EXPECT_EQ(c.numExperts, 16);
  EXPECT_EQ(c.numExpertsPerTok, 4);
  EXPECT_EQ(c.moeLatentSize, 128);
  EXPECT_EQ(c.moeIntermediateSize, 128);
  EXPECT_FALSE(c.tieWordEmbeddings);
  EXPECT_FALSE(c.quantization.has_value());
}

TEST(MuseSparkConfig, SmallConfigMatchesTheModelCard) {
  Config c = loadConfig("muse-spark-small");
  EXPECT_EQ(c.name, "muse-spark-small");
  EXPECT_EQ(c.vocabSize, 32000);
  EXPECT_EQ(c.hiddenSize, 2048);
  EXPECT_EQ(c.numHiddenLayers, 8);
  EXPECT_EQ(c.numAttentionHeads, 24);
  EXPECT_EQ(c.numKeyValueHeads, 4);
  EXPECT_EQ(c.headDim, 128);
  EXPECT_EQ(c.slidingWindow, 256);
  EXPECT_EQ(c.globalAttentionPeriod, 4);
  EXPECT_DOUBLE_EQ(c.ropeTheta, 10000000.0);
  EXPECT_EQ(c.maxPositionEmbeddings, 1048576);
  EXPECT_DOUBLE_EQ(c.rmsNormEps, 1e-5);
  EXPECT_EQ(c.numExperts, 64);
  EXPECT_EQ(c.numExpertsPerTok, 8);
  EXPECT_EQ(c.moeLatentSize, 1024);
  EXPECT_EQ(c.moeIntermediateSize, 1024);
  EXPECT_FALSE(c.tieWordEmbeddings);
}

TEST(MuseSparkConfig, ConfigFilesCarryExactlyTheCardFieldsInOrder) {
  const std::vector<std::string> expected = {"architectures",
                                             "model_type",
                                             "vocab_size",
                                             "hidden_size",
                                             "num_hidden_layers",
                                             "num_attention_heads",
                                             "num_key_value_heads",
                                             "head_dim",
                                             "sliding_window",
                                             "global_attention_period",
                                             "rope_theta",
                                             "max_position_embeddings",
                                             "rms_norm_eps",
                                             "num_experts",
                                             "num_experts_per_tok",
                                             "moe_latent_size",
                                             "moe_intermediate_size",
                                             "tie_word_embeddings",
                                             "torch_dtype"};
  for (const std::string &name : builtinConfigNames()) {
    ordered_json root = ordered_json::parse(builtinText(name));
    std::vector<std::string> keys;
    for (auto it = root.begin(); it != root.end(); ++it)
      keys.push_back(it.key());
    EXPECT_EQ(keys, expected) << name;
    EXPECT_EQ(root["architectures"], ordered_json::array({"MuseSparkForCausalLM"})) << name;
    EXPECT_EQ(root["torch_dtype"], "bfloat16") << name;
  }
}

TEST(MuseSparkConfig, FullLayerPattern) {
  Config c = loadConfig("muse-spark-open-816b-a42b");
  int64_t global = 0;
  for (int64_t i = 0; i < c.numHiddenLayers; ++i) {
    EXPECT_EQ(c.isGlobalLayer(i), (61 - i) % 4 == 0) << "layer " << i;
    global += c.isGlobalLayer(i);
  }
  EXPECT_EQ(global, 16);
  EXPECT_EQ(c.numHiddenLayers - global, 46);
  EXPECT_EQ(c.numGlobalLayers(), 16);
  EXPECT_TRUE(c.isGlobalLayer(61));
  EXPECT_FALSE(c.isGlobalLayer(0));
  EXPECT_TRUE(c.isGlobalLayer(1));
  EXPECT_TRUE(c.isGlobalLayer(57));
  EXPECT_FALSE(c.isGlobalLayer(60));
}

TEST(MuseSparkConfig, TinyLayerPattern) {
  Config c = loadConfig("muse-spark-tiny");
  EXPECT_FALSE(c.isGlobalLayer(0));
  EXPECT_FALSE(c.isGlobalLayer(1));
  EXPECT_FALSE(c.isGlobalLayer(2));
  EXPECT_TRUE(c.isGlobalLayer(3));
  EXPECT_EQ(c.numGlobalLayers(), 1);

  Config small = loadConfig("muse-spark-small");
  EXPECT_EQ(small.numGlobalLayers(), 2); // layers 3 and 7
  EXPECT_TRUE(small.isGlobalLayer(3));
  EXPECT_TRUE(small.isGlobalLayer(7));
}

TEST(MuseSparkConfig, ExpertFormatFollowsQuantization) {
  ordered_json j = tinyJson();
  Config bf16 = parseConfig(j.dump(), "t");
  for (int64_t i = 0; i < 4; ++i)
    EXPECT_EQ(bf16.expertFormat(i), WeightFormat::BF16);

  j["quantization_config"] = {{"quant_method", "modelopt"},
                              {"quant_algo", "NVFP4"},
                              {"group_size", 16},
                              {"exclude_modules", {"lm_head", "*router*"}}};
  Config fp4 = parseConfig(j.dump(), "t");
  ASSERT_TRUE(fp4.quantization.has_value());
  EXPECT_EQ(fp4.quantization->quantMethod, "modelopt");
  EXPECT_EQ(fp4.quantization->quantAlgo, "NVFP4");
  EXPECT_EQ(fp4.quantization->groupSize, 16);
  EXPECT_EQ(fp4.quantization->excludeModules, (std::vector<std::string>{"lm_head", "*router*"}));
  EXPECT_EQ(fp4.expertFormat(0), WeightFormat::BF16);
  EXPECT_EQ(fp4.expertFormat(1), WeightFormat::NVFP4);
  EXPECT_EQ(fp4.expertFormat(2), WeightFormat::NVFP4);
  EXPECT_EQ(fp4.expertFormat(3), WeightFormat::BF16);
}

TEST(MuseSparkConfig, UnknownKeysAndOptionalFieldsAreAccepted) {
  ordered_json j = tinyJson();
  j["transformers_version"] = "4.57.0";
  j["bos_token_id"] = 1;
  j["rope_scaling"] = nullptr;
  j.erase("tie_word_embeddings");
  j["rope_theta"] = 10000; // integers are fine where a number is expected
  Config c = parseConfig(j.dump(), "t");
  EXPECT_FALSE(c.tieWordEmbeddings);
  EXPECT_DOUBLE_EQ(c.ropeTheta, 10000.0);
}

TEST(MuseSparkConfig, LoadsAFileAndNamesItByStem) {
  std::string path = ::testing::TempDir() + "my-proxy-config.json";
  ordered_json j = ordered_json::parse(builtinText("muse-spark-open-816b-a42b"));
  j["num_hidden_layers"] = 4;
  {
    std::ofstream out(path);
    out << j.dump(2);
  }
  Config c = loadConfig(path);
  EXPECT_EQ(c.name, "my-proxy-config");
  EXPECT_EQ(c.numHiddenLayers, 4);
  EXPECT_EQ(c.hiddenSize, 8192);

  Config fromTree =
      loadConfig(std::string(KILN_SOURCE_DIR) + "/models/muse_spark/configs/muse-spark-tiny.json");
  EXPECT_EQ(fromTree.name, "muse-spark-tiny");
  EXPECT_EQ(fromTree.vocabSize, 1024);
}

TEST(MuseSparkConfig, MissingFileAndDirectoryAreRejected) {
  std::string missing = ::testing::TempDir() + "no-such-config.json";
  try {
    loadConfig(missing);
    FAIL() << "expected ConfigError";
  } catch (const ConfigError &error) {
    EXPECT_TRUE(mentions(error.what(), missing + ": cannot open: "));
    EXPECT_TRUE(mentions(error.what(), "No such file"));
  }
  std::string dir = std::string(KILN_SOURCE_DIR) + "/models/muse_spark/configs";
  try {
    loadConfig(dir);
    FAIL() << "expected ConfigError";
  } catch (const ConfigError &error) {
    EXPECT_TRUE(mentions(error.what(), dir + ": cannot open: "));
  }
}

TEST(MuseSparkConfig, ErrorsNameTheSource) {
  EXPECT_TRUE(mentions(errorOfText("{"), "test.json: not valid JSON"));
  try {
    loadConfig("muse-spark-tiny");
  } catch (...) {
    FAIL() << "the built-in tiny config must load";
  }
}

// --- rejection cases: every message names the offending field ---

TEST(MuseSparkConfigReject, HeadsNotDivisibleByKvHeads) {
  ordered_json j = tinyJson();
  j["num_key_value_heads"] = 4; // 6 % 4 != 0
  std::string message = errorOf(j);
  EXPECT_TRUE(mentions(message, "field \"num_attention_heads\""));
  EXPECT_TRUE(mentions(message, "num_key_value_heads"));
  EXPECT_TRUE(mentions(message, "(4)"));
  EXPECT_TRUE(mentions(message, "got 6"));
}

TEST(MuseSparkConfigReject, TopKAboveExperts) {
  ordered_json j = tinyJson();
  j["num_experts_per_tok"] = 17;
  std::string message = errorOf(j);
  EXPECT_TRUE(mentions(message, "field \"num_experts_per_tok\""));
  EXPECT_TRUE(mentions(message, "got 17"));
}

TEST(MuseSparkConfigReject, WindowZero) {
  ordered_json j = tinyJson();
  j["sliding_window"] = 0;
  EXPECT_EQ(errorOf(j), "test.json: field \"sliding_window\": expected a "
                        "positive integer, got 0");
}

TEST(MuseSparkConfigReject, WindowNegative) {
  ordered_json j = tinyJson();
  j["sliding_window"] = -8;
  EXPECT_TRUE(mentions(errorOf(j), "field \"sliding_window\": expected a "
                                   "positive integer, got -8"));
}

TEST(MuseSparkConfigReject, UnknownQuantAlgo) {
  ordered_json j = tinyJson();
  j["quantization_config"] = {
      {"quant_method", "modelopt"}, {"quant_algo", "FP8"}, {"group_size", 16}};
  std::string message = errorOf(j);
  EXPECT_TRUE(mentions(message, "field \"quantization_config.quant_algo\""));
  EXPECT_TRUE(mentions(message, "NVFP4"));
  EXPECT_TRUE(mentions(message, "FP8"));
}

TEST(MuseSparkConfigReject, UnknownQuantMethod) {
  ordered_json j = tinyJson();
  j["quantization_config"] = {{"quant_method", "awq"}, {"quant_algo", "NVFP4"}, {"group_size", 16}};
  EXPECT_TRUE(mentions(errorOf(j), "field \"quantization_config.quant_method\""));
}

TEST(MuseSparkConfigReject, GroupSizeNot16) {
  ordered_json j = tinyJson();
  j["quantization_config"] = {
      {"quant_method", "modelopt"}, {"quant_algo", "NVFP4"}, {"group_size", 32}};
  std::string message = errorOf(j);
  EXPECT_TRUE(mentions(message, "field \"quantization_config.group_size\""));
  EXPECT_TRUE(mentions(message, "got 32"));
}

TEST(MuseSparkConfigReject, QuantizationConfigNotAnObject) {
  ordered_json j = tinyJson();
  j["quantization_config"] = "NVFP4";
  EXPECT_TRUE(mentions(errorOf(j), "field \"quantization_config\": expected "
                                   "an object"));
}

TEST(MuseSparkConfigReject, ExcludeModulesNotStrings) {
  ordered_json j = tinyJson();
  j["quantization_config"] = {{"quant_method", "modelopt"},
                              {"quant_algo", "NVFP4"},
                              {"group_size", 16},
                              {"exclude_modules", {"lm_head", 3}}};
  EXPECT_TRUE(mentions(errorOf(j), "field \"quantization_config.exclude_modules[1]\""));
}

TEST(MuseSparkConfigReject, WrongModelType) {
  ordered_json j = tinyJson();
  j["model_type"] = "llama";
  std::string message = errorOf(j);
  EXPECT_TRUE(mentions(message, "field \"model_type\""));
  EXPECT_TRUE(mentions(message, "\"muse_spark\""));
  EXPECT_TRUE(mentions(message, "\"llama\""));
}

TEST(MuseSparkConfigReject, MissingField) {
  ordered_json j = tinyJson();
  j.erase("num_key_value_heads");
  std::string message = errorOf(j);
  EXPECT_TRUE(mentions(message, "test.json: field \"num_key_value_heads\""));
  EXPECT_TRUE(mentions(message, "missing"));
}

TEST(MuseSparkConfigReject, StringWhereIntegerExpected) {
  ordered_json j = tinyJson();
  j["num_key_value_heads"] = "2";
  EXPECT_EQ(errorOf(j), "test.json: field \"num_key_value_heads\": expected "
                        "an integer, got string \"2\"");
}

TEST(MuseSparkConfigReject, FloatWhereIntegerExpected) {
  ordered_json j = tinyJson();
  j["hidden_size"] = 256.0;
  std::string message = errorOf(j);
  EXPECT_TRUE(mentions(message, "field \"hidden_size\": expected an integer"));
  EXPECT_TRUE(mentions(message, "floating-point"));
}

TEST(MuseSparkConfigReject, BoolWhereIntegerExpected) {
  ordered_json j = tinyJson();
  j["num_experts"] = true;
  EXPECT_TRUE(mentions(errorOf(j), "field \"num_experts\": expected an "
                                   "integer, got boolean true"));
}

TEST(MuseSparkConfigReject, StringWhereNumberExpected) {
  ordered_json j = tinyJson();
  j["rms_norm_eps"] = "1e-5";
  EXPECT_TRUE(mentions(errorOf(j), "field \"rms_norm_eps\": expected a number"));
}

TEST(MuseSparkConfigReject, IntegerTooLargeForInt64) {
  std::string text = tinyJson().dump();
  const std::string from = "\"vocab_size\":1024";
  size_t at = text.find(from);
  ASSERT_NE(at, std::string::npos);
  text.replace(at, from.size(), "\"vocab_size\":18446744073709551615");
  EXPECT_TRUE(mentions(errorOfText(text), "field \"vocab_size\": expected an "
                                          "integer that fits in int64"));
}

TEST(MuseSparkConfigReject, MalformedJson) {
  std::string text = builtinText("muse-spark-tiny");
  text.resize(text.size() / 2);
  std::string message = errorOfText(text);
  EXPECT_TRUE(mentions(message, "test.json: not valid JSON"));
  EXPECT_TRUE(mentions(message, "byte"));
  EXPECT_TRUE(mentions(errorOfText("{\"vocab_size\": 12,}"), "not valid JSON"));
}

TEST(MuseSparkConfigReject, ANumberPastAnyTypeIsAConfigErrorCutShort) {
  // Found by kiln-config-fuzz: nlohmann's out_of_range escaped parseConfig,
  // quoting all of the number.
  const std::string text = "{\"vocab_size\": " + std::string(100000, '6') + "}";
  const std::string message = errorOfText(text);
  EXPECT_TRUE(mentions(message, "test.json: not valid JSON: "));
  EXPECT_TRUE(mentions(message, "number overflow"));
  EXPECT_LT(message.size(), 400u);
}

TEST(MuseSparkConfigReject, TopLevelNotAnObject) {
  EXPECT_TRUE(mentions(errorOfText("[1, 2, 3]"), "test.json: expected a JSON "
                                                 "object"));
}

TEST(MuseSparkConfigReject, HeadDimOdd) {
  ordered_json j = tinyJson();
  j["head_dim"] = 33;
  std::string message = errorOf(j);
  EXPECT_TRUE(mentions(message, "field \"head_dim\""));
  EXPECT_TRUE(mentions(message, "even"));
}

TEST(MuseSparkConfigReject, TiedEmbeddings) {
  ordered_json j = tinyJson();
  j["tie_word_embeddings"] = true;
  EXPECT_EQ(errorOf(j), "test.json: field \"tie_word_embeddings\": expected "
                        "false: Muse Spark has a separate lm_head, got true");
}

TEST(MuseSparkConfigReject, HiddenNotMultipleOf32) {
  ordered_json j = tinyJson();
  j["hidden_size"] = 240;
  std::string message = errorOf(j);
  EXPECT_TRUE(mentions(message, "field \"hidden_size\""));
  EXPECT_TRUE(mentions(message, "multiple of 32"));
  EXPECT_TRUE(mentions(message, "NVFP4"));
}

TEST(MuseSparkConfigReject, LatentAndIntermediateNotMultiplesOf32) {
  ordered_json j = tinyJson();
  j["moe_latent_size"] = 112;
  EXPECT_TRUE(mentions(errorOf(j), "field \"moe_latent_size\""));
  j = tinyJson();
  j["moe_intermediate_size"] = 144;
  EXPECT_TRUE(mentions(errorOf(j), "field \"moe_intermediate_size\""));
}

TEST(MuseSparkConfigReject, GlobalPeriodZero) {
  ordered_json j = tinyJson();
  j["global_attention_period"] = 0;
  EXPECT_TRUE(mentions(errorOf(j), "field \"global_attention_period\""));
}

TEST(MuseSparkConfigReject, RopeThetaAndEpsOutOfRange) {
  ordered_json j = tinyJson();
  j["rope_theta"] = 0.0;
  EXPECT_TRUE(mentions(errorOf(j), "field \"rope_theta\""));
  j = tinyJson();
  j["rms_norm_eps"] = 1.5;
  EXPECT_TRUE(mentions(errorOf(j), "field \"rms_norm_eps\""));
  j["rms_norm_eps"] = 0;
  EXPECT_TRUE(mentions(errorOf(j), "field \"rms_norm_eps\""));
}

TEST(MuseSparkConfigReject, NonPositiveSizes) {
  for (const char *field :
       {"vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
        "num_key_value_heads", "head_dim", "max_position_embeddings", "num_experts",
        "num_experts_per_tok", "moe_latent_size", "moe_intermediate_size"}) {
    ordered_json j = tinyJson();
    j[field] = 0;
    EXPECT_TRUE(
        mentions(errorOf(j), std::string("field \"") + field + "\": expected a positive integer"))
        << field;
    j[field] = -32;
    EXPECT_TRUE(mentions(errorOf(j), std::string("field \"") + field + "\"")) << field;
  }
}

// Sizes past any model are refused before anything is built from them
// (2^40 layers ran the compiler until LLVM aborted, issue 19), each field
// by itself and the parameter count of sizes that pass one by one.
TEST(MuseSparkConfigReject, LargerThanAnyModel) {
  const std::pair<const char *, int64_t> tooLarge[] = {
      {"num_hidden_layers", int64_t(1) << 40},
      {"num_experts", int64_t(1) << 20},
      {"vocab_size", int64_t(1) << 25},
      {"hidden_size", int64_t(1) << 17},
      {"head_dim", 2048},
      {"num_attention_heads", 2048},
      {"moe_latent_size", int64_t(1) << 17},
      {"moe_intermediate_size", int64_t(1) << 17},
      {"max_position_embeddings", int64_t(1) << 30},
      {"global_attention_period", 4096}};
  for (const auto &[field, value] : tooLarge) {
    ordered_json j = tinyJson();
    j[field] = value;
    if (std::string(field) == "num_attention_heads")
      j["num_key_value_heads"] = 2; // still a divisor
    const std::string message = errorOf(j);
    EXPECT_TRUE(mentions(message, std::string("field \"") + field + "\": expected at most "))
        << message;
    EXPECT_TRUE(mentions(message, "got " + std::to_string(value))) << message;
  }
  ordered_json window = tinyJson();
  window["sliding_window"] = 2048;
  window["max_position_embeddings"] = 1024;
  EXPECT_TRUE(
      mentions(errorOf(window),
               "field \"sliding_window\": expected at most 1024 (max_position_embeddings)"));
  ordered_json wide = tinyJson();
  wide["num_experts"] = 16384;
  wide["moe_latent_size"] = 65536;
  wide["moe_intermediate_size"] = 65536;
  EXPECT_TRUE(mentions(errorOf(wide), "the model is too large"));
  EXPECT_TRUE(mentions(errorOf(wide), "parameters, more than 8796093022208"));
}

TEST(MuseSparkConfigReject, ValidateConfigChecksAProgrammaticConfig) {
  Config c = loadConfig("muse-spark-tiny");
  EXPECT_NO_THROW(validateConfig(c, "tiny"));
  c.numExpertsPerTok = c.numExperts + 1;
  EXPECT_THROW(validateConfig(c, "tiny"), ConfigError);
}

} // namespace
} // namespace kiln::muse_spark
