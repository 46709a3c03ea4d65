#include "runtime/artifact/ModelFacts.h"

#include "runtime/artifact/Artifact.h"
#include "runtime/core/StrictJson.h"
#include "runtime/cpu/RuntimeError.h"

#include <nlohmann/json.hpp>

#include <algorithm>

namespace kiln {
namespace {

constexpr int64_t kDefaultContextLength = 4096;

[[noreturn]] void fail(const std::string &source, const std::string &field,
                       const std::string &expected, const std::string &got) {
  throw RuntimeError(source + ": field '" + field + "': expected " + expected + ", got " + got);
}

// What a field holds, for a message: scalars as written (cut to a readable
// length), containers by kind only (dumping a deeply nested one would recurse
// as deep as it goes).
std::string describe(const nlohmann::json &value) {
  if (value.is_array())
    return "an array";
  if (value.is_object())
    return "an object";
  std::string text =
      value.dump(-1, ' ', /*ensure_ascii=*/true, nlohmann::json::error_handler_t::replace);
  return text.size() > 40 ? text.substr(0, 40) + "..." : text;
}

// At most 2^24, as kilnc bounds the config it compiles: the runtime sizes
// logits and caches from these before anything else checks them.
constexpr int64_t kMaxSize = int64_t{1} << 24;

int64_t positive(const nlohmann::json &config, const std::string &source,
                 const std::string &field) {
  const std::string expected = "an integer in 1.." + std::to_string(kMaxSize);
  auto it = config.find(field);
  if (it == config.end())
    fail(source, field, expected, "nothing");
  if (!it->is_number_integer() || it->get<int64_t>() < 1 || it->get<int64_t>() > kMaxSize)
    fail(source, field, expected, describe(*it));
  return it->get<int64_t>();
}

} // namespace

ModelFacts readModelFacts(const std::string &configJson, const std::string &source) {
  nlohmann::json config;
  try {
    config = parseStrictJson(configJson, source);
  } catch (const StrictJsonError &error) {
    throw RuntimeError(error.what());
  }
  if (!config.is_object())
    throw RuntimeError(source + ": expected a JSON object, got " + describe(config));
  ModelFacts facts;
  auto type = config.find("model_type");
  if (type == config.end() || !type->is_string() || type->get<std::string>().empty())
    fail(source, "model_type", "a model family name",
         type == config.end() ? "nothing" : describe(*type));
  facts.modelType = type->get<std::string>();
  facts.vocabSize = positive(config, source, "vocab_size");
  facts.maxPositions = positive(config, source, "max_position_embeddings");
  return facts;
}

ModelFacts readModelFacts(const Artifact &artifact) { return artifact.modelFacts(); }

int64_t defaultContextLength(const ModelFacts &model) {
  return std::min<int64_t>(kDefaultContextLength, model.maxPositions);
}

} // namespace kiln
