// Which process of a multi-rank job this is, and how the processes find each
// other. Every rank runs the same artifact; it learns its rank, the world
// size and the rendezvous (a file path every process can reach: shared memory
// for the CPU backend, the NCCL unique id for the CUDA backend) from its
// environment, so one binary runs under kiln-run --nproc N, mpirun or a
// scheduler:
//
//   KILN_RANK, KILN_WORLD_SIZE   (else OMPI_COMM_WORLD_RANK/SIZE, PMI_RANK/SIZE,
//                                 SLURM_PROCID/NTASKS)
//   KILN_RENDEZVOUS              a path no other job uses (required)
//   KILN_COMM_TIMEOUT            seconds a collective may wait for the others
//                                (default 60)
//   KILN_LOCAL_RANK              the GPU of this rank (kiln-run, kiln-check)
//   KILN_LOCAL_WORLD_SIZE        ranks on this machine: a CPU rank's default
//                                threads are the machine's divided by it
#pragma once

#include <optional>
#include <string>

namespace kiln {

struct RankInfo {
  int rank = 0;
  int world = 1;
  std::string rendezvous;
  double timeoutSeconds = 60;
};

// The rank from the environment; nullopt when it names none. Throws
// RuntimeError for values that are set but wrong (not numbers, rank outside
// the world, no rendezvous path).
std::optional<RankInfo> rankFromEnvironment();

// KILN_LOCAL_RANK (this rank's GPU on its machine), else 0; and
// KILN_LOCAL_WORLD_SIZE (the ranks on this machine), else 1.
int localRank();
int localWorldSize();

} // namespace kiln
