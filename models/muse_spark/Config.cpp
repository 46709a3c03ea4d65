// Parsing and validation of a Muse Spark config.json (model card sections 1
// and 3). Every error is a ConfigError of the form
//   <source>: field "<name>": expected <what>, got <what>
#include "models/muse_spark/Config.h"

#include "runtime/core/InputFile.h"
#include "runtime/core/QuoteName.h"
#include "runtime/core/StrictJson.h"

#include <nlohmann/json.hpp>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>
#include <sys/stat.h>

namespace kiln::muse_spark {
namespace {

// Configs are a few hundred bytes; anything past this is not one (and is not
// read into memory whole).
constexpr size_t kMaxConfigBytes = size_t(1) << 20;

using nlohmann::json;

[[noreturn]] void fail(const std::string &source, const std::string &field,
                       const std::string &expected, const std::string &got) {
  throw ConfigError(source + ": field \"" + field + "\": expected " + expected + ", got " + got);
}

// A short description of a JSON value for "got ..." in messages.
std::string describe(const json &value) {
  // Whole characters only, cut past about 60 bytes (a value can be 1 MiB).
  const std::string text = printableText(value.dump(), 60);
  switch (value.type()) {
  case json::value_t::null:
    return "null";
  case json::value_t::boolean:
    return "boolean " + text;
  case json::value_t::string:
    return "string " + text;
  case json::value_t::number_integer:
  case json::value_t::number_unsigned:
    return "integer " + text;
  case json::value_t::number_float:
    return "floating-point number " + text;
  case json::value_t::array:
    return "array " + text;
  case json::value_t::object:
    return "object " + text;
  default:
    return text;
  }
}

// Looks up a required field; a missing one is an error naming it.
const json &require(const json &object, const std::string &source, const std::string &prefix,
                    const char *key, const char *expected) {
  auto it = object.find(key);
  if (it == object.end())
    fail(source, prefix + key, expected, "nothing (the field is missing)");
  return *it;
}

int64_t asInt64(const json &value, const std::string &source, const std::string &field) {
  if (value.is_number_unsigned()) {
    uint64_t v = value.get<uint64_t>();
    if (v > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
      fail(source, field, "an integer that fits in int64", describe(value));
    return static_cast<int64_t>(v);
  }
  if (value.is_number_integer())
    return value.get<int64_t>();
  fail(source, field, "an integer", describe(value));
}

double asNumber(const json &value, const std::string &source, const std::string &field) {
  if (!value.is_number())
    fail(source, field, "a number", describe(value));
  double v = value.get<double>();
  if (!std::isfinite(v))
    fail(source, field, "a finite number", describe(value));
  return v;
}

bool asBool(const json &value, const std::string &source, const std::string &field) {
  if (!value.is_boolean())
    fail(source, field, "a boolean", describe(value));
  return value.get<bool>();
}

std::string asString(const json &value, const std::string &source, const std::string &field) {
  if (!value.is_string())
    fail(source, field, "a string", describe(value));
  return value.get<std::string>();
}

int64_t requireInt(const json &object, const std::string &source, const char *key) {
  return asInt64(require(object, source, "", key, "an integer"), source, key);
}

double requireNumber(const json &object, const std::string &source, const char *key) {
  return asNumber(require(object, source, "", key, "a number"), source, key);
}

Quantization parseQuantization(const json &value, const std::string &source) {
  const std::string prefix = "quantization_config.";
  if (!value.is_object())
    fail(source, "quantization_config", "an object", describe(value));
  Quantization quant;
  quant.quantMethod = asString(require(value, source, prefix, "quant_method", "a string"), source,
                               prefix + "quant_method");
  quant.quantAlgo = asString(require(value, source, prefix, "quant_algo", "a string"), source,
                             prefix + "quant_algo");
  quant.groupSize = asInt64(require(value, source, prefix, "group_size", "an integer"), source,
                            prefix + "group_size");
  auto excluded = value.find("exclude_modules");
  if (excluded != value.end()) {
    const std::string field = prefix + "exclude_modules";
    if (!excluded->is_array())
      fail(source, field, "an array of strings", describe(*excluded));
    quant.excludeModules.reserve(excluded->size());
    for (size_t i = 0; i < excluded->size(); ++i)
      quant.excludeModules.push_back(
          asString((*excluded)[i], source, field + "[" + std::to_string(i) + "]"));
  }
  return quant;
}

void requirePositive(int64_t value, const std::string &source, const char *field) {
  if (value <= 0)
    fail(source, field, "a positive integer", std::to_string(value));
}

// Sizes past any real model (Muse Spark Open's are 62 layers, hidden 8192,
// 96 heads of 128, 256 experts, a 202048-entry vocabulary, 2^20 positions)
// by a wide margin: a config beyond one is a mistake or an attack, and
// would otherwise run the compiler out of memory (2^40 layers did).
constexpr int64_t kMaxLayers = 1024, kMaxWidth = 65536, kMaxHeads = 1024, kMaxHeadDim = 1024;
constexpr int64_t kMaxVocab = int64_t(1) << 24, kMaxExperts = 16384, kMaxExpertsPerToken = 256;
constexpr int64_t kMaxPositions = int64_t(1) << 24;
// Parameters (about 2^39.6 for Muse Spark Open).
constexpr int64_t kMaxParameters = int64_t(1) << 43;

void requireAtMost(int64_t value, int64_t most, const std::string &source, const char *field,
                   const std::string &than) {
  if (value > most)
    fail(source, field, "at most " + std::to_string(most) + " (" + than + ")",
         std::to_string(value));
}

// NVFP4 scales groups of 16 input elements and MXFP4 groups of 32: the input
// dimension of every quantisable projection must be a whole number of groups.
void requireMultipleOf32(int64_t value, const std::string &source, const char *field) {
  if (value % 32 != 0)
    fail(source, field,
         "a multiple of 32 (NVFP4 groups of 16 and MXFP4 groups of 32 must "
         "tile the input dimension)",
         std::to_string(value));
}

std::string formatDouble(double value) {
  std::ostringstream out;
  out.precision(17);
  out << value;
  return out.str();
}

// int64 arithmetic that remembers whether it ever overflowed.
struct Checked {
  int64_t value = 0;
  bool ok = true;
  Checked(int64_t v) : value(v) {}
  Checked(int64_t v, bool o) : value(v), ok(o) {}
  friend Checked operator*(Checked a, Checked b) {
    int64_t result;
    bool overflow = __builtin_mul_overflow(a.value, b.value, &result);
    return {result, a.ok && b.ok && !overflow};
  }
  friend Checked operator+(Checked a, Checked b) {
    int64_t result;
    bool overflow = __builtin_add_overflow(a.value, b.value, &result);
    return {result, a.ok && b.ok && !overflow};
  }
};

// The BF16 parameter count of the checkpoint (model card section 3), or
// nullopt if some product overflows int64. Expects positive sizes.
std::optional<int64_t> checkedParameterCount(const Config &c) {
  Checked h = c.hiddenSize, q = Checked(c.numAttentionHeads) * c.headDim,
          kv = Checked(c.numKeyValueHeads) * c.headDim, lat = c.moeLatentSize,
          inter = c.moeIntermediateSize, e = c.numExperts;
  Checked attention = h * (q + kv + kv) + q * h + Checked(2) * c.headDim;
  Checked norms = Checked(6) * h;
  Checked latent = Checked(2) * lat * h + lat;
  Checked experts = e * (Checked(3) * lat * inter + lat);
  Checked layer = attention + norms + e * h + latent + experts;
  Checked total = Checked(2) * c.vocabSize * h + h + layer * c.numHiddenLayers;
  if (!total.ok)
    return std::nullopt;
  return total.value;
}

} // namespace

int64_t Config::numGlobalLayers() const {
  if (numHiddenLayers <= 0 || globalAttentionPeriod <= 0)
    return 0;
  return (numHiddenLayers - 1) / globalAttentionPeriod + 1;
}

WeightFormat Config::expertFormat(int64_t layer) const {
  if (quantization && layer > 0 && layer < numHiddenLayers - 1)
    return WeightFormat::NVFP4;
  return WeightFormat::BF16;
}

void validateConfig(const Config &config, const std::string &source) {
  if (config.modelType != "muse_spark")
    fail(source, "model_type", "\"muse_spark\"", printableText(json(config.modelType).dump(), 60));

  requirePositive(config.vocabSize, source, "vocab_size");
  requirePositive(config.hiddenSize, source, "hidden_size");
  requirePositive(config.numHiddenLayers, source, "num_hidden_layers");
  requirePositive(config.numAttentionHeads, source, "num_attention_heads");
  requirePositive(config.numKeyValueHeads, source, "num_key_value_heads");
  requirePositive(config.headDim, source, "head_dim");
  requirePositive(config.slidingWindow, source, "sliding_window");
  requirePositive(config.globalAttentionPeriod, source, "global_attention_period");
  requirePositive(config.maxPositionEmbeddings, source, "max_position_embeddings");
  requirePositive(config.numExperts, source, "num_experts");
  requirePositive(config.numExpertsPerTok, source, "num_experts_per_tok");
  requirePositive(config.moeLatentSize, source, "moe_latent_size");
  requirePositive(config.moeIntermediateSize, source, "moe_intermediate_size");

  const std::string beyond = "beyond any model Kiln compiles";
  requireAtMost(config.vocabSize, kMaxVocab, source, "vocab_size", beyond);
  requireAtMost(config.hiddenSize, kMaxWidth, source, "hidden_size", beyond);
  requireAtMost(config.numHiddenLayers, kMaxLayers, source, "num_hidden_layers", beyond);
  requireAtMost(config.numAttentionHeads, kMaxHeads, source, "num_attention_heads", beyond);
  requireAtMost(config.headDim, kMaxHeadDim, source, "head_dim", beyond);
  requireAtMost(config.maxPositionEmbeddings, kMaxPositions, source, "max_position_embeddings",
                beyond);
  requireAtMost(config.slidingWindow, config.maxPositionEmbeddings, source, "sliding_window",
                "max_position_embeddings");
  requireAtMost(config.globalAttentionPeriod, kMaxLayers, source, "global_attention_period",
                beyond);
  requireAtMost(config.numExperts, kMaxExperts, source, "num_experts", beyond);
  requireAtMost(config.numExpertsPerTok, kMaxExpertsPerToken, source, "num_experts_per_tok",
                beyond);
  requireAtMost(config.moeLatentSize, kMaxWidth, source, "moe_latent_size", beyond);
  requireAtMost(config.moeIntermediateSize, kMaxWidth, source, "moe_intermediate_size", beyond);

  if (config.numAttentionHeads % config.numKeyValueHeads != 0)
    fail(source, "num_attention_heads",
         "a multiple of num_key_value_heads (" + std::to_string(config.numKeyValueHeads) + ")",
         std::to_string(config.numAttentionHeads) + " (" +
             std::to_string(config.numAttentionHeads) + " % " +
             std::to_string(config.numKeyValueHeads) + " = " +
             std::to_string(config.numAttentionHeads % config.numKeyValueHeads) + ")");
  if (config.numExpertsPerTok > config.numExperts)
    fail(source, "num_experts_per_tok",
         "at most num_experts (" + std::to_string(config.numExperts) + ")",
         std::to_string(config.numExpertsPerTok));
  if (config.headDim % 2 != 0)
    fail(source, "head_dim", "an even integer (rotary embedding rotates pairs of channels)",
         std::to_string(config.headDim));
  requireMultipleOf32(config.hiddenSize, source, "hidden_size");
  requireMultipleOf32(config.moeLatentSize, source, "moe_latent_size");
  requireMultipleOf32(config.moeIntermediateSize, source, "moe_intermediate_size");

  if (!std::isfinite(config.ropeTheta) || !(config.ropeTheta > 0))
    fail(source, "rope_theta", "a positive number", formatDouble(config.ropeTheta));
  if (!(config.rmsNormEps > 0 && config.rmsNormEps < 1))
    fail(source, "rms_norm_eps", "a number in (0, 1)", formatDouble(config.rmsNormEps));

  if (config.tieWordEmbeddings)
    fail(source, "tie_word_embeddings", "false: Muse Spark has a separate lm_head", "true");

  if (config.quantization) {
    const Quantization &quant = *config.quantization;
    if (quant.quantMethod != "modelopt")
      fail(source, "quantization_config.quant_method", "\"modelopt\" (the only supported value)",
           printableText(json(quant.quantMethod).dump(), 60));
    if (quant.quantAlgo != "NVFP4")
      fail(source, "quantization_config.quant_algo", "\"NVFP4\" (the only supported value)",
           printableText(json(quant.quantAlgo).dump(), 60));
    if (quant.groupSize != 16)
      fail(source, "quantization_config.group_size", "16 (NVFP4 scales groups of 16 elements)",
           std::to_string(quant.groupSize));
  }

  // Every tensor, and the parameter count of the whole checkpoint, must be
  // representable as int64.
  const std::optional<int64_t> parameters = checkedParameterCount(config);
  if (!parameters)
    throw ConfigError(source + ": the model is too large: its parameter count does not "
                               "fit in int64");
  if (*parameters > kMaxParameters)
    throw ConfigError(source + ": the model is too large: " + std::to_string(*parameters) +
                      " parameters, more than " + std::to_string(kMaxParameters) + " (" + beyond +
                      ")");
}

Config parseConfig(const std::string &jsonText, const std::string &source) {
  if (jsonText.size() > kMaxConfigBytes)
    throw ConfigError(source + ": " + std::to_string(jsonText.size()) +
                      " bytes, larger than any config (" + std::to_string(kMaxConfigBytes) +
                      " bytes at most)");
  json root;
  try {
    root = parseStrictJson(jsonText, source);
  } catch (const StrictJsonError &error) {
    throw ConfigError(error.what());
  }
  if (!root.is_object())
    throw ConfigError(source + ": expected a JSON object at the top level, got " + describe(root));

  Config config;
  config.modelType =
      asString(require(root, source, "", "model_type", "\"muse_spark\""), source, "model_type");
  if (config.modelType != "muse_spark")
    fail(source, "model_type", "\"muse_spark\"", printableText(json(config.modelType).dump(), 60));
  config.vocabSize = requireInt(root, source, "vocab_size");
  config.hiddenSize = requireInt(root, source, "hidden_size");
  config.numHiddenLayers = requireInt(root, source, "num_hidden_layers");
  config.numAttentionHeads = requireInt(root, source, "num_attention_heads");
  config.numKeyValueHeads = requireInt(root, source, "num_key_value_heads");
  config.headDim = requireInt(root, source, "head_dim");
  config.slidingWindow = requireInt(root, source, "sliding_window");
  config.globalAttentionPeriod = requireInt(root, source, "global_attention_period");
  config.ropeTheta = requireNumber(root, source, "rope_theta");
  config.maxPositionEmbeddings = requireInt(root, source, "max_position_embeddings");
  config.rmsNormEps = requireNumber(root, source, "rms_norm_eps");
  config.numExperts = requireInt(root, source, "num_experts");
  config.numExpertsPerTok = requireInt(root, source, "num_experts_per_tok");
  config.moeLatentSize = requireInt(root, source, "moe_latent_size");
  config.moeIntermediateSize = requireInt(root, source, "moe_intermediate_size");

  auto tie = root.find("tie_word_embeddings");
  if (tie != root.end())
    config.tieWordEmbeddings = asBool(*tie, source, "tie_word_embeddings");

  auto quant = root.find("quantization_config");
  if (quant != root.end())
    config.quantization = parseQuantization(*quant, source);

  validateConfig(config, source);
  return config;
}

Config loadConfig(const std::string &pathOrName) {
  if (std::optional<std::string> text = builtinConfigText(pathOrName)) {
    Config config = parseConfig(*text, "<builtin " + pathOrName + ">");
    config.name = pathOrName;
    return config;
  }

  struct stat info;
  if (::stat(pathOrName.c_str(), &info) != 0) {
    int error = errno;
    std::string known;
    for (const std::string &name : builtinConfigNames())
      known += (known.empty() ? "" : ", ") + name;
    throw ConfigError(pathOrName + ": cannot open: " + std::strerror(error) +
                      " (neither a config file nor a built-in config: " + known + ")");
  }
  if (!S_ISREG(info.st_mode))
    throw ConfigError(pathOrName + ": cannot open: " + inputFileProblem(pathOrName));
  if (static_cast<uint64_t>(info.st_size) > kMaxConfigBytes)
    throw ConfigError(pathOrName + ": " + std::to_string(info.st_size) +
                      " bytes, larger than any config (" + std::to_string(kMaxConfigBytes) +
                      " bytes at most)");
  std::string text;
  try {
    text = readInputFile(pathOrName, kMaxConfigBytes, "a config");
  } catch (const std::runtime_error &error) {
    throw ConfigError(std::string("cannot read: ") + error.what());
  }

  Config config = parseConfig(text, pathOrName);
  config.name = std::filesystem::path(pathOrName).stem().string();
  return config;
}

} // namespace kiln::muse_spark
