// Prefill-shaped products on CDNA matrix cores (gfx942, gfx950):
// y[T, n] = x[T, k] · Wᵀ with f32 activations and the checkpoint's bf16
// weights, through v_mfma_f32_32x32x8_bf16 (rocdl.mfma.f32.32x32x8bf16.1k).
//
// One 64-lane wavefront per 32 x 32 tile of y (32 tokens by 32 weight rows),
// accumulating over k in steps of 8 with the instruction's operand layout:
//   A (32 x 8, tokens by k): lane l holds x[l % 32][4 (l / 32) .. +4];
//   B (8 x 32, k by rows of W): lane l holds W[l % 32][4 (l / 32) .. +4];
//   D (32 x 32): lane l's element j is y[8 (j / 4) + 4 (l / 32) + j % 4][l % 32].
// Each f32 activation is split into two bf16 parts (hi, and the rest), two
// products per step, so the result keeps about 16 bits of the activation as
// the NVIDIA tensor-core GEMM does. No AMD GPU here: compiled and checked by
// llvm-readelf/llvm-objdump (test/targets/amdgcn/hsaco.test), never run.
#pragma once

#include "targets/common/KernelSpec.h"
#include "targets/common/TargetHooks.h"

#include "mlir/IR/ImplicitLocOpBuilder.h"
#include "mlir/IR/Value.h"

#include <cstdint>

namespace kiln::amdgcn {

bool mfmaGemmFits(int64_t n, int64_t k);
kernels::KernelSpec mfmaGemm(int64_t n, int64_t k);
kernels::Work mfmaGemmWork(int64_t n, int64_t maxTokens);

// The pieces of the MFMA kernels, as typed IR. The lane's A operand: 4 f32
// activations of `x` at `at`, split into bf16 parts (vector<4xi16> each).
struct MfmaActivation {
  mlir::Value hi, lo;
};
MfmaActivation mfmaActivation(mlir::ImplicitLocOpBuilder &b, mlir::Value x, mlir::ValueRange at);
// a · b + c through v_mfma_f32_32x32x8_bf16 (its three modifiers zero).
mlir::Value mfmaStep(mlir::ImplicitLocOpBuilder &b, mlir::Value a, mlir::Value bOperand,
                     mlir::Value c, mlir::Value zeroI32);

} // namespace kiln::amdgcn
