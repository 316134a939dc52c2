// The callbacks users expect from Keras: CSVLogger's file, LearningRateScheduler's and
// ReduceLROnPlateau's learning rates (ReduceLROnPlateau's rules traced by hand from Keras'
// source), and BackupAndRestore resuming an interrupted run to the weights of an uninterrupted
// one (in process here; tests/backup/check_resume.py kills real processes with SIGKILL).
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include "tests/test_helpers.h"

namespace keras {
namespace {

using testing::Blobs;
using testing::expect_close;
using testing::expect_throw_with;
using testing::make_blobs;

class CallbacksTest : public ::testing::Test {
 protected:
  void SetUp() override {
    clear_session();
    set_random_seed(1);
    directory_ = std::filesystem::temp_directory_path() /
                 ("keras_callbacks_test_" + std::to_string(::getpid()));
    std::filesystem::remove_all(directory_);
    std::filesystem::create_directories(directory_);
  }
  void TearDown() override { std::filesystem::remove_all(directory_); }
  std::string file(const std::string& name) const { return (directory_ / name).string(); }
  static std::vector<std::string> lines(const std::string& path) {
    std::ifstream input(path);
    std::vector<std::string> result;
    for (std::string line; std::getline(input, line);) result.push_back(line);
    return result;
  }
  std::filesystem::path directory_;
};

std::vector<std::string> split(const std::string& line, char separator) {
  std::vector<std::string> fields;
  std::stringstream stream(line);
  for (std::string field; std::getline(stream, field, separator);) fields.push_back(field);
  return fields;
}

TEST_F(CallbacksTest, CSVLoggerWritesKerasColumnsAndAppends) {
  Blobs train = make_blobs(96, 3), test = make_blobs(48, 4);
  Sequential model({layers::Dense(8, "relu"), layers::Dense(3)});
  model.compile(optimizers::Adam(0.01), losses::SparseCategoricalCrossentropy(true), {"accuracy"});
  auto logger = std::make_shared<CSVLogger>(file("history.csv"));
  History history = model.fit(train.x, train.y, {.batch_size = 32, .epochs = 3,
                                                 .validation_data = {test.x, test.y},
                                                 .callbacks = {logger}, .verbose = 0});
  std::vector<std::string> rows = lines(file("history.csv"));
  ASSERT_EQ(rows.size(), 4u);
  EXPECT_EQ(rows[0], "epoch,accuracy,loss,val_accuracy,val_loss");
  for (int epoch = 0; epoch < 3; ++epoch) {
    std::vector<std::string> fields = split(rows[epoch + 1], ',');
    ASSERT_EQ(fields.size(), 5u);
    EXPECT_EQ(fields[0], std::to_string(epoch));
    // The shortest text that reads back to the same double, as Python's repr.
    EXPECT_EQ(std::stod(fields[2]), history.history["loss"][epoch]);
    EXPECT_EQ(std::stod(fields[4]), history.history["val_loss"][epoch]);
  }
  // Appending (what a resumed run does): rows after the old ones, no second header.
  auto appender = std::make_shared<CSVLogger>(file("history.csv"), ';', true);
  model.fit(train.x, train.y, {.batch_size = 32, .epochs = 1, .callbacks = {appender}, .verbose = 0});
  rows = lines(file("history.csv"));
  ASSERT_EQ(rows.size(), 5u);
  // No validation in this run: Keras still gives the val_ columns, as NA.
  std::vector<std::string> fields = split(rows[4], ';');
  ASSERT_EQ(fields.size(), 5u);
  EXPECT_EQ(fields[3], "NA");
  EXPECT_EQ(fields[4], "NA");
  // A fresh file without validation has the val_ twins in its header.
  auto fresh = std::make_shared<CSVLogger>(file("fresh.csv"));
  model.fit(train.x, train.y, {.batch_size = 32, .epochs = 1, .callbacks = {fresh}, .verbose = 0});
  EXPECT_EQ(lines(file("fresh.csv"))[0], "epoch,accuracy,loss,val_accuracy,val_loss");
  expect_throw_with<FileNotFoundError>(
      [&] {
        auto unwritable = std::make_shared<CSVLogger>(file("no/such/dir/history.csv"));
        model.fit(train.x, train.y, {.epochs = 1, .callbacks = {unwritable}, .verbose = 0});
      },
      "cannot open");
  expect_throw_with<ValueError>([] { CSVLogger("x.csv", '\n'); }, "separator");
}

TEST_F(CallbacksTest, LearningRateSchedulerSetsEachEpochsRate) {
  Blobs train = make_blobs(64, 5);
  Sequential model({layers::Dense(3)});
  model.compile(optimizers::SGD(0.1), losses::SparseCategoricalCrossentropy(true));
  auto scheduler = std::make_shared<LearningRateScheduler>(
      [](int epoch, double rate) { return epoch == 0 ? rate : rate * 0.5; });
  History history = model.fit(train.x, train.y,
                              {.batch_size = 32, .epochs = 3, .callbacks = {scheduler}, .verbose = 0});
  EXPECT_EQ(history.history["learning_rate"], (std::vector<double>{0.1, 0.05, 0.025}));
  EXPECT_EQ(model.optimizer().learning_rate(), 0.025);
  auto broken = std::make_shared<LearningRateScheduler>([](int, double) { return -1.0; });
  expect_throw_with<ValueError>(
      [&] { model.fit(train.x, train.y, {.epochs = 1, .callbacks = {broken}, .verbose = 0}); },
      "returned -1");
}

TEST_F(CallbacksTest, ReduceLROnPlateauFollowsKerasRules) {
  Sequential model({layers::Dense(1)});
  model.compile(optimizers::SGD(0.1), "mse");
  ReduceLROnPlateau reducer({.monitor = "val_loss", .factor = 0.5, .patience = 2, .cooldown = 1,
                             .min_lr = 0.02});
  reducer.on_train_begin(model);
  // Traced by hand through keras/src/callbacks/reduce_lr_on_plateau.py with these losses.
  const std::vector<double> losses = {1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 0.5, 1.0, 1.0};
  const std::vector<double> rate_after = {0.1, 0.1, 0.05, 0.05, 0.025, 0.025, 0.025, 0.025, 0.02};
  const std::vector<double> logged = {0.1, 0.1, 0.1, 0.05, 0.05, 0.025, 0.025, 0.025, 0.025};
  for (int epoch = 0; epoch < static_cast<int>(losses.size()); ++epoch) {
    Logs logs = {{"loss", losses[epoch]}, {"val_loss", losses[epoch]}};
    reducer.on_epoch_end(model, epoch, logs);
    EXPECT_DOUBLE_EQ(model.optimizer().learning_rate(), rate_after[epoch]) << "epoch " << epoch;
    EXPECT_DOUBLE_EQ(logs["learning_rate"], logged[epoch]) << "epoch " << epoch;
  }
  // An accuracy is maximised under mode "auto".
  ReduceLROnPlateau accuracy({.monitor = "val_accuracy", .factor = 0.5, .patience = 1});
  model.optimizer().set_learning_rate(0.1);
  accuracy.on_train_begin(model);
  Logs better = {{"val_accuracy", 0.5}}, worse = {{"val_accuracy", 0.4}};
  accuracy.on_epoch_end(model, 0, better);
  accuracy.on_epoch_end(model, 1, worse);
  EXPECT_DOUBLE_EQ(model.optimizer().learning_rate(), 0.05);
  expect_throw_with<ValueError>([] { ReduceLROnPlateau({.factor = 1.0}); },
                                "does not support a factor >= 1.0. Received factor=1");
  expect_throw_with<ValueError>([] { ReduceLROnPlateau({.patience = -1}); }, "patience");
}

// Records the logs each batch end gets; asks for them or not (Callback::needs_batch_logs).
class BatchLogsRecorder : public Callback {
 public:
  explicit BatchLogsRecorder(bool asks) : asks_(asks) {}
  bool needs_batch_logs(std::int64_t) const override { return asks_; }
  void on_train_batch_end(Model&, std::int64_t, const Logs& logs) override { seen.push_back(logs); }
  std::vector<Logs> seen;

 private:
  bool asks_;
};

// Reading a batch's logs waits for the device, so fit() reads them only where a callback asks;
// what it reads, and the epochs' logs, are the same either way.
TEST_F(CallbacksTest, BatchLogsAreReadOnlyWhereACallbackAsks) {
  Blobs data = make_blobs(64, 4);
  auto train = [&](std::vector<CallbackPtr> callbacks) {
    clear_session();
    set_random_seed(5);
    Sequential model({layers::Dense(8, "relu"), layers::Dense(3)});
    model.compile(optimizers::Adam(0.01), losses::SparseCategoricalCrossentropy(true),
                  {"accuracy"});
    return model.fit(data.x, data.y,
                     {.batch_size = 16, .epochs = 2, .callbacks = callbacks, .verbose = 0});
  };
  auto silent = std::make_shared<BatchLogsRecorder>(false);
  History unread = train({silent});
  ASSERT_EQ(silent->seen.size(), 8u);
  for (const Logs& logs : silent->seen) EXPECT_TRUE(logs.empty());

  auto alongside = std::make_shared<BatchLogsRecorder>(false);
  auto asking = std::make_shared<BatchLogsRecorder>(true);
  History read = train({alongside, asking});
  ASSERT_EQ(asking->seen.size(), 8u);
  for (std::size_t batch = 0; batch < 8; ++batch) {
    EXPECT_EQ(asking->seen[batch].count("loss"), 1u) << batch;
    EXPECT_EQ(asking->seen[batch].count("accuracy"), 1u) << batch;
    EXPECT_EQ(alongside->seen[batch], asking->seen[batch]) << "one asks, all get them";
  }
  // The last batch's logs are the epoch's, and the epochs' logs did not depend on the reads.
  EXPECT_EQ(asking->seen[3].at("loss"), read.history["loss"][0]);
  EXPECT_EQ(asking->seen[7].at("accuracy"), read.history["accuracy"][1]);
  EXPECT_EQ(unread.history, read.history);
}

// Interrupts fit() by throwing from a callback after batch `batch` of epoch `epoch`: the
// in-process stand-in for a killed run (the backup written so far is all that survives).
class Interrupt : public Callback {
 public:
  Interrupt(int epoch, std::int64_t batch) : epoch_(epoch), batch_(batch) {}
  void on_epoch_begin(Model&, int epoch) override { current_ = epoch; }
  void on_train_batch_end(Model&, std::int64_t batch, const Logs&) override {
    if (current_ == epoch_ && batch == batch_) throw std::runtime_error("interrupted");
  }

 private:
  int epoch_, current_ = -1;
  std::int64_t batch_;
};

struct RunResult {
  std::vector<std::vector<double>> weights;
  History history;
  std::shared_ptr<BackupAndRestore> backup;
  double loss_scale = 0;
  std::int64_t finite_steps_in_a_row = 0;
};

// What the run's Adam keeps beside its slots, which a backup between two updates must hold.
enum class AdamState {
  slots_only,
  accumulate_and_average,  // adds 5 steps' gradients up before each update; moving averages
  loss_scaled,             // LossScaleOptimizer from a scale that overflows, growing every 2 steps
};

// The same program each time, as a restarted process would run it: same seeds, same model.
// 120 samples in batches of 16: 8 batches an epoch, the last one short (8 samples).
RunResult train(const std::string& backup_dir, BackupAndRestore::Options options,
                std::shared_ptr<Callback> interrupt = nullptr, std::int64_t batch_size = 16,
                AdamState state = AdamState::slots_only) {
  clear_session();
  set_random_seed(3);
  Blobs data = make_blobs(120, 9), validation = make_blobs(32, 10);
  Sequential model({layers::Dense(8, "relu"), layers::Dropout(0.2), layers::Dense(3)});
  std::shared_ptr<optimizers::Adam> adam;
  if (state == AdamState::loss_scaled) {
    // 1e40 is past float32's range: the first steps overflow and halve it, and every second
    // finite step doubles it into another overflow, so the scale moves all run long.
    adam = std::make_shared<optimizers::LossScaleOptimizer<optimizers::Adam>>(optimizers::Adam(0.01), 1e40, 2);
  } else {
    adam = std::make_shared<optimizers::Adam>(0.01);
  }
  if (state == AdamState::accumulate_and_average) {
    adam->set_gradient_accumulation_steps(5);
    adam->set_ema(true, 0.9);
  }
  model.compile(adam, losses::SparseCategoricalCrossentropy(true), {"accuracy"});
  model.predict(ops::slice(data.x, {0, 0}, {1, 2}));  // builds it, as Keras requires
  RunResult result;
  result.backup = std::make_shared<BackupAndRestore>(backup_dir, options);
  // A schedule that depends on the current rate: a resumed epoch must not apply it twice.
  auto schedule = std::make_shared<LearningRateScheduler>(
      [](int epoch, double rate) { return epoch == 0 ? rate : rate * 0.7; });
  std::vector<CallbackPtr> callbacks = {schedule, result.backup};
  if (interrupt) callbacks.push_back(interrupt);
  result.history = model.fit(data.x, data.y, {.batch_size = batch_size, .epochs = 3,
                                              .validation_data = {validation.x, validation.y},
                                              .callbacks = callbacks, .verbose = 0});
  for (const Tensor& weight : model.weights()) result.weights.push_back(weight.to_vector<double>());
  result.loss_scale = adam->loss_scale();
  result.finite_steps_in_a_row = adam->finite_steps_in_a_row();
  return result;
}

void expect_same_run(const RunResult& resumed, const RunResult& reference) {
  ASSERT_EQ(resumed.weights.size(), reference.weights.size());
  for (std::size_t i = 0; i < reference.weights.size(); ++i) {
    expect_close(resumed.weights[i], reference.weights[i], 1e-6, str("weight ", i));
  }
  // The resumed run's last epoch logs are the uninterrupted run's.
  for (const char* key : {"loss", "accuracy", "val_loss"}) {
    EXPECT_NEAR(resumed.history.history.at(key).back(), reference.history.history.at(key).back(),
                1e-9) << key;
  }
}

TEST_F(CallbacksTest, BackupAndRestoreResumesAnInterruptedRunAtTheEpoch) {
  RunResult reference = train(file("reference"), {});
  EXPECT_FALSE(reference.backup->restored());
  EXPECT_FALSE(std::filesystem::exists(file("reference")));  // delete_checkpoint
  // Interrupted in the middle of the second epoch: the backup of the first epoch's end survives.
  EXPECT_THROW(train(file("backup"), {}, std::make_shared<Interrupt>(1, 4)), std::runtime_error);
  EXPECT_TRUE(std::filesystem::exists(file("backup/latest.safetensors")));
  RunResult resumed = train(file("backup"), {});
  EXPECT_TRUE(resumed.backup->restored());
  EXPECT_EQ(resumed.backup->restored_epoch(), 1);
  EXPECT_EQ(resumed.backup->restored_step(), 0);
  EXPECT_EQ(resumed.history.epoch, (std::vector<int>{1, 2}));  // as Keras: from the epoch resumed
  expect_same_run(resumed, reference);
}

TEST_F(CallbacksTest, BackupAndRestoreInBatchesResumesAtTheBatch) {
  BackupAndRestore::Options every_three = {.save_freq = std::int64_t{3}};
  RunResult reference = train(file("reference"), every_three);
  // 8 batches an epoch, a backup every 3: the last before batch 5 of epoch 1 is after its
  // batch 3 (the 12th batch), so 4 of its batches are done.
  EXPECT_THROW(train(file("backup"), every_three, std::make_shared<Interrupt>(1, 5)),
               std::runtime_error);
  RunResult resumed = train(file("backup"), every_three);
  EXPECT_EQ(resumed.backup->restored_epoch(), 1);
  EXPECT_EQ(resumed.backup->restored_step(), 4);
  expect_same_run(resumed, reference);
  EXPECT_EQ(resumed.history.history.at("learning_rate"),
            std::vector<double>(reference.history.history.at("learning_rate").begin() + 1,
                                reference.history.history.at("learning_rate").end()));
  // The epoch totals so far came back too: the resumed epoch's loss is the uninterrupted one's.
  EXPECT_NEAR(resumed.history.history.at("loss").front(), reference.history.history.at("loss")[1],
              1e-9);
}

// A backup between two updates of an optimizer that accumulates gradients (after the 12th
// batch, 2 of 5 added up) holds the sums in progress, the moving averages and the calls made:
// the resumed run ends with the uninterrupted run's weights (the averages, after fit).
TEST_F(CallbacksTest, BackupAndRestoreKeepsGradientSumsAndAverages) {
  BackupAndRestore::Options every_three = {.save_freq = std::int64_t{3}};
  const AdamState state = AdamState::accumulate_and_average;
  RunResult reference = train(file("reference"), every_three, nullptr, 16, state);
  EXPECT_THROW(train(file("backup"), every_three, std::make_shared<Interrupt>(1, 5), 16, state), std::runtime_error);
  RunResult resumed = train(file("backup"), every_three, nullptr, 16, state);
  EXPECT_EQ(resumed.backup->restored_step(), 4);
  expect_same_run(resumed, reference);
}

// A loss-scaled run resumes with the scale it had reached and its count of finite steps: from
// the initial scale again, its first steps would be skipped as overflows and it would end
// elsewhere (this test fails so without the backup's loss_scale).
TEST_F(CallbacksTest, BackupAndRestoreKeepsTheLossScale) {
  BackupAndRestore::Options every_three = {.save_freq = std::int64_t{3}};
  const AdamState state = AdamState::loss_scaled;
  RunResult reference = train(file("reference"), every_three, nullptr, 16, state);
  EXPECT_LT(reference.loss_scale, 1e40);  // it did overflow and halve
  EXPECT_THROW(train(file("backup"), every_three, std::make_shared<Interrupt>(1, 5), 16, state), std::runtime_error);
  RunResult resumed = train(file("backup"), every_three, nullptr, 16, state);
  EXPECT_EQ(resumed.backup->restored_step(), 4);
  expect_same_run(resumed, reference);
  EXPECT_EQ(resumed.loss_scale, reference.loss_scale);
  EXPECT_EQ(resumed.finite_steps_in_a_row, reference.finite_steps_in_a_row);
  // A backup of a loss-scaled run does not resume a run without loss scaling, nor the reverse.
  EXPECT_THROW(train(file("backup"), every_three, std::make_shared<Interrupt>(1, 5), 16, state), std::runtime_error);
  expect_throw_with<ValueError>([&] { train(file("backup"), every_three); }, "with loss scaling (LossScaleOptimizer)");
  std::filesystem::remove_all(file("backup"));
  EXPECT_THROW(train(file("backup"), every_three, std::make_shared<Interrupt>(1, 5)), std::runtime_error);
  expect_throw_with<ValueError>([&] { train(file("backup"), every_three, nullptr, 16, state); },
                                "without loss scaling (LossScaleOptimizer)");
}

TEST_F(CallbacksTest, BackupAndRestoreFallsBackToThePreviousBackup) {
  BackupAndRestore::Options double_checkpoint = {.double_checkpoint = true};
  RunResult reference = train(file("reference"), double_checkpoint);
  EXPECT_THROW(train(file("backup"), double_checkpoint, std::make_shared<Interrupt>(2, 1)),
               std::runtime_error);
  ASSERT_TRUE(std::filesystem::exists(file("backup/previous.safetensors")));
  {
    std::ofstream corrupt(file("backup/latest.safetensors"), std::ios::trunc);
    corrupt << "torn write";
  }
  RunResult resumed = train(file("backup"), double_checkpoint);
  EXPECT_EQ(resumed.backup->restored_epoch(), 1);  // the previous one: after epoch 0
  expect_same_run(resumed, reference);
}

TEST_F(CallbacksTest, BackupAndRestoreRefusesWhatItCannotResume) {
  expect_throw_with<ValueError>([&] { BackupAndRestore(file("b"), {.save_freq = std::int64_t{0}}); },
                                "positive number of batches, got 0");
  expect_throw_with<ValueError>([&] { BackupAndRestore(file("b"), {.save_freq = "batch"}); },
                                "got 'batch'");
  Blobs data = make_blobs(32, 2);
  Sequential unbuilt({layers::Dense(3)});
  unbuilt.compile("adam", losses::SparseCategoricalCrossentropy(true));
  auto backup = std::make_shared<BackupAndRestore>(file("b"));
  expect_throw_with<ValueError>(
      [&] { unbuilt.fit(data.x, data.y, {.epochs = 1, .callbacks = {backup}, .verbose = 0}); },
      "must be built before fit()");
  // A backup of another model.
  EXPECT_THROW(train(file("b"), {}, std::make_shared<Interrupt>(1, 0)), std::runtime_error);
  // ... and of another run of this model (another batch size), which would resume wrongly.
  expect_throw_with<ValueError>([&] { train(file("b"), {}, nullptr, 24); },
                                "120 samples in batches of 16; this one has 120 samples in "
                                "batches of 24");
  clear_session();
  Sequential other({layers::Dense(5, "relu"), layers::Dense(3)});
  other.compile(optimizers::Adam(0.01), losses::SparseCategoricalCrossentropy(true));
  other.predict(ops::slice(data.x, {0, 0}, {1, 2}));
  expect_throw_with<ShapeError>(
      [&] { other.fit(data.x, data.y, {.epochs = 1, .callbacks = {backup}, .verbose = 0}); },
      "has shape (2, 8) but the model expects (2, 5)");
  clear_session();
  Sequential sgd_model({layers::Dense(8, "relu"), layers::Dropout(0.2), layers::Dense(3)});
  sgd_model.compile(optimizers::SGD(0.01), losses::SparseCategoricalCrossentropy(true));
  sgd_model.predict(ops::slice(data.x, {0, 0}, {1, 2}));
  expect_throw_with<ValueError>(
      [&] { sgd_model.fit(data.x, data.y, {.epochs = 1, .callbacks = {backup}, .verbose = 0}); },
      "saved with optimizer Adam");
}

}  // namespace
}  // namespace keras
