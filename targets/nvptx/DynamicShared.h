// A kernel's dynamic shared memory, as NVPTX kernels declare it: an external
// array in address space 3 named after the kernel, sized at launch
// (KernelSpec::sharedBytes), with the block size the kernel was written for.
#pragma once

#include "targets/common/KernelBuilder.h"

#include <cstdint>
#include <string>

namespace kiln::nvptx {

// Declares `name` (aligned to `alignment` bytes) beside the kernel and caps
// its blocks at `threads` (nvvm.maxntid).
void declareDynamicShared(kernels::KernelScope &k, const std::string &name, int64_t alignment,
                          int64_t threads);

} // namespace kiln::nvptx
