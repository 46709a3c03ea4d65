// The error every part of the runtime that executes artifacts (kernel
// loading, weight binding, the engine) reports: one line, naming what is at
// fault (the tensor, the symbol, the op) and what was expected.
#pragma once

#include <stdexcept>

namespace kiln {

class RuntimeError : public std::runtime_error {
public:
  using std::runtime_error::runtime_error;
};

} // namespace kiln
