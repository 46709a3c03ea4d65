// What the runtime needs to know of the model an artifact was compiled from,
// read from the artifact's config (the HF config.json kilnc recorded as
// model.config_json): its family and the sizes that bound what may be asked
// of it. The runtime knows no model; the artifact's plan says the rest.
// Artifact::load reads them, so that every tool refuses an artifact whose
// config does not hold them (kiln-dump and kiln-check as kiln-run).
#pragma once

#include <cstdint>
#include <string>

namespace kiln {

class Artifact;

struct ModelFacts {
  std::string modelType;    // config.json's "model_type": "muse_spark"
  int64_t vocabSize = 0;    // token ids are 0 .. vocabSize - 1
  int64_t maxPositions = 0; // "max_position_embeddings"
};

// RuntimeError naming `source`, the field and what was expected where the
// config lacks one or holds something else.
ModelFacts readModelFacts(const std::string &configJson, const std::string &source);
// The facts of a loaded artifact (read when it was loaded).
ModelFacts readModelFacts(const Artifact &artifact);

// The context length used when none is asked for: min(4096, maxPositions).
int64_t defaultContextLength(const ModelFacts &model);

} // namespace kiln
