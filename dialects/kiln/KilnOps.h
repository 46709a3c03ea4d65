// Ops of the kiln graph dialect (declarations generated from KilnOps.td).
#pragma once

#include "mlir/Bytecode/BytecodeOpInterface.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/OpDefinition.h"
#include "mlir/IR/SymbolTable.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"

#include "dialects/kiln/KilnDialect.h"

#include <string>

#define GET_OP_CLASSES
#include "dialects/kiln/KilnOps.h.inc"
