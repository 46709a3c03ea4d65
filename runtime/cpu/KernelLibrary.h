// The kernels of an x86 artifact: an ELF shared object held in memory,
// loaded without touching the file system. The bytes go to an anonymous
// memfd which dlopen opens as /proc/self/fd/N; every kernel is then found by
// its symbol name (docs/runtime-abi.md, "Kernels").
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace kiln {

// Every kernel has this signature: one pointer per memref descriptor, then
// one per i64 scalar.
using KernelFn = void (*)(void **);

class KernelLibrary {
public:
  // Loads the shared object `data[0, size)`. `source` names it in errors (the
  // artifact path). Throws RuntimeError if the bytes are not an x86-64 ELF
  // shared object or the dynamic loader refuses them (its message included).
  static KernelLibrary load(const uint8_t *data, size_t size, const std::string &source);

  KernelLibrary(KernelLibrary &&other) noexcept;
  KernelLibrary &operator=(KernelLibrary &&other) noexcept;
  KernelLibrary(const KernelLibrary &) = delete;
  KernelLibrary &operator=(const KernelLibrary &) = delete;
  // dlclose()s the library: no kernel of it may run afterwards.
  ~KernelLibrary();

  // The symbol, or nullptr if the library does not define it.
  KernelFn find(const std::string &symbol) const;
  // The symbol; throws RuntimeError naming it and the library if absent.
  KernelFn resolve(const std::string &symbol) const;

  const std::string &source() const { return source_; }

private:
  KernelLibrary() = default;
  void release() noexcept;

  std::string source_;
  std::string path_; // "/proc/self/fd/N", as the loader knows it
  void *handle_ = nullptr;
  // The memfd stays open while the library is loaded: glibc recognises an
  // already loaded object by its path, so a reused /proc/self/fd/N of a
  // closed fd would silently return the older library.
  int fd_ = -1;
};

} // namespace kiln
