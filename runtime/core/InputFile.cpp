#include "runtime/core/InputFile.h"

#include <cerrno>
#include <cstring>
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

} // namespace kiln
