#include "models/muse_spark/KvScales.h"

#include "runtime/core/InputFile.h"
#include "runtime/core/StrictJson.h"

#include <nlohmann/json.hpp>

#include <cmath>
#include <map>

namespace kiln::muse_spark {

std::string keyScaleName(int64_t layer) {
  return "model.layers." + std::to_string(layer) + ".self_attn.k_scale";
}
std::string valueScaleName(int64_t layer) {
  return "model.layers." + std::to_string(layer) + ".self_attn.v_scale";
}

std::vector<KvScale> readKvScales(const std::string &path, const Config &config) {
  nlohmann::json json;
  try {
    json = parseStrictJson(readInputFile(path, 16u << 20, "a KV scales file"), path);
  } catch (const std::exception &error) {
    throw ConfigError(error.what());
  }
  if (!json.is_object())
    throw ConfigError(path + ": expected a JSON object of KV scales (\"" + keyScaleName(0) +
                      "\": number, ...), got " + json.type_name());
  // Each name a layer's scale, to where it goes.
  std::map<std::string, double *> slots;
  std::vector<KvScale> scales(config.numHiddenLayers);
  for (int64_t layer = 0; layer < config.numHiddenLayers; ++layer) {
    slots[keyScaleName(layer)] = &scales[layer].keys;
    slots[valueScaleName(layer)] = &scales[layer].values;
  }
  for (const auto &[name, value] : json.items()) {
    auto slot = slots.find(name);
    if (slot == slots.end())
      throw ConfigError(path + ": \"" + name + "\": not a KV scale of " + config.name + "'s " +
                        std::to_string(config.numHiddenLayers) +
                        " layers (expected model.layers.{i}.self_attn.k_scale or v_scale)");
    const double scale = value.is_number() ? value.get<double>() : NAN;
    if (!(scale > 0) || !std::isfinite(scale))
      throw ConfigError(path + ": \"" + name + "\": expected a positive finite number, got " +
                        value.dump());
    *slot->second = scale;
    slots.erase(slot);
  }
  if (!slots.empty())
    throw ConfigError(path + ": \"" + slots.begin()->first + "\": missing (every layer's k_scale " +
                      "and v_scale are needed; " + std::to_string(slots.size()) + " missing)");
  return scales;
}

std::string kvScalesJson(const std::vector<KvScale> &scales) {
  nlohmann::json json = nlohmann::json::object();
  for (size_t layer = 0; layer < scales.size(); ++layer) {
    json[keyScaleName(layer)] = scales[layer].keys;
    json[valueScaleName(layer)] = scales[layer].values;
  }
  return json.dump(1) + "\n";
}

} // namespace kiln::muse_spark
