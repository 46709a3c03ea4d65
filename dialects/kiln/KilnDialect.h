// The kiln graph dialect (declarations generated from KilnDialect.td).
#pragma once

#include "mlir/IR/Dialect.h"

#include "dialects/kiln/KilnDialect.h.inc"
