// libFuzzer target for config.json: any input must either parse into a
// Config that passes validation, or fail with ConfigError (or the strict
// JSON reader's StrictJsonError); nothing else may escape, no input may
// crash, recurse without bound or run long (sizes are bounded before
// anything is built). A config that parses must survive a second parse of
// the same text with the same result.
#include "models/muse_spark/Config.h"
#include "runtime/core/StrictJson.h"

#include <cstdint>
#include <cstdlib>
#include <string>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  const std::string text(reinterpret_cast<const char *>(data), size);
  try {
    const kiln::muse_spark::Config config = kiln::muse_spark::parseConfig(text, "fuzz.json");
    kiln::muse_spark::validateConfig(config, "fuzz.json");
    const kiln::muse_spark::Config again = kiln::muse_spark::parseConfig(text, "fuzz.json");
    if (again.numHiddenLayers != config.numHiddenLayers || again.vocabSize != config.vocabSize)
      std::abort();
  } catch (const kiln::muse_spark::ConfigError &) {
  } catch (const kiln::StrictJsonError &) {
  }
  return 0;
}
