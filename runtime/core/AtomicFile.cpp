#include "runtime/core/AtomicFile.h"

#include <atomic>
#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

namespace kiln {
namespace {

std::string errnoText(int error) { return std::strerror(error); }

// The directory part of `path` ("." for a bare name) and the file name.
std::pair<std::string, std::string> splitPath(const std::string &path) {
  const size_t slash = path.find_last_of('/');
  if (slash == std::string::npos)
    return {".", path};
  return {slash == 0 ? "/" : path.substr(0, slash), path.substr(slash + 1)};
}

// Creates a fresh file next to `path` (mode 0666 less the umask, like any
// new file); returns its descriptor and sets `tempPath`, or -1 with errno.
int createTemp(const std::string &dir, const std::string &name, std::string &tempPath) {
  static std::atomic<unsigned> counter{0};
  for (int attempt = 0; attempt < 100; ++attempt) {
    tempPath =
        dir + "/." + name + ".tmp." + std::to_string(::getpid()) + "." + std::to_string(counter++);
    const int fd = ::open(tempPath.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd >= 0 || errno != EEXIST)
      return fd;
  }
  errno = EEXIST;
  return -1;
}

bool writeAll(int fd, const char *data, size_t size) {
  while (size > 0) {
    const ssize_t written = ::write(fd, data, size);
    if (written < 0 && errno == EINTR)
      continue;
    if (written <= 0)
      return false;
    data += written;
    size -= static_cast<size_t>(written);
  }
  return true;
}

} // namespace

void writeFileAtomically(const std::string &path, const void *data, size_t size) {
  auto fail = [&](const std::string &reason) {
    throw FileWriteError(path + ": cannot write: " + reason);
  };
  if (path.empty() || path.back() == '/')
    fail("not a file name");
  const auto [dir, name] = splitPath(path);

  std::string tempPath;
  int fd = createTemp(dir, name, tempPath);
  if (fd < 0)
    fail("cannot create a temporary file in " + dir + ": " + errnoText(errno));

  // Anything that fails from here on removes the temporary file.
  std::string reason;
  if (!writeAll(fd, static_cast<const char *>(data), size))
    reason = "write failed: " + errnoText(errno);
  else if (::fsync(fd) != 0)
    reason = "fsync failed: " + errnoText(errno);
  if (::close(fd) != 0 && reason.empty())
    reason = "close failed: " + errnoText(errno);
  if (reason.empty() && ::rename(tempPath.c_str(), path.c_str()) != 0)
    reason = "cannot rename " + tempPath + " into place: " + errnoText(errno);
  if (!reason.empty()) {
    ::unlink(tempPath.c_str());
    fail(reason);
  }

  // Makes the rename itself durable.
  fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0)
    fail("cannot open directory " + dir + " to fsync it: " + errnoText(errno));
  const bool synced = ::fsync(fd) == 0;
  const int error = errno;
  ::close(fd);
  // Some file systems cannot fsync a directory; that is not a failure.
  if (!synced && error != EINVAL && error != ENOTSUP)
    fail("fsync of directory " + dir + " failed: " + errnoText(error));
}

} // namespace kiln
