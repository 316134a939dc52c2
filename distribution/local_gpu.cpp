// Local ranks from exchanged host names, and the rule that maps them to GPUs.
#include "distribution/local_gpu.h"

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

}  // namespace keras::distribution
