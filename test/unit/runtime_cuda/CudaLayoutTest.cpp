// The CUDA declarations of runtime/cuda/CudaDriver.h that Hopper kernels
// need (dynamic shared memory, tensor maps) against the toolkit's cuda.h,
// where it is installed (/usr/local/cuda/include): the runtime builds without
// it and declares them by value and layout.
#include "runtime/cuda/CudaDriver.h"

#include <gtest/gtest.h>

#include <cstddef>

#ifdef KILN_CUDA_HEADER
#include <cuda.h>
#endif

namespace kiln::cuda {
namespace {

#ifdef KILN_CUDA_HEADER
static_assert(kAttrMaxSharedMemoryPerBlockOptin ==
              CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN);
static_assert(kFuncAttrSharedSizeBytes == CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES);
static_assert(kFuncAttrMaxDynamicSharedSizeBytes ==
              CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES);
static_assert(sizeof(TensorMap) == sizeof(CUtensorMap));
static_assert(alignof(TensorMap) >= 64 && alignof(TensorMap) >= alignof(CUtensorMap));
static_assert(kTensorMapFloat16 == CU_TENSOR_MAP_DATA_TYPE_FLOAT16);
static_assert(kTensorMapFloat32 == CU_TENSOR_MAP_DATA_TYPE_FLOAT32);
static_assert(kTensorMapBfloat16 == CU_TENSOR_MAP_DATA_TYPE_BFLOAT16);
static_assert(kTensorMapInterleaveNone == CU_TENSOR_MAP_INTERLEAVE_NONE);
static_assert(kTensorMapSwizzleNone == CU_TENSOR_MAP_SWIZZLE_NONE);
static_assert(kTensorMapSwizzle32B == CU_TENSOR_MAP_SWIZZLE_32B);
static_assert(kTensorMapSwizzle64B == CU_TENSOR_MAP_SWIZZLE_64B);
static_assert(kTensorMapSwizzle128B == CU_TENSOR_MAP_SWIZZLE_128B);
static_assert(kTensorMapL2Promotion128B == CU_TENSOR_MAP_L2_PROMOTION_L2_128B);
static_assert(kTensorMapOobFillNone == CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
// The enums are int-sized, the cuuint types what the table declares.
static_assert(sizeof(CUtensorMapDataType) == sizeof(int));
static_assert(sizeof(CUtensorMapSwizzle) == sizeof(int));
static_assert(sizeof(cuuint32_t) == sizeof(uint32_t) && sizeof(cuuint64_t) == sizeof(uint64_t));
static_assert(sizeof(CUfunction_attribute) == sizeof(int));
// Programmatic dependent launch: cuLaunchKernelEx's config and attribute.
static_assert(kLaunchAttributeProgrammaticStreamSerialization ==
              CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION);
static_assert(sizeof(CUlaunchAttributeID) == sizeof(int));
static_assert(sizeof(LaunchAttribute) == sizeof(CUlaunchAttribute));
static_assert(offsetof(LaunchAttribute, value) == offsetof(CUlaunchAttribute, value));
static_assert(offsetof(LaunchAttribute, value.programmaticStreamSerializationAllowed) ==
              offsetof(CUlaunchAttribute, value.programmaticStreamSerializationAllowed));
static_assert(sizeof(LaunchConfig) == sizeof(CUlaunchConfig));
static_assert(offsetof(LaunchConfig, sharedMemBytes) == offsetof(CUlaunchConfig, sharedMemBytes));
static_assert(offsetof(LaunchConfig, hStream) == offsetof(CUlaunchConfig, hStream));
static_assert(offsetof(LaunchConfig, attrs) == offsetof(CUlaunchConfig, attrs));
static_assert(offsetof(LaunchConfig, numAttrs) == offsetof(CUlaunchConfig, numAttrs));
#endif

TEST(CudaLayoutTest, HopperDeclarationsMatchCudaH) {
#ifndef KILN_CUDA_HEADER
  GTEST_SKIP() << "no cuda.h here: the static_asserts were not compiled";
#else
  // Checked when this file compiled; the 128-byte map too.
  EXPECT_EQ(sizeof(TensorMap), 128u);
#endif
}

} // namespace
} // namespace kiln::cuda
