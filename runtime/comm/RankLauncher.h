// kiln-run --nproc N (and kiln-serve's, kiln-check's, kiln-bench-decode's): starts N
// processes of this program on this machine, one per rank of a multi-rank
// artifact, each with KILN_RANK, KILN_WORLD_SIZE, KILN_LOCAL_RANK (its GPU),
// KILN_LOCAL_WORLD_SIZE and a fresh KILN_RENDEZVOUS in its environment, then
// waits for all of them. Rank 0's output is the run's; the other ranks'
// standard output is discarded, their errors pass through. A rank that dies
// is reported by the launcher, and the others stop at their next collective
// (runtime/comm); one still running KILN_COMM_TIMEOUT + 5 s after the first
// failure is killed. SIGINT and SIGTERM are passed on to every rank.
#pragma once

#include <ostream>
#include <string>
#include <vector>

namespace kiln {

// Runs `args` (this program's arguments, without --nproc) as `ranks`
// processes; returns 0 when every rank succeeded, else the first failing
// rank's status (1 for a rank killed by a signal). `program` names the tool
// in messages.
int launchRanks(const std::string &program, const std::vector<std::string> &args, int ranks,
                std::ostream &err);

// `args` without "--nproc N" / "--nproc=N".
std::vector<std::string> withoutNproc(const std::vector<std::string> &args);

} // namespace kiln
