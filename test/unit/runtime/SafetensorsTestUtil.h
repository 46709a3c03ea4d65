// Helpers shared by the safetensors reader, writer and checkpoint tests: a
// fresh temporary directory per test and byte-level file construction.
#pragma once

#include "runtime/safetensors/SafetensorsFile.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <iterator>
#include <string>
#include <vector>

namespace kiln::safetensors_test {

// The 8-byte little-endian length prefix.
inline std::string littleEndian64(uint64_t value) {
  std::string bytes(8, '\0');
  for (int i = 0; i < 8; ++i, value >>= 8)
    bytes[i] = static_cast<char>(value & 0xFF);
  return bytes;
}

// A whole file image: length prefix, header text as given, data.
inline std::string fileImage(const std::string &header, const std::string &data = "") {
  return littleEndian64(header.size()) + header + data;
}

inline std::string readAll(const std::string &path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

// The message of the SafetensorsError `fn` throws; a test failure if it
// throws nothing or something else.
template <typename Fn> std::string errorOf(Fn &&fn) {
  try {
    fn();
  } catch (const SafetensorsError &error) {
    return error.what();
  } catch (const std::exception &error) {
    ADD_FAILURE() << "expected SafetensorsError, got: " << error.what();
    return "";
  }
  ADD_FAILURE() << "expected SafetensorsError, nothing thrown";
  return "";
}

#define EXPECT_CONTAINS_ALL(text, ...)                                                             \
  do {                                                                                             \
    const std::string kilnText_ = (text);                                                          \
    for (const char *kilnPart_ : {__VA_ARGS__})                                                    \
      EXPECT_NE(kilnText_.find(kilnPart_), std::string::npos)                                      \
          << "missing \"" << kilnPart_ << "\" in: " << kilnText_;                                  \
  } while (false)

// Gives each test its own directory under ::testing::TempDir().
class TempDirTest : public ::testing::Test {
protected:
  void SetUp() override {
    std::string pattern = ::testing::TempDir() + "/kiln-safetensors-XXXXXX";
    ASSERT_NE(::mkdtemp(pattern.data()), nullptr);
    dir_ = pattern;
  }
  void TearDown() override {
    std::error_code error;
    std::filesystem::remove_all(dir_, error);
  }

  std::string path(const std::string &name) const { return dir_ + "/" + name; }

  // Writes `bytes` to `name` in the test directory; returns the path.
  std::string writeFile(const std::string &name, const std::string &bytes) const {
    const std::string target = path(name);
    std::ofstream out(target, std::ios::binary);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    EXPECT_TRUE(out.good());
    return target;
  }

  // Names of the entries of the test directory (or a subdirectory), sorted.
  std::vector<std::string> listDir(const std::string &sub = "") const {
    std::vector<std::string> names;
    for (const auto &entry : std::filesystem::directory_iterator(sub.empty() ? dir_ : path(sub)))
      names.push_back(entry.path().filename().string());
    std::sort(names.begin(), names.end());
    return names;
  }

  std::string dir_;
};

} // namespace kiln::safetensors_test
