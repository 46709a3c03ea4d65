// The plan dialect: dialect, attributes and types (generated from PlanDialect.td).
#pragma once

#include "mlir/IR/Attributes.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/Dialect.h"
#include "mlir/IR/Types.h"

#include "dialects/plan/PlanDialect.h.inc"

#define GET_ATTRDEF_CLASSES
#include "dialects/plan/PlanAttrs.h.inc"

#define GET_TYPEDEF_CLASSES
#include "dialects/plan/PlanTypes.h.inc"
