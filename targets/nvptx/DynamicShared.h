// A kernel's dynamic shared memory, as NVPTX kernels declare it: an external
// array in address space 3 named after the kernel, sized at launch
// (KernelSpec::sharedBytes).
#pragma once

#include "targets/common/KernelBuilder.h"

#include <cstdint>
#include <string>

namespace kiln::nvptx {

// Declares `name` (aligned to `alignment` bytes) beside the kernel.
void declareDynamicShared(kernels::KernelScope &k, const std::string &name, int64_t alignment);

} // namespace kiln::nvptx
