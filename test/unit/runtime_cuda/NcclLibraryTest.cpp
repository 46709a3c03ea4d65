// NCCL without a GPU: the runtime's declarations against nccl.h (where the
// toolkit has it), loading the library (where one is installed), and the
// errors for a missing or wrong one.
#include "runtime/cuda/NcclLibrary.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#ifdef KILN_NCCL_HEADER
#include <nccl.h>
#include <type_traits>

// The values and layouts NcclLibrary.h declares by hand.
static_assert(kiln::cuda::kNcclUniqueIdBytes == NCCL_UNIQUE_ID_BYTES);
static_assert(sizeof(kiln::cuda::ncclUniqueId) == sizeof(::ncclUniqueId));
static_assert(kiln::cuda::kNcclSuccess == ncclSuccess);
static_assert(kiln::cuda::kNcclInProgress == ncclInProgress);
static_assert(kiln::cuda::kNcclFloat32 == ncclFloat32);
static_assert(kiln::cuda::kNcclSum == ncclSum);
// Enums pass as int, handles and streams as pointers.
static_assert(sizeof(ncclResult_t) == sizeof(int) && sizeof(ncclDataType_t) == sizeof(int) &&
              sizeof(ncclRedOp_t) == sizeof(int));
static_assert(sizeof(ncclComm_t) == sizeof(void *) && sizeof(cudaStream_t) == sizeof(void *));
static_assert(std::is_same_v<decltype(&ncclAllReduce),
                             ncclResult_t (*)(const void *, void *, size_t, ncclDataType_t,
                                              ncclRedOp_t, ncclComm_t, cudaStream_t)>);
static_assert(std::is_same_v<decltype(&ncclAllGather),
                             ncclResult_t (*)(const void *, void *, size_t, ncclDataType_t,
                                              ncclComm_t, cudaStream_t)>);
static_assert(std::is_same_v<decltype(&ncclCommSplit),
                             ncclResult_t (*)(ncclComm_t, int, int, ncclComm_t *, ncclConfig_t *)>);
#endif

namespace kiln::cuda {
namespace {

std::string loadError(const char *library) {
  ::setenv("KILN_NCCL_LIBRARY", library, 1);
  try {
    NcclLibrary::load();
  } catch (const RuntimeError &error) {
    ::unsetenv("KILN_NCCL_LIBRARY");
    return error.what();
  }
  ::unsetenv("KILN_NCCL_LIBRARY");
  return "";
}

TEST(NcclLibraryTest, AMissingLibraryIsNamed) {
  const std::string error = loadError("/nonexistent/libnccl.so.2");
  EXPECT_NE(error.find("no NCCL (/nonexistent/libnccl.so.2"), std::string::npos) << error;
  EXPECT_NE(error.find("KILN_NCCL_LIBRARY"), std::string::npos) << error;
}

TEST(NcclLibraryTest, ALibraryWithoutNcclIsRefused) {
  const std::string error = loadError("libm.so.6");
  EXPECT_NE(error.find("libm.so.6 lacks ncclGetVersion, ncclGetUniqueId"), std::string::npos)
      << error;
}

#ifdef KILN_NCCL_LIBRARY_FILE
TEST(NcclLibraryTest, TheToolkitsNcclLoads) {
  ::setenv("KILN_NCCL_LIBRARY", KILN_NCCL_LIBRARY_FILE, 1);
  std::shared_ptr<const NcclLibrary> nccl = NcclLibrary::load();
  ::unsetenv("KILN_NCCL_LIBRARY");
  ASSERT_TRUE(nccl);
  EXPECT_NE(nccl->api().ncclCommSplit, nullptr); // NCCL 2.18 on
  EXPECT_EQ(nccl->version().rfind("2.", 0), 0u) << nccl->version();
  EXPECT_NE(nccl->describe("ncclAllReduce", 2).find("ncclAllReduce: "), std::string::npos);
}
#endif

} // namespace
} // namespace kiln::cuda
