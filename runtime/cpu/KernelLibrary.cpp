#include "runtime/cpu/KernelLibrary.h"

#include "runtime/cpu/RuntimeError.h"

#include <cerrno>
#include <cstring>
#include <utility>

#include <dlfcn.h>
#include <elf.h>
#include <sys/mman.h>
#include <unistd.h>

namespace kiln {
namespace {

// Checks the ELF header, so that a damaged blob gets a clear error rather
// than whatever the dynamic loader makes of it.
void checkElfHeader(const uint8_t *data, size_t size, const std::string &source) {
  const std::string prefix = source + ": kernel library: ";
  if (size < sizeof(Elf64_Ehdr) || std::memcmp(data, ELFMAG, SELFMAG) != 0)
    throw RuntimeError(prefix + "not an ELF file (" + std::to_string(size) + " bytes)");
  Elf64_Ehdr header;
  std::memcpy(&header, data, sizeof(header));
  if (header.e_ident[EI_CLASS] != ELFCLASS64 || header.e_ident[EI_DATA] != ELFDATA2LSB)
    throw RuntimeError(prefix + "not a 64-bit little-endian ELF file");
  if (header.e_machine != EM_X86_64)
    throw RuntimeError(prefix + "ELF machine " + std::to_string(header.e_machine) +
                       " is not x86-64");
  if (header.e_type != ET_DYN)
    throw RuntimeError(prefix + "ELF type " + std::to_string(header.e_type) +
                       " is not a shared object");
  // The loader maps segments straight from the file: one that extends past
  // the end of a truncated blob would fault (SIGBUS) on first touch.
  if (header.e_phentsize != sizeof(Elf64_Phdr) || header.e_phoff > size ||
      (size - header.e_phoff) / sizeof(Elf64_Phdr) < header.e_phnum)
    throw RuntimeError(prefix + "program headers lie outside the " + std::to_string(size) +
                       " bytes (truncated?)");
  for (size_t i = 0; i < header.e_phnum; ++i) {
    Elf64_Phdr segment;
    std::memcpy(&segment, data + header.e_phoff + i * sizeof(Elf64_Phdr), sizeof(segment));
    if (segment.p_offset > size || segment.p_filesz > size - segment.p_offset)
      throw RuntimeError(prefix + "segment " + std::to_string(i) + " lies outside the " +
                         std::to_string(size) + " bytes (truncated?)");
  }
}

void writeAll(int fd, const uint8_t *data, size_t size, const std::string &source) {
  while (size > 0) {
    const ssize_t written = ::write(fd, data, size);
    if (written < 0) {
      if (errno == EINTR)
        continue;
      throw RuntimeError(source + ": kernel library: cannot write memfd: " + std::strerror(errno));
    }
    data += written;
    size -= static_cast<size_t>(written);
  }
}

} // namespace

KernelLibrary KernelLibrary::load(const uint8_t *data, size_t size, const std::string &source) {
  checkElfHeader(data, size, source);
  KernelLibrary library;
  library.source_ = source;
  library.fd_ = ::memfd_create("kiln-kernels", MFD_CLOEXEC);
  if (library.fd_ < 0)
    throw RuntimeError(source + ": kernel library: memfd_create failed: " + std::strerror(errno));
  writeAll(library.fd_, data, size, source);
  library.path_ = "/proc/self/fd/" + std::to_string(library.fd_);
  library.handle_ = ::dlopen(library.path_.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!library.handle_) {
    const char *message = ::dlerror();
    throw RuntimeError(source +
                       ": kernel library: dlopen failed: " + (message ? message : "unknown error"));
  }
  return library;
}

KernelLibrary::KernelLibrary(KernelLibrary &&other) noexcept
    : source_(std::move(other.source_)), path_(std::move(other.path_)),
      handle_(std::exchange(other.handle_, nullptr)), fd_(std::exchange(other.fd_, -1)) {}

KernelLibrary &KernelLibrary::operator=(KernelLibrary &&other) noexcept {
  if (this != &other) {
    release();
    source_ = std::move(other.source_);
    path_ = std::move(other.path_);
    handle_ = std::exchange(other.handle_, nullptr);
    fd_ = std::exchange(other.fd_, -1);
  }
  return *this;
}

KernelLibrary::~KernelLibrary() { release(); }

void KernelLibrary::release() noexcept {
  if (handle_)
    ::dlclose(handle_);
  if (fd_ >= 0)
    ::close(fd_);
  handle_ = nullptr;
  fd_ = -1;
}

KernelFn KernelLibrary::find(const std::string &symbol) const {
  if (!handle_)
    return nullptr;
  void *address = ::dlsym(handle_, symbol.c_str());
  // dlsym also searches the library's dependencies (libc): a kernel must be
  // defined by the library itself.
  Dl_info info;
  if (!address || !::dladdr(address, &info) || !info.dli_fname || path_ != info.dli_fname)
    return nullptr;
  // POSIX allows the object-to-function pointer conversion for dlsym results.
  return reinterpret_cast<KernelFn>(address);
}

KernelFn KernelLibrary::resolve(const std::string &symbol) const {
  if (KernelFn fn = find(symbol))
    return fn;
  throw RuntimeError(source_ + ": kernel library has no symbol '" + symbol + "'");
}

} // namespace kiln
