// The checkpoint tensors a Muse Spark config needs: names, shapes and dtypes
// exactly as the model card (section 3) gives them, in BF16 or NVFP4 form.
// The graph builder, the checkpoint writer and the weight binder all use this
// one list, so a name is spelled in one place.
#pragma once

#include "models/muse_spark/Config.h"
#include "runtime/core/DType.h"

#include <cstdint>
#include <string>
#include <vector>

namespace kiln::muse_spark {

// Which part of the model a tensor belongs to, for the parameter budget.
enum class WeightPart {
  Embedding, // model.embed_tokens
  Head,      // lm_head
  Attention, // q/k/v/o projections and q/k norms
  Router,    // mlp.router
  Latent,    // mlp.pooler, mlp.unpooler, mlp.expert_input_norm
  Experts,   // mlp.experts.*
  Norms,     // layer norms, residual gates, model.norm
};
const char *weightPartName(WeightPart part);

struct TensorSpec {
  std::string name;
  std::vector<int64_t> shape;
  DType dtype;
  WeightPart part;
  int64_t layer = -1;  // -1 for tensors outside the decoder layers
  int64_t expert = -1; // -1 unless the tensor belongs to one expert
  // Number of model parameters this tensor stores: elements, except packed
  // NVFP4 (two per byte) and quantisation scales (zero: metadata).
  int64_t parameters = 0;
};

// Every tensor of the checkpoint, in a fixed order: embed, then layer by layer
// (attention, norms, router, pooler, experts 0..E-1, unpooler, ...), then
// model.norm and lm_head. With format NVFP4, experts of layers 1..L-2 are
// stored as `weight` (U8 [out, in/2]), `weight_scale` (F8_E4M3 [out, in/16]),
// `weight_scale_2` (F32 []) and `input_scale` (F32 []).
std::vector<TensorSpec> checkpointManifest(const Config &config, WeightFormat format);

// Names used by the graph builder and the checkpoint writer.
std::string layerPrefix(int64_t layer);                  // "model.layers.3."
std::string expertPrefix(int64_t layer, int64_t expert); // "model.layers.3.mlp.experts.7."

} // namespace kiln::muse_spark
