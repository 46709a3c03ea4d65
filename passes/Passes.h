// Kiln graph passes: declarations and registration, generated from Passes.td.
#pragma once

#include "mlir/Pass/Pass.h"

#include "dialects/kiln/KilnDialect.h"
#include "dialects/plan/PlanDialect.h"
#include "mlir/Dialect/Shard/IR/ShardDialect.h"

#include <memory>

namespace kiln {

#define GEN_PASS_DECL
#include "passes/Passes.h.inc"

#define GEN_PASS_REGISTRATION
#include "passes/Passes.h.inc"

} // namespace kiln
