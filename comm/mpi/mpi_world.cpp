// comm/mpi/mpi_world.cpp — MPI initialisation, identity and the channel registry.
#include "comm/mpi/mpi_world.h"

#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <set>
#include <thread>

#include "comm/mpi/mpi_communicator.h"
#include "core/error.h"

namespace moezero::comm {

bool MpiWorld::initialised() {
  int init = 0, fin = 0;
  MPI_Initialized(&init);
  MPI_Finalized(&fin);
  return init && !fin;
}

void MpiWorld::abort_job(int code) {
  std::fflush(stdout);
  std::fflush(stderr);
  MPI_Abort(MPI_COMM_WORLD, code);
  std::abort();  // MPI_Abort does not return; keep [[noreturn]] honest
}

MpiWorld& MpiWorld::instance() {
  static MpiWorld world;  // the registry: see the header
  return world;
}

MpiWorld::MpiWorld() {
  int init = 0;
  MOEZERO_MPI_CHECK(MPI_Initialized(&init));
  int provided = MPI_THREAD_SINGLE;
  if (!init) {
    MOEZERO_MPI_CHECK(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided));
    we_initialised_ = true;
  } else {
    MOEZERO_MPI_CHECK(MPI_Query_thread(&provided));
  }
  if (provided < MPI_THREAD_MULTIPLE) {
    if (we_initialised_) MPI_Finalize();
    MOEZERO_THROW("MPI provides thread level ", provided,
                  " but moezero needs MPI_THREAD_MULTIPLE (", MPI_THREAD_MULTIPLE,
                  "): every stream's worker thread calls MPI. Use an MPI built with thread "
                  "support (Debian's OpenMPI has it) or run without mpirun (ranks as threads)");
  }
  MOEZERO_MPI_CHECK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
  MOEZERO_MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &rank_));
  MOEZERO_MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &size_));
  MPI_Comm node = MPI_COMM_NULL;
  MOEZERO_MPI_CHECK(
      MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &node));
  MOEZERO_MPI_CHECK(MPI_Comm_rank(node, &local_rank_));
  MOEZERO_MPI_CHECK(MPI_Comm_size(node, &local_size_));
  MOEZERO_MPI_CHECK(MPI_Comm_free(&node));
}

MpiWorld::~MpiWorld() {
  channels_.clear();  // MPI_Comm_free while MPI is alive (channels still shared stay alive)
  if (we_initialised_ && initialised()) MPI_Finalize();
}

MPI_Comm MpiWorld::create_comm(const ProcessGroup& group, const std::string& key,
                               std::chrono::milliseconds timeout) {
  MPI_Group world_group = MPI_GROUP_NULL, sub = MPI_GROUP_NULL;
  MOEZERO_MPI_CHECK(MPI_Comm_group(MPI_COMM_WORLD, &world_group));
  MOEZERO_MPI_CHECK(MPI_Group_incl(world_group, group.size(), group.ranks.data(), &sub));
  MPI_Group_free(&world_group);
  // Members that create different keys in a different order must not pair up by mistake.
  const int tag = static_cast<int>(std::hash<std::string>{}(key) % 32749u);

  // MPI_Comm_create_group blocks until every member calls it, so it runs on a helper thread
  // and this thread waits at most `timeout` (a missing member is a TimeoutError, not a hang;
  // the helper stays blocked until the job is aborted).
  struct Creation {
    std::mutex mu;
    std::condition_variable cv;
    bool done = false;
    int code = MPI_SUCCESS;
    MPI_Comm comm = MPI_COMM_NULL;
  };
  auto c = std::make_shared<Creation>();
  std::thread([c, sub, tag] {
    MPI_Comm comm = MPI_COMM_NULL;
    const int code = MPI_Comm_create_group(MPI_COMM_WORLD, sub, tag, &comm);
    std::lock_guard<std::mutex> lock(c->mu);
    c->done = true;
    c->code = code;
    c->comm = comm;
    c->cv.notify_all();
  }).detach();
  std::unique_lock<std::mutex> lock(c->mu);
  if (!c->cv.wait_for(lock, timeout, [&] { return c->done; }))
    MOEZERO_THROW_AS(TimeoutError, "creating the MPI communicator of channel '", key,
                     "': the group's members did not all join within ", timeout.count(),
                     " ms (every member must create the same (group, channel) in the same order)");
  MPI_Group_free(&sub);
  MOEZERO_MPI_CHECK(c->code);
  MOEZERO_MPI_CHECK(MPI_Comm_set_errhandler(c->comm, MPI_ERRORS_RETURN));
  return c->comm;
}

std::shared_ptr<MpiChannel> MpiWorld::channel(const ProcessGroup& group, const std::string& name,
                                              const CommOptions& options) {
  MOEZERO_CHECK(group.size() >= 1, "make_communicator: group '", group.name, "' is empty");
  std::set<int> seen;
  for (int r : group.ranks) {
    MOEZERO_CHECK(r >= 0 && r < size_, "make_communicator: group ", group.str(), " has rank ", r,
                  " outside the MPI world of ", size_, " processes");
    MOEZERO_CHECK(seen.insert(r).second, "make_communicator: group ", group.str(), " lists rank ",
                  r, " twice");
  }
  MOEZERO_CHECK(group.contains(rank_), "make_communicator: rank ", rank_,
                " is not a member of group ", group.str());
  MOEZERO_CHECK(options.timeout.count() > 0, "make_communicator: timeout must be > 0 ms, got ",
                options.timeout.count());
  const std::string key = name + "@" + group.str();
  std::lock_guard<std::mutex> lock(mu_);
  if (auto it = channels_.find(key); it != channels_.end()) return it->second;
  MPI_Comm comm = create_comm(group, key, options.timeout);
  auto ch = std::make_shared<MpiChannel>(group, name, comm, group.group_rank(rank_), options);
  channels_.emplace(key, ch);
  return ch;
}

std::unique_ptr<Communicator> MpiWorld::make_communicator(const ProcessGroup& group,
                                                          const std::string& channel_name,
                                                          const CommOptions& options) {
  return std::make_unique<MpiCommunicator>(channel(group, channel_name, options), rank_);
}

}  // namespace moezero::comm
