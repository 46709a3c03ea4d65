// The op interfaces of KilnInterfaces.td (TokenWiseOp).
#pragma once

#include "mlir/IR/OpDefinition.h"

#include "llvm/ADT/SmallVector.h"

#include "dialects/kiln/KilnInterfaces.h.inc"
