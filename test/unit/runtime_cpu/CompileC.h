// Builds a tiny shared object from C source at test time with the system C
// compiler (KILN_TEST_CC, found by CMake), for tests that load kernels.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <unistd.h>
#include <vector>

namespace kiln::runtime_test {

inline const char *testCompiler() {
#ifdef KILN_TEST_CC
  return KILN_TEST_CC;
#else
  return "";
#endif
}

inline bool haveTestCompiler() { return testCompiler()[0] != '\0'; }

// The bytes of `cc -shared -fPIC -O1 source`; empty (and a test failure) if
// compiling fails.
inline std::vector<uint8_t> compileSharedObject(const std::string &source) {
  std::string dir = ::testing::TempDir() + "/kiln-cc-XXXXXX";
  if (!::mkdtemp(dir.data())) {
    ADD_FAILURE() << "mkdtemp failed";
    return {};
  }
  const std::string cPath = dir + "/kernels.c";
  const std::string soPath = dir + "/kernels.so";
  std::ofstream(cPath) << source;
  const std::string command = std::string(testCompiler()) + " -shared -fPIC -O1 -o " + soPath +
                              " " + cPath + " -lm 2>" + dir + "/errors.txt";
  std::vector<uint8_t> bytes;
  if (std::system(command.c_str()) != 0) {
    std::ifstream errors(dir + "/errors.txt");
    ADD_FAILURE() << "compiling test kernels failed: " << command << "\n"
                  << std::string(std::istreambuf_iterator<char>(errors), {});
  } else {
    std::ifstream in(soPath, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), {});
  }
  std::error_code error;
  std::filesystem::remove_all(dir, error);
  return bytes;
}

} // namespace kiln::runtime_test
