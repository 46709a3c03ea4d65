// runtime/hip/HipDriver.h declares HIP's types and constants by layout, so
// that the runtime builds without ROCm. Where the HIP headers are installed
// (Debian's libamdhip64-dev: HIP 5.2), this checks every declaration against
// them: the hipDeviceProp_t fields the backend reads, hipKernelNodeParams,
// and the enum values.
#include "runtime/hip/HipDriver.h"

#include <gtest/gtest.h>

#include <cstddef>

#if defined(__HIP_PLATFORM_AMD__) && __has_include(<hip/hip_runtime_api.h>)
#include <hip/hip_runtime_api.h>
#define KILN_HAVE_HIP_HEADER 1
#endif

namespace kiln {
namespace {

#ifdef KILN_HAVE_HIP_HEADER

using Ours = hip::DeviceProperties;
// From HIP 6 on, hipDeviceProp_t is a new layout (hipGetDevicePropertiesR0600)
// and HIP 5's, which the plain symbol keeps, is hipDeviceProp_tR0000.
#if HIP_VERSION_MAJOR >= 6
using Theirs = hipDeviceProp_tR0000;
#else
using Theirs = hipDeviceProp_t;
#endif

#define KILN_SAME_FIELD(field)                                                                     \
  static_assert(offsetof(Ours, field) == offsetof(Theirs, field) &&                                \
                    sizeof(Ours::field) == sizeof(Theirs::field),                                  \
                "hipDeviceProp_t::" #field " differs")
KILN_SAME_FIELD(name);
KILN_SAME_FIELD(totalGlobalMem);
KILN_SAME_FIELD(warpSize);
KILN_SAME_FIELD(maxThreadsPerBlock);
KILN_SAME_FIELD(maxGridSize);
KILN_SAME_FIELD(major);
KILN_SAME_FIELD(minor);
KILN_SAME_FIELD(multiProcessorCount);
KILN_SAME_FIELD(arch);
KILN_SAME_FIELD(maxSharedMemoryPerMultiProcessor);
KILN_SAME_FIELD(gcnArch);
KILN_SAME_FIELD(gcnArchName);
#undef KILN_SAME_FIELD
static_assert(sizeof(Theirs) <= hip::kDevicePropertiesBytes);

using Node = hip::KernelNodeParams;
#define KILN_SAME_NODE_FIELD(field)                                                                \
  static_assert(offsetof(Node, field) == offsetof(hipKernelNodeParams, field) &&                   \
                    sizeof(Node::field) == sizeof(hipKernelNodeParams::field),                     \
                "hipKernelNodeParams::" #field " differs")
KILN_SAME_NODE_FIELD(blockDim);
KILN_SAME_NODE_FIELD(extra);
KILN_SAME_NODE_FIELD(func);
KILN_SAME_NODE_FIELD(gridDim);
KILN_SAME_NODE_FIELD(kernelParams);
KILN_SAME_NODE_FIELD(sharedMemBytes);
#undef KILN_SAME_NODE_FIELD
static_assert(sizeof(Node) == sizeof(hipKernelNodeParams));
static_assert(sizeof(hip::Dim3) == sizeof(dim3));

static_assert(hip::kSuccess == hipSuccess);
static_assert(hip::kErrorNoDevice == hipErrorNoDevice);
static_assert(hip::kErrorInvalidDevice == hipErrorInvalidDevice);
static_assert(hip::kAttrMaxGridDimX == hipDeviceAttributeMaxGridDimX);
static_assert(hip::kAttrMaxThreadsPerBlock == hipDeviceAttributeMaxThreadsPerBlock);
static_assert(hip::kAttrWarpSize == hipDeviceAttributeWarpSize);
static_assert(hip::kFuncAttrMaxThreadsPerBlock == HIP_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK);
static_assert(hip::kMemcpyHostToDevice == hipMemcpyHostToDevice);
static_assert(hip::kMemcpyDeviceToHost == hipMemcpyDeviceToHost);
static_assert(hip::kMemcpyDeviceToDevice == hipMemcpyDeviceToDevice);
static_assert(hip::kStreamNonBlocking == hipStreamNonBlocking);
static_assert(hip::kCaptureModeThreadLocal == hipStreamCaptureModeThreadLocal);
static_assert(hip::kCaptureStatusActive == hipStreamCaptureStatusActive);
static_assert(sizeof(hipError_t) == sizeof(hip::hipError_t));

TEST(HipLayoutTest, KnownErrorNamesAreTheHeaders) {
#define KILN_SAME_NAME(error) EXPECT_EQ(hip::knownHipErrorName(error), #error)
  KILN_SAME_NAME(hipErrorInvalidValue);
  KILN_SAME_NAME(hipErrorOutOfMemory);
  KILN_SAME_NAME(hipErrorNotInitialized);
  KILN_SAME_NAME(hipErrorDeinitialized);
  KILN_SAME_NAME(hipErrorInsufficientDriver);
  KILN_SAME_NAME(hipErrorInvalidDeviceFunction);
  KILN_SAME_NAME(hipErrorNoDevice);
  KILN_SAME_NAME(hipErrorInvalidDevice);
  KILN_SAME_NAME(hipErrorInvalidImage);
  KILN_SAME_NAME(hipErrorInvalidContext);
  KILN_SAME_NAME(hipErrorNoBinaryForGpu);
  KILN_SAME_NAME(hipErrorInvalidKernelFile);
  KILN_SAME_NAME(hipErrorSharedObjectInitFailed);
  KILN_SAME_NAME(hipErrorInvalidHandle);
  KILN_SAME_NAME(hipErrorNotFound);
  KILN_SAME_NAME(hipErrorIllegalAddress);
  KILN_SAME_NAME(hipErrorLaunchOutOfResources);
  KILN_SAME_NAME(hipErrorLaunchTimeOut);
  KILN_SAME_NAME(hipErrorLaunchFailure);
  KILN_SAME_NAME(hipErrorNotSupported);
  KILN_SAME_NAME(hipErrorStreamCaptureUnsupported);
  KILN_SAME_NAME(hipErrorStreamCaptureInvalidated);
  KILN_SAME_NAME(hipErrorUnknown);
#undef KILN_SAME_NAME
}

#else

TEST(HipLayoutTest, KnownErrorNamesAreTheHeaders) {
  GTEST_SKIP() << "no HIP headers (hip/hip_runtime_api.h) here";
}

#endif

} // namespace
} // namespace kiln
