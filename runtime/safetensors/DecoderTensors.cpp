#include "runtime/safetensors/DecoderTensors.h"

#include "runtime/core/QuoteName.h"

#include <cctype>

namespace kiln {
namespace {

// The number after `marker` at `at` when digits follow it and then a '.'.
int64_t numberAfter(const std::string &name, size_t at, size_t markerSize) {
  size_t end = at + markerSize;
  int64_t value = 0;
  bool digits = false;
  while (end < name.size() && std::isdigit(static_cast<unsigned char>(name[end])) &&
         value < (1 << 24)) {
    value = value * 10 + (name[end++] - '0');
    digits = true;
  }
  return digits && end < name.size() && name[end] == '.' ? value : -1;
}

} // namespace

int64_t decoderLayerOf(const std::string &name) {
  static const std::string kLayers = "layers.";
  for (size_t at = name.find(kLayers); at != std::string::npos; at = name.find(kLayers, at + 1)) {
    if (at > 0 && name[at - 1] != '.')
      continue;
    if (const int64_t layer = numberAfter(name, at, kLayers.size()); layer >= 0)
      return layer;
  }
  return -1;
}

int64_t expertOf(const std::string &name) {
  static const std::string kExperts = ".experts.";
  const size_t at = name.find(kExperts);
  return at == std::string::npos ? -1 : numberAfter(name, at, kExperts.size());
}

std::string tensorsBeyond(const std::vector<std::string> &names, int64_t lastLayer, int64_t experts,
                          const std::string &source, const std::string &model) {
  for (const std::string &name : names) {
    const int64_t layer = decoderLayerOf(name);
    if (layer < 0)
      continue;
    if (layer > lastLayer)
      return source + " holds " + quoteName(name) + " of layer " + std::to_string(layer) +
             ", but " + model + " has layers 0.." + std::to_string(lastLayer) +
             " (from a config with fewer layers than the checkpoint's? num_hidden_layers)";
    if (const int64_t expert = expertOf(name); experts > 0 && expert >= experts)
      return source + " holds " + quoteName(name) + " of expert " + std::to_string(expert) +
             ", but " + model + " has experts 0.." + std::to_string(experts - 1) +
             " (from a config with fewer experts than the checkpoint's? num_experts)";
  }
  return "";
}

} // namespace kiln
