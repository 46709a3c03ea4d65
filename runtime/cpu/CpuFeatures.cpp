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

// Every feature an x86 artifact may list: what kilnc lets LLVM use (the
// compiler asks knownCpuFeatures) and what this table can check. Sorted by
// cpuid leaf; a feature LLVM knows that is missing here is never enabled.
constexpr FeatureBit kFeatures[] = {
    {"sse", 1, 0, Reg::Edx, 25, State::None},
    {"sse2", 1, 0, Reg::Edx, 26, State::None},
    {"sse3", 1, 0, Reg::Ecx, 0, State::None},
    {"pclmul", 1, 0, Reg::Ecx, 1, State::None},
    {"ssse3", 1, 0, Reg::Ecx, 9, State::None},
    {"fma", 1, 0, Reg::Ecx, 12, State::Avx},
    {"cx16", 1, 0, Reg::Ecx, 13, State::None},
    {"sse4.1", 1, 0, Reg::Ecx, 19, State::None},
    {"sse4.2", 1, 0, Reg::Ecx, 20, State::None},
    {"crc32", 1, 0, Reg::Ecx, 20, State::None}, // LLVM splits it from sse4.2
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
    {"gfni", 7, 0, Reg::Ecx, 8, State::None},
    {"vaes", 7, 0, Reg::Ecx, 9, State::Avx},
    {"vpclmulqdq", 7, 0, Reg::Ecx, 10, State::Avx},
    {"avx512vnni", 7, 0, Reg::Ecx, 11, State::Avx512},
    {"avx512bitalg", 7, 0, Reg::Ecx, 12, State::Avx512},
    {"avx512vpopcntdq", 7, 0, Reg::Ecx, 14, State::Avx512},
    {"avx512vp2intersect", 7, 0, Reg::Edx, 8, State::Avx512},
    {"amx-bf16", 7, 0, Reg::Edx, 22, State::Amx},
    {"avx512fp16", 7, 0, Reg::Edx, 23, State::Avx512},
    {"amx-tile", 7, 0, Reg::Edx, 24, State::Amx},
    {"amx-int8", 7, 0, Reg::Edx, 25, State::Amx},
    {"avxvnni", 7, 1, Reg::Eax, 4, State::Avx},
    {"avx512bf16", 7, 1, Reg::Eax, 5, State::Avx512},
    {"amx-fp16", 7, 1, Reg::Eax, 21, State::Amx},
    {"sahf", 0x80000001u, 0, Reg::Ecx, 0, State::None},
    {"lzcnt", 0x80000001u, 0, Reg::Ecx, 5, State::None},
};

// The x86-64 microarchitecture levels (psABI), each adding to the one
// before; x86-64 itself (SSE2) needs nothing listed.
struct Level {
  const char *name;
  std::vector<std::string_view> adds;
};
const Level kLevels[] = {
    {"x86-64-v2", {"cx16", "crc32", "popcnt", "sahf", "sse3", "sse4.1", "sse4.2", "ssse3"}},
    {"x86-64-v3", {"avx", "avx2", "bmi", "bmi2", "f16c", "fma", "lzcnt", "movbe"}},
    {"x86-64-v4", {"avx512bw", "avx512cd", "avx512dq", "avx512f", "avx512vl"}},
};

#if defined(__x86_64__)
bool cpuidBit(unsigned leaf, unsigned subleaf, Reg reg, int bit) {
  unsigned regs[4] = {0, 0, 0, 0};
  if (static_cast<unsigned>(__get_cpuid_max(leaf & 0x80000000u, nullptr)) < leaf ||
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

std::optional<std::vector<std::string>> x86LevelFeatures(std::string_view level) {
  std::vector<std::string> features;
  if (level == "x86-64")
    return features;
  for (const Level &l : kLevels) {
    features.insert(features.end(), l.adds.begin(), l.adds.end());
    if (level == l.name)
      return features;
  }
  return std::nullopt;
}

std::string hostX86Level() {
  std::string best = "x86-64";
  for (const Level &l : kLevels) {
    for (std::string_view name : l.adds)
      if (!cpuHasFeature(name).value_or(false))
        return best;
    best = l.name;
  }
  return best;
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
                std::strerror(errno) + (cpuHasAmx() ? "" : "; this CPU has no AMX");
#else
    failure = "AMX needs an x86-64 Linux host";
#endif
  });
  if (!failure.empty())
    throw RuntimeError(failure);
}

} // namespace kiln
