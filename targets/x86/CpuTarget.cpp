#include "targets/x86/CpuTarget.h"

#include "runtime/cpu/CpuFeatures.h"

#include "llvm/ADT/SmallVector.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/TargetParser/Host.h"
#include "llvm/TargetParser/X86TargetParser.h"

#include <algorithm>
#include <set>

namespace kiln::x86 {

bool CpuTarget::has(std::string_view feature) const {
  return std::binary_search(features.begin(), features.end(), feature);
}

int CpuTarget::vectorBits() const { return has("avx512f") ? 512 : has("avx") ? 256 : 128; }

std::string CpuTarget::llvmFeatures() const {
  std::string text;
  for (const std::string &feature : features)
    text += (text.empty() ? "+" : ",+") + feature;
  return text;
}

namespace {

// What kernels may use: the CPU's features, closed under LLVM's implications
// (x86-64-v4 lists avx512bw, which implies avx512f, avx2, ...), kept to
// those the runtime can check (runtime/cpu/CpuFeatures.cpp).
std::vector<std::string> usableFeatures(const llvm::StringMap<bool> &enabled) {
  // Every x86-64 CPU has SSE2 (the psABI's floating point), whether or not
  // LLVM's list for the CPU names it (x86-64's does not).
  llvm::StringMap<bool> closed = {{"sse", true}, {"sse2", true}};
  for (const auto &entry : enabled)
    if (entry.second) {
      closed[entry.first()] = true;
      llvm::X86::updateImpliedFeatures(entry.first(), true, closed);
    }
  std::set<std::string> usable;
  for (const std::string &known : knownCpuFeatures())
    if (closed.lookup(known))
      usable.insert(known);
  return {usable.begin(), usable.end()};
}

} // namespace

std::optional<CpuTarget> resolveCpu(const std::string &name, std::string &error) {
  llvm::StringMap<bool> enabled;
  CpuTarget target;
  if (name == "host") {
    target.cpu = llvm::sys::getHostCPUName().str();
    // The host's own features (a virtual machine may hide some its CPU
    // name implies); LLVM checks the OS enabled their register state.
    for (const auto &entry : llvm::sys::getHostCPUFeatures())
      enabled[entry.first()] = entry.second;
  } else {
    if (llvm::X86::parseArchX86(name, /*Only64Bit=*/true) == llvm::X86::CK_None) {
      error = "unknown x86-64 CPU '" + name +
              "' for --cpu: use one of LLVM's names (sapphirerapids, graniterapids, znver4, "
              "znver5, x86-64-v4, x86-64-v3, ...; --cpu=help lists them) or host";
      return std::nullopt;
    }
    target.cpu = name;
    llvm::SmallVector<llvm::StringRef> features;
    llvm::X86::getFeaturesForCPU(name, features);
    for (llvm::StringRef feature : features)
      enabled[feature] = true;
  }
  target.features = usableFeatures(enabled);
  return target;
}

std::vector<std::string> knownCpuNames() {
  llvm::SmallVector<llvm::StringRef> names;
  llvm::X86::fillValidCPUArchList(names, /*Only64Bit=*/true);
  std::set<std::string> sorted(names.begin(), names.end());
  return {sorted.begin(), sorted.end()};
}

} // namespace kiln::x86
