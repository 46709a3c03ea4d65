// A stand-in HIP runtime for tests without an AMD GPU: a shared library named
// libamdhip64.so (FakeHip.cpp) that exports the entry points HipDriver
// resolves, with devices, modules, streams and graphs simulated in host
// memory. Kernels do not run: a launch is recorded with its grid, block and
// parameter values (kernels[name] of them, read through kernelParams the way
// HIP reads them). Memory is host memory, so that copies and fills can be
// checked. A stream capture builds a graph of the launches, copies and fills
// issued; replaying it records each launch again, with the parameters its
// node holds then.
//
// A test reaches the state through kilnFakeHip(), resolved with dlsym from
// the same library HipDriver loaded.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace kiln::hip_test {

struct FakeLaunch {
  std::string kernel;
  unsigned grid = 0, block = 0;
  std::vector<uint64_t> values;
  bool replayed = false;    // run by hipGraphLaunch
  unsigned sharedBytes = 0; // dynamic LDS
};

struct FakeHip {
  // What the "machine" is; tests set these before loading the runtime.
  int initResult = 0; // what hipInit returns
  int deviceCount = 1;
  std::string name = "AMD Instinct MI355X";
  std::string gcnArchName = "gfx950:sramecc+:xnack-";
  uint64_t memoryBytes = uint64_t{288} << 30;
  int computeUnits = 256;
  int maxThreadsPerBlock = 1024;
  int maxGridX = 2147483647;
  int warpSize = 64;
  uint64_t sharedBytesPerBlock = 65536; // LDS of a workgroup
  // The kernels a loaded code object holds (name: parameter count) and the
  // most threads per block each takes.
  std::map<std::string, int> kernels;
  int kernelMaxThreads = 1024;
  // Errors to return: from hipModuleLoadData, and from the next launch
  // (then every later launch too, as a faulted device would).
  int moduleLoadResult = 0;
  int launchResult = 0;

  // What happened.
  std::vector<FakeLaunch> launches;
  std::vector<uint8_t> loadedImage; // the first 64 bytes of the code object
  int nodeUpdates = 0;
  int liveAllocations = 0;
  int graphsAlive = 0;

  void reset() { *this = FakeHip(); }
};

} // namespace kiln::hip_test

// The fake's state (one per process).
extern "C" kiln::hip_test::FakeHip *kilnFakeHip();
