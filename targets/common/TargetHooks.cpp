// The generic kernels every target can run: one launch part a token for the
// row-wise ops, the vector GEMM for products.
#include "targets/common/TargetHooks.h"

#include "targets/common/Generators.h"
#include "targets/common/HeadRowKernels.h"

namespace kiln::kernels {

namespace {
// Every token row in one piece of work: CPU parts take whole tokens.
constexpr Work kPerToken{0, 1};
} // namespace

KernelLaunch TargetHooks::embedKernel(int64_t vocab, int64_t hidden) const {
  return {embed(vocab, hidden), kPerToken};
}

KernelLaunch TargetHooks::rmsNormKernel(int64_t width, double eps) const {
  return {rmsNorm(width, eps), kPerToken};
}

KernelLaunch TargetHooks::headNormKernel(int64_t heads, int64_t headDim, double eps) const {
  return {headNorm(heads, headDim, eps), kPerToken};
}

KernelLaunch TargetHooks::ropeKernel(int64_t heads, int64_t headDim, double theta) const {
  return {headRowThreads("kiln.rope", heads, headDim, {ropeStage(headDim, theta)}), kPerToken};
}

KernelLaunch TargetHooks::headNormRopeKernel(int64_t heads, int64_t headDim, double eps,
                                             double theta) const {
  return {headRowThreads("kiln.head_norm_rope", heads, headDim,
                         {headNormStage(headDim, eps), ropeStage(headDim, theta)}),
          kPerToken};
}

KernelLaunch TargetHooks::normResidualKernel(int64_t width, double postEps, double nextEps) const {
  return {normResidual(width, postEps, nextEps), kPerToken};
}

KernelLaunch TargetHooks::routerTopKKernel(int64_t experts, int64_t k) const {
  return {routerTopK(experts, k), kPerToken};
}

TargetHooks::Gemv TargetHooks::gemv(int64_t n, int64_t k, int64_t /*maxRows*/,
                                    bool /*splitRows*/) const {
  return {linearVector(n, k), Work{n, 0}};
}

} // namespace kiln::kernels
