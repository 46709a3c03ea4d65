#include "dialects/kiln/KilnDialect.h"
#include "dialects/kiln/KilnOps.h"

#include "dialects/kiln/KilnDialect.cpp.inc"

namespace kiln {

void KilnDialect::initialize() {
  addOperations<
#define GET_OP_LIST
#include "dialects/kiln/KilnOps.cpp.inc"
      >();
}

} // namespace kiln
