// A data-parallel training program that suffers one fault, run by check_fault_exit.py under
// `mpirun -np 2`. Like a careless user's main, it catches every keras::Error and returns 0, so
// what ends the job is the engine's own fault handling (poisoned communicators, the leaving
// handshake in finalize, MPI_Abort), never the test. Each fault prints "fault_at=<seconds on
// CLOCK_MONOTONIC>" when it happens; the driver measures from there to the end of mpirun.
//
// Scenarios (the faulty rank in brackets):
//   normal        no fault; both ranks train and leave: the job must end with status 0
//   killed        [1] SIGKILL in the middle of fit
//   caught_error  [0] an exception in a callback, caught in main, which returns
//   stall         [1] sleeps 60 s inside fit; rank 0's collective times out (timeout 3 s),
//                 rank 0 checks that the poisoned communicator refuses at once, and returns
//   early_return  [0] returns from main after a first fit while rank 1 starts another
//   mismatch      ranks issue different collectives (count and dtype): both must be told
//   mismatch_small_large  [1] a 1 MiB all_reduce (waits for the signatures, then blocks) where
//                 rank 0 issues a 16-byte one (in flight beside its signature): both told
//   mismatch_barrier_broadcast  [0] a barrier where rank 1 broadcasts 3 int64: both told
//   blocked       [1] turns signature checks off and enters a blocking all_reduce that rank 0
//                 joins only after 40 s: the watchdog must end rank 1 (timeout 1 s, so after
//                 blocking_call_limit = 11 s; fault_at is when that limit passes)
#include <signal.h>
#include <time.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <string>
#include <thread>

#include "distribution/transports/mpi/blocking_watchdog.h"
#include "distribution/transports/mpi/mpi_communicator.h"
#include "keras.h"

namespace kd = keras::distribution;

namespace {

double monotonic_seconds() {
  timespec now{};
  clock_gettime(CLOCK_MONOTONIC, &now);
  return static_cast<double>(now.tv_sec) + static_cast<double>(now.tv_nsec) * 1e-9;
}

void say(const std::string& text) {
  std::printf("rank %d: %s\n", kd::process_id(), text.c_str());
  std::fflush(stdout);
}

void mark_fault(const char* what) {
  std::printf("rank %d: fault_at=%.6f (%s)\n", kd::process_id(), monotonic_seconds(), what);
  std::fflush(stdout);
}

// Calls `action` on `rank` at `batch` of the first epoch.
class FaultAt : public keras::Callback {
 public:
  FaultAt(int rank, std::int64_t batch, std::function<void()> action)
      : rank_(rank), batch_(batch), action_(std::move(action)) {}
  void on_train_batch_end(keras::Model&, std::int64_t batch, const keras::Logs&) override {
    if (!done_ && kd::process_id() == rank_ && batch == batch_) {
      done_ = true;
      action_();
    }
  }

 private:
  int rank_;
  std::int64_t batch_;
  std::function<void()> action_;
  bool done_ = false;
};

void train(int epochs, std::vector<keras::CallbackPtr> callbacks = {}) {
  keras::set_random_seed(7);
  keras::Tensor x = keras::ops::random({keras::RandomDistribution::normal, 0, 1, 1}, {64, 4});
  keras::Tensor y = keras::ops::cast(
      keras::ops::random({keras::RandomDistribution::uniform, 0, 3, 2}, {64}, keras::float64),
      keras::int64);
  keras::Sequential model({keras::layers::Dense(8, "relu"), keras::layers::Dense(3)});
  model.compile("sgd", keras::losses::SparseCategoricalCrossentropy(true));
  model.fit(x, y, {.batch_size = 8, .epochs = epochs, .callbacks = callbacks, .verbose = 0});
}

int run(const std::string& scenario) {
  kd::set_distribution(std::make_shared<kd::DataParallel>());
  if (scenario == "normal") {
    train(2);
    say("trained");
  } else if (scenario == "killed") {
    train(1000, {std::make_shared<FaultAt>(1, 3, [] {
                   mark_fault("rank 1 kills itself");
                   ::kill(::getpid(), SIGKILL);
                 })});
  } else if (scenario == "caught_error") {
    train(1000, {std::make_shared<FaultAt>(0, 3, [] {
                   mark_fault("rank 0 throws");
                   throw keras::ValueError("an error of the user's own code on rank 0");
                 })});
  } else if (scenario == "stall") {
    try {
      train(1000, {std::make_shared<FaultAt>(1, 3, [] {
                     say("stalling for 60 s");
                     std::this_thread::sleep_for(std::chrono::seconds(60));
                   })});
    } catch (const kd::CollectiveError& error) {
      mark_fault("rank 0's collective timed out");
      say(std::string("caught: ") + error.what());
      auto start = std::chrono::steady_clock::now();
      try {
        kd::world().barrier();
        say("the poisoned communicator accepted a barrier");
      } catch (const kd::CollectiveError& refused) {
        double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        say(std::string("poisoned, refused in ") + std::to_string(seconds) + " s: " + refused.what());
      }
      throw;
    }
  } else if (scenario == "frozen" || scenario == "frozen_coordinator") {
    // A process stops (SIGSTOP: every thread, its heartbeat too), as a wedged machine or a
    // debugger would; the test's driver continues it once the others have ended.
    const int rank = scenario == "frozen" ? 1 : 0;
    train(1000, {std::make_shared<FaultAt>(rank, 3, [rank] {
                   mark_fault(rank == 1 ? "rank 1 freezes" : "rank 0 freezes");
                   ::kill(::getpid(), SIGSTOP);
                 })});
  } else if (scenario == "train_long") {
    // Trains until something outside ends the job (the namespace test bed's link faults).
    say("training");
    train(1000);
  } else if (scenario == "slow_step") {
    // One step computes for longer than the heartbeat timeout: not a dead peer.
    train(2, {std::make_shared<FaultAt>(1, 3, [] {
                say("computing for 8 s");
                std::this_thread::sleep_for(std::chrono::seconds(8));
              })});
    say("trained");
  } else if (scenario == "early_return") {
    train(1);
    if (kd::process_id() == 0) {
      mark_fault("rank 0 returns early");
      return 0;
    }
    train(1000);
  } else if (scenario == "mismatch") {
    std::vector<double> data(kd::process_id() == 0 ? 4 : 8, 1.0);
    if (kd::process_id() == 0) {
      mark_fault("ranks issue different collectives");
      kd::world().all_reduce(data.data(), 4, keras::float64, kd::ReduceOperation::sum);
    } else {
      std::vector<float> other(8, 1.0f);
      kd::world().all_reduce(other.data(), 8, keras::float32, kd::ReduceOperation::max);
    }
  } else if (scenario == "mismatch_small_large") {
    std::vector<float> data(kd::process_id() == 0 ? 4 : 1 << 18, 1.0f);
    if (kd::process_id() == 1) mark_fault("ranks issue a small and a large all_reduce");
    kd::world().all_reduce(data.data(), static_cast<std::int64_t>(data.size()), keras::float32,
                           kd::ReduceOperation::sum);
  } else if (scenario == "mismatch_barrier_broadcast") {
    if (kd::process_id() == 0) {
      mark_fault("a barrier against a broadcast");
      kd::world().barrier();
    } else {
      std::vector<std::int64_t> data(3, 7);
      kd::world().broadcast(data.data(), 3, keras::int64, 0);
    }
  } else if (scenario == "blocked") {
    std::vector<float> data(4, 1.0f);
    if (kd::process_id() == 1) {
      auto* mpi = dynamic_cast<kd::MpiCommunicator*>(&kd::world());
      mpi->set_signature_checks(false);
      double limit = std::chrono::duration<double>(kd::blocking_call_limit(mpi->timeout())).count();
      std::printf("rank 1: fault_at=%.6f (the blocking call outlives its limit)\n",
                  monotonic_seconds() + limit);
      std::fflush(stdout);
    } else {
      std::this_thread::sleep_for(std::chrono::seconds(40));
    }
    kd::world().all_reduce(data.data(), 4, keras::float32, kd::ReduceOperation::sum);
  } else {
    std::fprintf(stderr, "unknown scenario '%s'\n", scenario.c_str());
    return 2;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: fault_tool normal|killed|caught_error|stall|frozen|frozen_coordinator|slow_step|train_long|early_return|mismatch|blocked\n");
    return 2;
  }
  kd::initialize();
  try {
    return run(argv[1]);
  } catch (const keras::Error& error) {
    say(std::string("caught in main: ") + error.what());
    return 0;
  }
}
