// A training program that BackupAndRestore must resume, run by check_resume.py: trains a small
// MLP with Dropout under no distribution, DataParallel or ModelParallel, with a backup in
// --backup-dir, and writes the final weights to --weights-out. With --kill-at E:B the process
// of rank --kill-rank sends itself SIGKILL after batch B of epoch E (0-based), as a crashed
// node would die: nothing after that runs, no destructor, no flush. Run again the same way
// without --kill-at, it must go on from the backup and end with the uninterrupted weights.
#include <signal.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "keras.h"

namespace kd = keras::distribution;

namespace {

struct Flags {
  std::string distribution = "none";
  std::string backup_dir;
  std::string save_freq = "epoch";
  std::string weights_out;
  int kill_epoch = -1;
  std::int64_t kill_batch = -1;
  int kill_rank = -1;  // -1: the last process
};

[[noreturn]] void usage(const std::string& problem) {
  std::fprintf(stderr,
               "backup_tool: %s\nusage: backup_tool --backup-dir DIR --weights-out FILE.safetensors\n"
               "       [--distribution none|data_parallel|model_parallel] [--save-freq epoch|N]\n"
               "       [--kill-at EPOCH:BATCH] [--kill-rank R]\n",
               problem.c_str());
  std::exit(2);
}

Flags parse(int argc, char** argv) {
  Flags flags;
  for (int i = 1; i < argc; ++i) {
    std::string flag = argv[i];
    if (i + 1 >= argc) usage("flag " + flag + " needs a value");
    std::string value = argv[++i];
    if (flag == "--distribution") {
      flags.distribution = value;
    } else if (flag == "--backup-dir") {
      flags.backup_dir = value;
    } else if (flag == "--save-freq") {
      flags.save_freq = value;
    } else if (flag == "--weights-out") {
      flags.weights_out = value;
    } else if (flag == "--kill-at") {
      if (std::sscanf(value.c_str(), "%d:%ld", &flags.kill_epoch, &flags.kill_batch) != 2) {
        usage("--kill-at wants EPOCH:BATCH, got '" + value + "'");
      }
    } else if (flag == "--kill-rank") {
      flags.kill_rank = std::atoi(value.c_str());
    } else {
      usage("unknown flag " + flag);
    }
  }
  if (flags.backup_dir.empty() || flags.weights_out.empty()) usage("--backup-dir and --weights-out are required");
  if (flags.distribution != "none" && flags.distribution != "data_parallel" &&
      flags.distribution != "model_parallel") {
    usage("--distribution must be none, data_parallel or model_parallel, got '" + flags.distribution + "'");
  }
  return flags;
}

class KillAt : public keras::Callback {
 public:
  KillAt(int epoch, std::int64_t batch) : epoch_(epoch), batch_(batch) {}
  void on_epoch_begin(keras::Model&, int epoch) override { current_ = epoch; }
  void on_train_batch_end(keras::Model&, std::int64_t batch, const keras::Logs&) override {
    if (current_ != epoch_ || batch != batch_) return;
    std::printf("rank %d: SIGKILL after batch %ld of epoch %d\n", kd::process_id(), batch, current_);
    std::fflush(stdout);
    ::kill(::getpid(), SIGKILL);
  }

 private:
  int epoch_, current_ = -1;
  std::int64_t batch_;
};

}  // namespace

int main(int argc, char** argv) {
  Flags flags = parse(argc, argv);
  kd::initialize();
  keras::set_random_seed(11);
  if (flags.distribution == "data_parallel") {
    kd::set_distribution(std::make_shared<kd::DataParallel>());
  } else if (flags.distribution == "model_parallel") {
    auto mesh = std::make_shared<kd::DeviceMesh>(std::vector<std::int64_t>{1, kd::num_processes()},
                                                 std::vector<std::string>{"batch", "model"});
    auto layout_map = std::make_shared<kd::LayoutMap>(mesh);
    (*layout_map)[".*up/kernel"] = {std::nullopt, "model"};
    (*layout_map)[".*up/bias"] = {"model"};
    (*layout_map)[".*down/kernel"] = {"model", std::nullopt};
    kd::set_distribution(std::make_shared<kd::ModelParallel>(layout_map));
  }
  // Three noisy classes in 8 dimensions, the same on every process. 245 samples in batches of
  // 32: a short last batch of 21, split 11/10 under DataParallel on 2 processes.
  const std::int64_t samples = 245;
  keras::Tensor labels = keras::ops::cast(
      keras::ops::random({keras::RandomDistribution::uniform, 0, 3, 5}, {samples}, keras::float64),
      keras::int64);
  keras::Tensor centres = keras::ops::random({keras::RandomDistribution::normal, 0, 2, 6}, {3, 8});
  keras::Tensor x = keras::ops::take(centres, labels, 0) +
                    keras::ops::random({keras::RandomDistribution::normal, 0, 1, 7}, {samples, 8});

  namespace kl = keras::layers;
  kl::DenseOptions up, down;
  up.name = "up";
  down.name = "down";
  // 32768 units: the up kernel is 1 MiB, so under DataParallel it is updated by blocks and its
  // Adam state is whole only after the gather before each save (distribution/runtime/gradient_reducer.h).
  keras::Sequential model({kl::Dense(32768, "relu", up), kl::Dropout(0.2), kl::Dense(3, "", down)});
  model.compile(keras::optimizers::Adam(0.01),
                keras::losses::SparseCategoricalCrossentropy(/*from_logits=*/true), {"accuracy"});
  model.predict(keras::ops::slice(x, {0, 0}, {1, 8}));  // BackupAndRestore needs it built

  keras::BackupAndRestore::Options options;
  if (flags.save_freq != "epoch") options.save_freq = std::int64_t{std::atol(flags.save_freq.c_str())};
  auto backup = std::make_shared<keras::BackupAndRestore>(flags.backup_dir, options);
  // A schedule that depends on the current rate: resuming in the middle of an epoch must not
  // apply it twice. Listed before the backup, as the rate it sets is part of what is saved.
  auto schedule = std::make_shared<keras::LearningRateScheduler>(
      [](int epoch, double rate) { return epoch == 0 ? rate : rate * 0.7; });
  std::vector<keras::CallbackPtr> callbacks = {schedule, backup};
  int kill_rank = flags.kill_rank >= 0 ? flags.kill_rank : kd::num_processes() - 1;
  if (flags.kill_epoch >= 0 && kd::process_id() == kill_rank) {
    callbacks.push_back(std::make_shared<KillAt>(flags.kill_epoch, flags.kill_batch));
  }
  keras::Tensor x_validation = keras::ops::slice(x, {0, 0}, {64, 8});
  keras::Tensor y_validation = keras::ops::slice(labels, {0}, {64});
  keras::History history =
      model.fit(x, labels, {.batch_size = 32, .epochs = 3,
                            .validation_data = {x_validation, y_validation},
                            .callbacks = callbacks, .verbose = 0});
  if (kd::process_id() == 0) {
    if (backup->restored()) {
      std::printf("restored epoch=%d step=%ld\n", backup->restored_epoch(), backup->restored_step());
    } else {
      std::printf("not restored: trained from the start\n");
    }
    std::printf("final loss=%.9g val_loss=%.9g\n", history.history["loss"].back(),
                history.history["val_loss"].back());
  }
  // A sharded model's weights are gathered, which every process takes part in.
  if (flags.distribution == "model_parallel" || kd::process_id() == 0) model.save_weights(flags.weights_out);
  return 0;
}
