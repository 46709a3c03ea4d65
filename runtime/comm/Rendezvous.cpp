#include "runtime/comm/Rendezvous.h"

#include "runtime/comm/Collectives.h"
#include "runtime/core/AtomicFile.h"

#include <cerrno>
#include <chrono>
#include <cstring>
#include <fcntl.h>
#include <fstream>
#include <sstream>
#include <thread>
#include <unistd.h>

namespace kiln {

void publishRendezvous(const std::string &path, const std::string &bytes) {
  try {
    writeFileAtomically(path, bytes);
  } catch (const FileWriteError &error) {
    throw RuntimeError("rendezvous " + path + ": " + error.what());
  }
}

std::string awaitRendezvous(const std::string &path, double timeoutSeconds, int rank) {
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::duration<double>(timeoutSeconds);
  for (;;) {
    std::ifstream in(path, std::ios::binary);
    if (in) {
      std::ostringstream bytes;
      bytes << in.rdbuf();
      return bytes.str();
    }
    if (std::chrono::steady_clock::now() > deadline)
      throw CollectiveError("rank " + std::to_string(rank) +
                            ": rank 0 did not publish the "
                            "rendezvous " +
                            path + " within " + std::to_string(static_cast<int>(timeoutSeconds)) +
                            " s (is rank 0 running, with the same KILN_RENDEZVOUS?)");
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

} // namespace kiln
