// Local ranks from exchanged host names, and the rule that maps them to GPUs.
#include "distribution/runtime/local_gpu.h"

#include "engine/gpu_runtime.h"
#if defined(KERAS_HAS_NCCL)
#include "distribution/transports/nccl/nccl_communicator.h"
#endif

#include <unistd.h>

#include <array>
#include <cstring>
#include <vector>

namespace keras::distribution {

HostPlace place_on_host(Communicator& world) {
  constexpr int kWords = 8;  // 64 bytes of host name, as int64 words
  std::array<char, kWords * 8> name{};
  gethostname(name.data(), name.size() - 1);
  std::array<std::int64_t, kWords> mine{};
  std::memcpy(mine.data(), name.data(), name.size());
  std::vector<std::int64_t> every(static_cast<std::size_t>(kWords) * world.size());
  world.all_gather(mine.data(), every.data(), kWords, DType::int64);
  HostPlace place;
  place.host = name.data();
  place.local_size = 0;
  for (int r = 0; r < world.size(); ++r) {
    bool same = std::equal(mine.begin(), mine.end(), every.begin() + kWords * r);
    if (!same) continue;
    if (r < world.rank()) place.local_rank += 1;
    place.local_size += 1;
  }
  return place;
}

int choose_local_gpu(const HostPlace& place, int gpus_on_host) {
  if (place.local_size > gpus_on_host) {
    throw ValueError(str("host '", place.host, "' runs ", place.local_size, " processes but has ",
                         gpus_on_host, " GPU(s); each process uses one GPU, so start at most ",
                         gpus_on_host, " processes on this host (mpirun -np ", gpus_on_host,
                         " per node)"));
  }
  return place.local_rank;
}

GpuChoice choose_job_gpu(const std::shared_ptr<Communicator>& world) {
  GpuChoice choice;
  if (gpu::device_count() == 0) {
    choice.no_gpu_reason = str("this machine has no GPU (", gpu::description(), ")");
    return choice;
  }
  HostPlace place = place_on_host(*world);
  int chosen = -1;
  try {
    chosen = choose_local_gpu(place, gpu::device_count());
  } catch (const ValueError& error) {
    choice.no_gpu_reason = error.what();
  }
  // Every process learns whether any host lacks GPUs.
  std::int64_t failed = chosen < 0 ? 1 : 0;
  world->all_reduce(&failed, 1, DType::int64, ReduceOperation::max);
  if (failed != 0) {
    if (chosen >= 0) {
      choice.no_gpu_reason = "another host of this job runs more processes than it has GPUs (its "
                      "processes say how many); each process uses one GPU";
    }
    return choice;
  }
  choice.gpu = chosen;
#if defined(KERAS_HAS_NCCL)
  if (world->size() > 1) {
    choice.gpu_world = std::make_shared<NcclCommunicator>(world, chosen, "world");
    world->set_device_twin(choice.gpu_world);
  }
#endif
  return choice;
}

}  // namespace keras::distribution
