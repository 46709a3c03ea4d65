// Builds the kiln graph of one Muse Spark forward pass from a config.
#pragma once

#include "models/muse_spark/Config.h"
#include "models/muse_spark/KvScales.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/OwningOpRef.h"

#include <cstdint>
#include <functional>

namespace mlir {
class MLIRContext;
} // namespace mlir

namespace kiln::muse_spark {

// The element type of the KV cache, which attention rounds its keys and
// values to (kiln.attention's kv_type): FP8 is e4m3 with per-tensor scales
// (kv_scales).
enum class KvDType { F32, BF16, FP8 };

struct GraphOptions {
  // Tokens of the forward pass (a prefill of T tokens at given positions).
  int64_t tokens = 16;
  // BF16 everywhere, or NVFP4 experts in layers 1..L-2 (model card section 3).
  WeightFormat format = WeightFormat::BF16;
  // Logits of the last token only ([1, V]) instead of every token ([T, V]).
  bool lastTokenLogits = false;
  // The KV cache's element type: bf16 as the serving stacks keep it, or f32.
  KvDType kvType = KvDType::BF16;
  // An FP8 cache's scales, one pair per layer (KvScales.h); empty: 1 each.
  std::vector<KvScale> kvScales;
  // Called after each decoder layer is built: (layers done, layers in all).
  std::function<void(int64_t, int64_t)> progress;
};

// Returns a module holding `func.func @forward(%ids: tensor<Txi32>,
// %positions: tensor<Txi32>) -> tensor<TxVxf32>` (or `1xV` with
// lastTokenLogits). Every op carries a name location with the checkpoint
// module it belongs to ("model.layers.3.self_attn.q_proj"), which the report
// uses to count ops per layer. The caller's context must have the kiln and
// func dialects loaded.
mlir::OwningOpRef<mlir::ModuleOp>
buildForwardGraph(mlir::MLIRContext &context, const Config &config, const GraphOptions &options);

} // namespace kiln::muse_spark
