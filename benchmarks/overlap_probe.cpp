// overlap_probe: what overlapping the gradient all-reduce with the backward pass could buy on
// this machine, measured before building it. Under `mpirun -np P`, each process times
//   compute   the backward pass's big products of the 784-1024-1024-10 MLP at its share of a
//             global batch of 128 (the kernel and input gradients: most of the backward time),
//   comm      MPI_Allreduce of the MLP's 7.45 MB of float32 gradients,
//   serial    compute, then comm (what the trainer does now),
//   overlap   comm on a second thread (Horovod's communication thread, which alone calls MPI)
//             while the first computes,
// interleaved over rounds, medians of the slowest process. Overlap pays only where
// overlap < serial; it cannot beat max(compute, comm), and when the processes already fill
// every core the copies of the all-reduce compete with the products for the same core.
//   mpirun -np 2 overlap_probe [--rounds N]
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "engine/cpu/kernels.h"
#include "keras.h"

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

struct Products {
  std::vector<keras::Tensor> left, right, out;
  std::vector<bool> transpose_a, transpose_b;
  void add(std::int64_t m, std::int64_t n, std::int64_t k, bool ta, bool tb) {
    keras::RandomSpec spec{.distribution = keras::RandomDistribution::uniform, .a = -1, .b = 1, .seed = 1};
    left.push_back(keras::ops::random(spec, {ta ? k : m, ta ? m : k}));
    right.push_back(keras::ops::random(spec, {tb ? n : k, tb ? k : n}));
    out.push_back(keras::Tensor::empty({m, n}));
    transpose_a.push_back(ta);
    transpose_b.push_back(tb);
  }
  void run() {
    for (std::size_t i = 0; i < out.size(); ++i) {
      keras::cpu::matmul(left[i], right[i], transpose_a[i], transpose_b[i], out[i]);
    }
  }
};

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  return values[values.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_SERIALIZED, &provided);
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  int rounds = 15;
  for (int i = 1; i < argc; i += 2) {
    char* end = nullptr;
    long value = i + 1 < argc ? std::strtol(argv[i + 1], &end, 10) : 0;
    if (std::string(argv[i]) != "--rounds" || end == argv[i + 1] || *end != '\0' || value < 1 || value > 10000) {
      if (rank == 0) std::fprintf(stderr, "usage: mpirun -np P overlap_probe [--rounds N]  (N from 1 to 10000)\n");
      MPI_Finalize();
      return 2;
    }
    rounds = static_cast<int>(value);
  }
  if (provided < MPI_THREAD_SERIALIZED) {
    if (rank == 0) std::fprintf(stderr, "overlap_probe: MPI gives thread level %d, needs SERIALIZED\n", provided);
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  std::int64_t batch = 128 / size;
  Products backward;
  backward.add(batch, 1024, 1024, false, true);  // input gradient of the second hidden layer
  backward.add(1024, 1024, batch, true, false);   // its kernel gradient
  backward.add(784, 1024, batch, true, false);    // the first layer's kernel gradient
  std::vector<float> gradients(1863690, 1.0f);    // 7.45 MB: the MLP's parameters
  auto communicate = [&] {
    MPI_Allreduce(MPI_IN_PLACE, gradients.data(), static_cast<int>(gradients.size()), MPI_FLOAT, MPI_SUM,
                  MPI_COMM_WORLD);
  };
  // The slowest process decides, as in a synchronised step.
  auto slowest = [&](double seconds) {
    MPI_Allreduce(MPI_IN_PLACE, &seconds, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    return seconds * 1e3;
  };
  backward.run();
  communicate();
  std::vector<double> compute, comm, serial, overlap;
  for (int round = 0; round < rounds; ++round) {
    MPI_Barrier(MPI_COMM_WORLD);
    auto start = Clock::now();
    backward.run();
    compute.push_back(slowest(seconds_since(start)));

    MPI_Barrier(MPI_COMM_WORLD);
    start = Clock::now();
    communicate();
    comm.push_back(slowest(seconds_since(start)));

    MPI_Barrier(MPI_COMM_WORLD);
    start = Clock::now();
    backward.run();
    communicate();
    serial.push_back(slowest(seconds_since(start)));

    MPI_Barrier(MPI_COMM_WORLD);
    start = Clock::now();
    std::thread communication(communicate);  // the only thread calling MPI until it is joined
    backward.run();
    communication.join();
    overlap.push_back(slowest(seconds_since(start)));
  }
  if (rank == 0) {
    double c = median(compute), m = median(comm), s = median(serial), o = median(overlap);
    std::printf("processes %d, %d threads each, %d rounds (medians, slowest process, ms):\n", size,
                keras::num_threads(), rounds);
    std::printf("  compute %.2f  comm %.2f  serial %.2f  overlap %.2f  (ideal max(compute, comm) %.2f)\n", c, m,
                s, o, std::max(c, m));
    std::printf("  overlap saves %.2f ms of the %.2f ms of communication (%.0f%%)\n", s - o, m,
                100.0 * (s - o) / m);
  }
  MPI_Finalize();
  return 0;
}
