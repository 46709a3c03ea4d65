// Ops of the plan dialect (generated from PlanOps.td).
#pragma once

#include "mlir/Bytecode/BytecodeOpInterface.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/OpDefinition.h"
#include "mlir/IR/RegionKindInterface.h"
#include "mlir/IR/SymbolTable.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"

#include "dialects/plan/PlanDialect.h"

#define GET_OP_CLASSES
#include "dialects/plan/PlanOps.h.inc"
