#include "runtime/engine/ModelFacts.h"

#include "runtime/artifact/Artifact.h"
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

int64_t positive(const nlohmann::json &config, const std::string &source,
                 const std::string &field) {
  auto it = config.find(field);
  if (it == config.end())
    fail(source, field, "a positive integer", "nothing");
  if (!it->is_number_integer() || it->get<int64_t>() < 1)
    fail(source, field, "a positive integer", it->dump());
  return it->get<int64_t>();
}

} // namespace

ModelFacts readModelFacts(const std::string &configJson, const std::string &source) {
  nlohmann::json config;
  try {
    config = nlohmann::json::parse(configJson);
  } catch (const nlohmann::json::parse_error &error) {
    throw RuntimeError(source + ": not JSON: " + error.what());
  }
  if (!config.is_object())
    throw RuntimeError(source + ": expected a JSON object, got " + config.dump().substr(0, 40));
  ModelFacts facts;
  auto type = config.find("model_type");
  if (type == config.end() || !type->is_string() || type->get<std::string>().empty())
    fail(source, "model_type", "a model family name",
         type == config.end() ? "nothing" : type->dump());
  facts.modelType = type->get<std::string>();
  facts.vocabSize = positive(config, source, "vocab_size");
  facts.maxPositions = positive(config, source, "max_position_embeddings");
  return facts;
}

ModelFacts readModelFacts(const Artifact &artifact) {
  const auto *text = artifact->model() ? artifact->model()->config_json() : nullptr;
  return readModelFacts(text ? text->str() : std::string(),
                        artifact.source() + ": model.config_json");
}

int64_t defaultContextLength(const ModelFacts &model) {
  return std::min<int64_t>(kDefaultContextLength, model.maxPositions);
}

} // namespace kiln
