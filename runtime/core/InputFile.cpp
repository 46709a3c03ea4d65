#include "runtime/core/InputFile.h"

#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <stdexcept>
#include <sys/stat.h>
#include <unistd.h>

namespace kiln {

namespace {

// Why a file of `mode` is no input file; empty for a regular file.
std::string modeProblem(mode_t mode) {
  if (S_ISREG(mode))
    return "";
  const char *what = S_ISDIR(mode)    ? "a directory"
                     : S_ISFIFO(mode) ? "a FIFO"
                     : S_ISSOCK(mode) ? "a socket"
                     : S_ISCHR(mode)  ? "a character device"
                     : S_ISBLK(mode)  ? "a block device"
                                      : "a special file";
  return std::string(what) + ", not a regular file";
}

} // namespace

std::string inputFileProblem(const std::string &path) {
  struct stat info;
  if (::stat(path.c_str(), &info) != 0)
    return std::strerror(errno);
  return modeProblem(info.st_mode);
}

std::string openFailure(const std::string &path, int error) {
  struct stat info;
  if (::stat(path.c_str(), &info) == 0 && !S_ISREG(info.st_mode))
    return modeProblem(info.st_mode);
  return std::string("cannot open: ") + std::strerror(error);
}

std::string readInputFile(const std::string &path, uint64_t maxBytes, const std::string &what) {
  // Opened without blocking (a FIFO swapped in after a stat would block a
  // plain open), then what was opened is looked at.
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0)
    throw std::runtime_error(path + ": " + openFailure(path, errno));
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  struct stat info;
  if (::fstat(fd, &info) != 0)
    throw std::runtime_error(path + ": " + std::strerror(errno));
  if (const std::string problem = modeProblem(info.st_mode); !problem.empty())
    throw std::runtime_error(path + ": " + problem);
  const auto size = static_cast<uint64_t>(info.st_size);
  if (size > maxBytes)
    throw std::runtime_error(path + ": " + std::to_string(size) + " bytes, more than " + what +
                             " may hold (at most " + std::to_string(maxBytes) + ")");
  std::string text(size, '\0');
  uint64_t done = 0;
  while (done < size) {
    const ssize_t got = ::read(fd, text.data() + done, size - done);
    if (got < 0 && errno == EINTR)
      continue;
    if (got <= 0)
      throw std::runtime_error(path + ": could not be read" +
                               (got < 0 ? std::string(": ") + std::strerror(errno) : ""));
    done += static_cast<uint64_t>(got);
  }
  return text;
}

} // namespace kiln
