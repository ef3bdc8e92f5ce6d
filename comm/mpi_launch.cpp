// comm/mpi_launch.cpp — launcher detection; MPI is touched only when a launcher started us.
#include "comm/mpi_launch.h"

#include <cstdlib>
#include <string>

#include "core/error.h"
#if MOEZERO_HAVE_MPI
#include "comm/mpi/mpi_world.h"
#endif

namespace moezero::comm {

namespace {

// World size announced by the launcher's environment; 0 when none is set.
int launcher_world_size() {
  for (const char* var : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE"}) {
    if (const char* v = std::getenv(var)) return std::atoi(v);
  }
  if (std::getenv("PMIX_RANK")) return -1;  // PMIx without a size variable: ask MPI
  return 0;
}

}  // namespace

bool mpi_built() { return MOEZERO_HAVE_MPI != 0; }

std::optional<MpiProcess> mpi_process() {
  const int announced = launcher_world_size();
  if (announced == 0 || announced == 1) return std::nullopt;
#if MOEZERO_HAVE_MPI
  const MpiWorld& w = MpiWorld::instance();
  return MpiProcess{w.rank(), w.size(), w.local_rank(), w.local_size()};
#else
  MOEZERO_THROW("this process was started by an MPI launcher (a job of ", announced,
                " processes) but moezero was built without MPI (MOEZERO_MPI=OFF or no MPI found "
                "at configure time): install openmpi-bin and libopenmpi-dev, reconfigure, or run "
                "without mpirun (ranks as threads)");
#endif
}

void mpi_abort_if_active(int code) {
#if MOEZERO_HAVE_MPI
  if (MpiWorld::initialised()) MpiWorld::abort_job(code);
#else
  (void)code;
#endif
}

}  // namespace moezero::comm
