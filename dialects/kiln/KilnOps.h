// Ops of the kiln graph dialect (declarations generated from KilnOps.td).
#pragma once

#include "mlir/Bytecode/BytecodeOpInterface.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/OpDefinition.h"
#include "mlir/IR/SymbolTable.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"

#include "dialects/kiln/KilnAttrs.h"
#include "dialects/kiln/KilnDialect.h"
#include "dialects/kiln/KilnInterfaces.h"
#include "dialects/kiln/KilnTraits.h"

#include <string>

#define GET_OP_CLASSES
#include "dialects/kiln/KilnOps.h.inc"

namespace kiln {

// Whether the linear computes a router's logits (its result feeds
// kiln.router_topk): those pick experts, so every implementation keeps its
// input exact (f32) where other linears may read it rounded to bf16, as
// tensor cores do. The lowering and the interpreter's bf16 mode both ask.
bool isRouterLogits(LinearOp op);

} // namespace kiln
