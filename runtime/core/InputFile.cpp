#include "runtime/core/InputFile.h"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <stdexcept>
#include <sys/stat.h>

namespace kiln {

std::string inputFileProblem(const std::string &path) {
  struct stat info;
  if (::stat(path.c_str(), &info) != 0)
    return std::strerror(errno);
  if (S_ISREG(info.st_mode))
    return "";
  const char *what = S_ISDIR(info.st_mode)    ? "a directory"
                     : S_ISFIFO(info.st_mode) ? "a FIFO"
                     : S_ISSOCK(info.st_mode) ? "a socket"
                     : S_ISCHR(info.st_mode)  ? "a character device"
                     : S_ISBLK(info.st_mode)  ? "a block device"
                                              : "a special file";
  return std::string(what) + ", not a regular file";
}

std::string readInputFile(const std::string &path, uint64_t maxBytes, const std::string &what) {
  if (const std::string problem = inputFileProblem(path); !problem.empty())
    throw std::runtime_error(path + ": " + problem);
  std::ifstream in(path, std::ios::binary);
  if (!in)
    throw std::runtime_error(path + ": cannot be opened: " + std::strerror(errno));
  in.seekg(0, std::ios::end);
  const auto size = static_cast<uint64_t>(in.tellg());
  if (size > maxBytes)
    throw std::runtime_error(path + ": " + std::to_string(size) + " bytes, more than " + what +
                             " may hold (at most " + std::to_string(maxBytes) + ")");
  in.seekg(0);
  std::string text(size, '\0');
  in.read(text.data(), static_cast<std::streamsize>(size));
  if (!in)
    throw std::runtime_error(path + ": could not be read");
  return text;
}

} // namespace kiln
