#include "runtime/cpu/CpuFeatures.h"

#include "runtime/cpu/RuntimeError.h"

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <mutex>

#if defined(__x86_64__)
#include <cpuid.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

namespace kiln {
namespace {

enum class Reg { Eax, Ebx, Ecx, Edx };

// The register state the OS must enable in XCR0 for a feature to be usable.
enum class State { None, Avx, Avx512, Amx };

struct FeatureBit {
  const char *name;
  unsigned leaf;
  unsigned subleaf;
  Reg reg;
  int bit;
  State state;
};

constexpr FeatureBit kFeatures[] = {
    {"sse", 1, 0, Reg::Edx, 25, State::None},
    {"sse2", 1, 0, Reg::Edx, 26, State::None},
    {"sse3", 1, 0, Reg::Ecx, 0, State::None},
    {"pclmul", 1, 0, Reg::Ecx, 1, State::None},
    {"ssse3", 1, 0, Reg::Ecx, 9, State::None},
    {"fma", 1, 0, Reg::Ecx, 12, State::Avx},
    {"sse4.1", 1, 0, Reg::Ecx, 19, State::None},
    {"sse4.2", 1, 0, Reg::Ecx, 20, State::None},
    {"movbe", 1, 0, Reg::Ecx, 22, State::None},
    {"popcnt", 1, 0, Reg::Ecx, 23, State::None},
    {"aes", 1, 0, Reg::Ecx, 25, State::None},
    {"avx", 1, 0, Reg::Ecx, 28, State::Avx},
    {"f16c", 1, 0, Reg::Ecx, 29, State::Avx},
    {"bmi", 7, 0, Reg::Ebx, 3, State::None},
    {"avx2", 7, 0, Reg::Ebx, 5, State::Avx},
    {"bmi2", 7, 0, Reg::Ebx, 8, State::None},
    {"avx512f", 7, 0, Reg::Ebx, 16, State::Avx512},
    {"avx512dq", 7, 0, Reg::Ebx, 17, State::Avx512},
    {"avx512ifma", 7, 0, Reg::Ebx, 21, State::Avx512},
    {"avx512cd", 7, 0, Reg::Ebx, 28, State::Avx512},
    {"avx512bw", 7, 0, Reg::Ebx, 30, State::Avx512},
    {"avx512vl", 7, 0, Reg::Ebx, 31, State::Avx512},
    {"avx512vbmi", 7, 0, Reg::Ecx, 1, State::Avx512},
    {"avx512vbmi2", 7, 0, Reg::Ecx, 6, State::Avx512},
    {"avx512vnni", 7, 0, Reg::Ecx, 11, State::Avx512},
    {"avx512bitalg", 7, 0, Reg::Ecx, 12, State::Avx512},
    {"avx512vpopcntdq", 7, 0, Reg::Ecx, 14, State::Avx512},
    {"amx-bf16", 7, 0, Reg::Edx, 22, State::Amx},
    {"avx512fp16", 7, 0, Reg::Edx, 23, State::Avx512},
    {"amx-tile", 7, 0, Reg::Edx, 24, State::Amx},
    {"amx-int8", 7, 0, Reg::Edx, 25, State::Amx},
    {"avxvnni", 7, 1, Reg::Eax, 4, State::Avx},
    {"avx512bf16", 7, 1, Reg::Eax, 5, State::Avx512},
    {"amx-fp16", 7, 1, Reg::Eax, 21, State::Amx},
};

#if defined(__x86_64__)
bool cpuidBit(unsigned leaf, unsigned subleaf, Reg reg, int bit) {
  unsigned regs[4] = {0, 0, 0, 0};
  if (static_cast<unsigned>(__get_cpuid_max(leaf & 0x80000000u, nullptr)) <
          leaf ||
      !__get_cpuid_count(leaf, subleaf, &regs[0], &regs[1], &regs[2], &regs[3]))
    return false;
  return (regs[static_cast<int>(reg)] >> bit) & 1u;
}

uint64_t readXcr0() {
  // XGETBV is only there when the OS enabled XSAVE (OSXSAVE, leaf 1 ECX 27).
  if (!cpuidBit(1, 0, Reg::Ecx, 27))
    return 0;
  uint32_t eax = 0, edx = 0;
  __asm__ volatile("xgetbv" : "=a"(eax), "=d"(edx) : "c"(0));
  return (static_cast<uint64_t>(edx) << 32) | eax;
}

bool osSupports(State state) {
  const uint64_t xcr0 = readXcr0();
  switch (state) {
  case State::None:
    return true;
  case State::Avx:
    return (xcr0 & 0x6) == 0x6; // SSE and AVX state
  case State::Avx512:
    return (xcr0 & 0xE6) == 0xE6; // plus opmask, ZMM_Hi256, Hi16_ZMM
  case State::Amx:
    // XTILECFG and XTILEDATA; the per-process permission is requestAmx's.
    return (xcr0 & 0x60000) == 0x60000;
  }
  return false;
}
#endif

} // namespace

bool cpuHasAmx() {
#if defined(__x86_64__)
  return cpuidBit(7, 0, Reg::Edx, 22) && cpuidBit(7, 0, Reg::Edx, 24);
#else
  return false;
#endif
}

std::optional<bool> cpuHasFeature(std::string_view name) {
  if (!name.empty() && name.front() == '+')
    name.remove_prefix(1);
  for (const FeatureBit &feature : kFeatures) {
    if (name != feature.name)
      continue;
#if defined(__x86_64__)
    return cpuidBit(feature.leaf, feature.subleaf, feature.reg, feature.bit) &&
           osSupports(feature.state);
#else
    return false;
#endif
  }
  return std::nullopt;
}

std::vector<std::string> knownCpuFeatures() {
  std::vector<std::string> names;
  for (const FeatureBit &feature : kFeatures)
    names.emplace_back(feature.name);
  return names;
}

bool needsAmx(const std::vector<std::string> &features) {
  for (std::string_view name : features) {
    if (!name.empty() && name.front() == '+')
      name.remove_prefix(1);
    if (name.substr(0, 4) == "amx-")
      return true;
  }
  return false;
}

void requestAmx() {
  static std::once_flag once;
  static std::string failure;
  std::call_once(once, [] {
#if defined(__x86_64__) && defined(SYS_arch_prctl)
    constexpr int kArchReqXcompPerm = 0x1023;
    constexpr int kXfeatureXtiledata = 18;
    if (syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) != 0)
      failure = std::string("the kernel refused AMX tile data "
                            "(arch_prctl ARCH_REQ_XCOMP_PERM): ") +
                std::strerror(errno) +
                (cpuHasAmx() ? "" : "; this CPU has no AMX");
#else
    failure = "AMX needs an x86-64 Linux host";
#endif
  });
  if (!failure.empty())
    throw RuntimeError(failure);
}

} // namespace kiln
