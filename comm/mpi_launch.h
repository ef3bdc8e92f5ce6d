// comm/mpi_launch.h — is this process one rank of an MPI job (`mpirun -np N moezero ...`)?
//
// Detection reads the launcher's environment (OpenMPI: OMPI_COMM_WORLD_SIZE; MPICH/Hydra and
// Slurm's PMI: PMI_SIZE; PMIx: PMIX_RANK), so a program started without mpirun never loads or
// initialises MPI and keeps the threads-as-ranks default. When launched, the first call
// initialises MPI (MPI_THREAD_MULTIPLE) and the rank, world size and local rank come from MPI
// itself (MPI_Comm_rank / MPI_Comm_size / MPI_Comm_split_type(MPI_COMM_TYPE_SHARED)).
//
// No <mpi.h> here: every layer may include this header, whether or not MPI is built.
#pragma once

#include <optional>

namespace moezero::comm {

struct MpiProcess {
  int rank = 0;        // MPI_COMM_WORLD rank = moezero global rank
  int world_size = 1;  // MPI_COMM_WORLD size
  int local_rank = 0;  // rank among the processes of this machine (GPU index on CUDA)
  int local_size = 1;  // processes of this job on this machine
};

// True when this build has MPI (MOEZERO_MPI found an MPI at configure time).
bool mpi_built();

// The MPI identity of this process, or nullopt when no MPI launcher started it (or the
// launcher reports a job of one process). Throws moezero::Error when launched under an MPI
// job of several processes but this build has no MPI, or when MPI cannot give
// MPI_THREAD_MULTIPLE.
std::optional<MpiProcess> mpi_process();

// When MPI is initialised: aborts the whole job (MPI_Abort on MPI_COMM_WORLD) with `code`,
// so that no peer waits for this process; returns when MPI is not in use. For programs'
// error paths (a process that exits alone leaves its peers waiting for their timeouts).
void mpi_abort_if_active(int code);

}  // namespace moezero::comm
