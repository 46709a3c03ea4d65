#include "runtime/comm/Rendezvous.h"

#include "runtime/comm/Collectives.h"

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
  const std::string temporary = path + ".tmp." + std::to_string(getpid());
  {
    std::ofstream out(temporary, std::ios::binary | std::ios::trunc);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    if (!out.flush())
      throw RuntimeError("rendezvous " + path + ": cannot write " + temporary + ": " +
                         std::strerror(errno));
  }
  if (std::rename(temporary.c_str(), path.c_str()) != 0) {
    const std::string reason = std::strerror(errno);
    std::remove(temporary.c_str());
    throw RuntimeError("rendezvous " + path + ": cannot rename " + temporary + ": " + reason);
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
