#include "runtime/engine/SyntheticWeights.h"

#include "runtime/cpu/RuntimeError.h"

#include <map>
#include <mutex>

namespace kiln {
namespace {

// A function-local static: registrations run during static initialisation,
// in any order relative to this file's.
std::map<std::string, SyntheticWeightsFactory> &registry() {
  static std::map<std::string, SyntheticWeightsFactory> factories;
  return factories;
}

std::mutex &registryMutex() {
  static std::mutex mutex;
  return mutex;
}

} // namespace

bool registerSyntheticWeights(const std::string &modelType, SyntheticWeightsFactory factory) {
  std::lock_guard<std::mutex> lock(registryMutex());
  registry()[modelType] = std::move(factory);
  return true;
}

std::vector<std::string> syntheticWeightFamilies() {
  std::lock_guard<std::mutex> lock(registryMutex());
  std::vector<std::string> names;
  for (const auto &entry : registry())
    names.push_back(entry.first);
  return names;
}

std::unique_ptr<SyntheticWeightSource> makeSyntheticWeights(const std::string &modelType,
                                                            const std::string &configJson,
                                                            const std::string &weightFormat,
                                                            uint64_t seed) {
  SyntheticWeightsFactory factory;
  {
    std::lock_guard<std::mutex> lock(registryMutex());
    auto it = registry().find(modelType);
    if (it != registry().end())
      factory = it->second;
  }
  if (!factory) {
    std::string known;
    for (const std::string &name : syntheticWeightFamilies())
      known += (known.empty() ? "" : ", ") + name;
    throw RuntimeError("synthetic weights: no generator for model type '" + modelType +
                       "' is linked into this program (there are: " +
                       (known.empty() ? std::string("none") : known) + ")");
  }
  return factory(configJson, weightFormat, seed);
}

} // namespace kiln
