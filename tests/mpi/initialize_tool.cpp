// Runs distribution::initialize() once, as a program must, so that CTest can check how it reads
// KERAS_DISTRIBUTION_* variables and agrees with mpirun (tests/CMakeLists.txt sets the
// environment of each case and matches the output). Prints what it found, or the error. With
// --train, the job then trains a small model data-parallel for two epochs and checks that every
// process ends with the same loss (the rendezvous tests' proof that the job works).
// With --list-bound, it prints every address it bound a socket to (the store's and Gloo's), so
// a test can check that none is every interface's.
//   initialize_tool [--num-processes N] [--process-id N] [--job-addresses LIST] [--job-token T]
//                   [--train 1] [--list-bound 1]
#include <arpa/inet.h>
#include <dlfcn.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <cstdio>
#include <mutex>
#include <vector>
#include <optional>
#include <exception>
#include <string>

#include "keras.h"

int integer(const std::string& text) {
  std::size_t used = 0;
  int value = 0;
  try {
    value = std::stoi(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used == 0 || used != text.size()) throw keras::ValueError("'" + text + "' is not an integer");
  return value;
}

// Every address this process binds a socket to, recorded by the bind() below: the executable's
// definition comes before libc's for the static library and for libgloo.so alike.
std::mutex bound_mutex;
std::vector<std::string> bound_addresses;

extern "C" int bind(int fd, const sockaddr* address, socklen_t length) {
  using Bind = int (*)(int, const sockaddr*, socklen_t);
  static auto real_bind = reinterpret_cast<Bind>(dlsym(RTLD_NEXT, "bind"));
  char host[INET6_ADDRSTRLEN] = "?";
  int port = 0;
  if (address->sa_family == AF_INET) {
    const auto* ipv4 = reinterpret_cast<const sockaddr_in*>(address);
    inet_ntop(AF_INET, &ipv4->sin_addr, host, sizeof host);
    port = ntohs(ipv4->sin_port);
  } else if (address->sa_family == AF_INET6) {
    const auto* ipv6 = reinterpret_cast<const sockaddr_in6*>(address);
    inet_ntop(AF_INET6, &ipv6->sin6_addr, host, sizeof host);
    port = ntohs(ipv6->sin6_port);
  }
  {
    std::lock_guard lock(bound_mutex);
    bound_addresses.push_back(std::string(host) + ":" + std::to_string(port));
  }
  return real_bind(fd, address, length);
}

// Two epochs of a small classifier under DataParallel; true when every process ends with the
// same loss.
bool train_data_parallel() {
  namespace kd = keras::distribution;
  using namespace keras;
  kd::set_distribution(std::make_shared<kd::DataParallel>());
  set_random_seed(7);
  Tensor labels = ops::cast(ops::random({RandomDistribution::uniform, 0, 3, 5}, {96}, float64), int64);
  Tensor x = ops::random({RandomDistribution::normal, 0, 1, 6}, {96, 4}, float32) +
             ops::cast(ops::reshape(labels, {96, 1}), float32);
  Sequential model({layers::Dense(8, "relu"), layers::Dense(3)});
  model.compile(optimizers::Adam(0.01), losses::SparseCategoricalCrossentropy(true));
  model.fit(x, labels, {.batch_size = 16, .epochs = 2, .verbose = 0});
  double loss = model.evaluate(x, labels, {.batch_size = 32, .verbose = 0}).at("loss");
  double both[2] = {loss, -loss};
  kd::world().all_reduce(both, 2, keras::float64, kd::ReduceOperation::max);
  bool same = both[0] == -both[1];
  std::printf("trained: loss=%.6f %s\n", loss, same ? "equal on every process" : "DIFFERS between processes");
  kd::set_distribution(nullptr);
  return same;
}

int main(int argc, char** argv) {
  namespace kd = keras::distribution;
  try {
    std::optional<std::string> addresses, token;
    std::optional<int> processes, id;
    bool train = false, list_bound = false, start_only = false;
    for (int i = 1; i < argc; ++i) {
      // "--job-token=" gives an empty token (CTest drops an empty argument of its own).
      if (std::string(argv[i]) == "--job-token=") {
        token = "";
        continue;
      }
      if (i + 1 == argc) break;
      std::string flag = argv[i++];
      if (flag == "--num-processes") processes = integer(argv[i]);
      else if (flag == "--process-id") id = integer(argv[i]);
      else if (flag == "--job-addresses") addresses = argv[i];
      else if (flag == "--job-token") token = argv[i];
      else if (flag == "--train") train = integer(argv[i]) != 0;
      else if (flag == "--list-bound") list_bound = integer(argv[i]) != 0;
      else if (flag == "--start-only") start_only = integer(argv[i]) != 0;  // benchmarks/join_time.sh's floor
      else throw keras::ValueError("unknown flag " + flag);
    }
    if (start_only) return 0;
    kd::initialize(addresses, processes, id, token);
    // All processes must have agreed on the seed: compare it across them.
    auto seed = static_cast<std::int64_t>(keras::next_random_seed());
    std::int64_t both[2] = {seed, -seed};
    kd::world().all_reduce(both, 2, keras::int64, kd::ReduceOperation::max);
    bool agree = both[0] == -both[1];
    std::printf("initialized: processes=%d id=%d seeds %s\n", kd::num_processes(), kd::process_id(),
                agree ? "agree" : "DIFFER");
    if (train && !train_data_parallel()) agree = false;
    if (list_bound) {
      std::lock_guard lock(bound_mutex);
      std::string listing;
      for (const std::string& address : bound_addresses) listing += " " + address;
      std::printf("bound:%s\n", listing.c_str());
    }
    try {
      kd::initialize();
    } catch (const keras::ValueError& error) {
      std::printf("second call: %s\n", error.what());
    }
    kd::finalize();
    return agree ? 0 : 1;
  } catch (const keras::Error& error) {
    // On stderr, unbuffered: the message must survive whatever happens while the process exits.
    std::fprintf(stderr, "error: %s\n", error.what());
    return 1;
  }
}
