// How the ranks of a job meet: rank 0 publishes a small file at the
// rendezvous path (written whole to a temporary name, then renamed, so a
// reader never sees half of it); the others wait for it to appear.
#pragma once

#include <string>

namespace kiln {

// Writes `bytes` to `path` atomically (temporary file + rename).
void publishRendezvous(const std::string &path, const std::string &bytes);
// Waits up to `timeoutSeconds` for `path` to exist, then returns its bytes.
// Throws CollectiveError when it does not appear in time.
std::string awaitRendezvous(const std::string &path, double timeoutSeconds, int rank);

} // namespace kiln
