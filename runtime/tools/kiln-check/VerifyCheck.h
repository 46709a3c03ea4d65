// kiln-check's check of an artifact's verify entry point (speculative
// decoding) against its own decode entry: see VerifyCheck.cpp.
#pragma once

#include "runtime/engine/Engine.h"

#include <cstdint>
#include <vector>

namespace kiln {

// Prints what it measured; false when the check fails.
bool checkVerify(Engine &engine, const std::vector<int32_t> &prompt, int steps, double nearTie);

} // namespace kiln
