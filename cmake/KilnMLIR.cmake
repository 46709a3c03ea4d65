# Finds Debian's LLVM/MLIR 22 and sets up TableGen for the compiler half.
# MLIR's version file only accepts an exact major.minor request, so ask for
# any and check the major version here.
find_package(MLIR REQUIRED CONFIG HINTS /usr/lib/llvm-22/lib/cmake/mlir)
if(NOT MLIR_VERSION VERSION_GREATER_EQUAL 22 OR MLIR_VERSION VERSION_GREATER_EQUAL 23)
  message(FATAL_ERROR "Kiln needs MLIR 22 (Debian: libmlir-22-dev), found ${MLIR_VERSION} in ${MLIR_DIR}")
endif()
message(STATUS "Using MLIR ${MLIR_VERSION} from ${MLIR_DIR}")

list(APPEND CMAKE_MODULE_PATH "${MLIR_CMAKE_DIR}" "${LLVM_CMAKE_DIR}")
include(TableGen)
include(AddLLVM)
include(AddMLIR)

# Debian's MLIRConfig names the tools without a path.
find_program(MLIR_TABLEGEN_EXE mlir-tblgen HINTS ${LLVM_TOOLS_BINARY_DIR} REQUIRED)
set(MLIR_TABLEGEN_EXE ${MLIR_TABLEGEN_EXE} CACHE FILEPATH "" FORCE)
find_program(KILN_LIT lit HINTS ${LLVM_TOOLS_BINARY_DIR} REQUIRED)
find_program(KILN_FILECHECK FileCheck HINTS ${LLVM_TOOLS_BINARY_DIR} REQUIRED)

include_directories(SYSTEM ${LLVM_INCLUDE_DIRS} ${MLIR_INCLUDE_DIRS})
add_definitions(${LLVM_DEFINITIONS})

# Every compiler library and tool links the shared libMLIR / libLLVM that
# Debian ships (built with RTTI, so no -fno-rtti here).
function(kiln_compiler_target target)
  target_link_libraries(${target} PUBLIC MLIR LLVM)
endfunction()
