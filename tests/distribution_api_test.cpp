// The keras.distribution API in one process: the behaviours listed in section 12 of
// shared/reference/keras_distribution_spec.md, with our own error texts, plus the checks Keras
// lacks (a mesh axis used twice, layout rank, divisibility).
#include <cstdlib>

#include "distribution/runtime/launcher_variables.h"
#include "tests/test_helpers.h"

namespace keras::distribution {
namespace {

using keras::testing::expect_throw_with;
using Axes = std::vector<TensorLayout::Axis>;

std::vector<std::string> cpu_devices(int count) {
  std::vector<std::string> devices;
  for (int i = 0; i < count; ++i) devices.push_back("cpu:" + std::to_string(i));
  return devices;
}

TEST(DeviceMesh, KeepsShapeNamesAndRowMajorDevices) {
  DeviceMesh mesh({4, 2}, {"batch", "model"}, cpu_devices(8));
  EXPECT_EQ(mesh.shape(), (std::vector<std::int64_t>{4, 2}));
  EXPECT_EQ(mesh.axis_names(), (std::vector<std::string>{"batch", "model"}));
  EXPECT_EQ(mesh.coordinates(5), (std::vector<std::int64_t>{2, 1}));
  EXPECT_EQ(mesh.axis_size("model"), 2);
  EXPECT_EQ(mesh.to_string(), "<DeviceMesh shape=(4, 2), axis_names=['batch', 'model']>");
}

TEST(DeviceMesh, RejectsInvalidArguments) {
  expect_throw_with<ValueError>([] { DeviceMesh({4}, {}, cpu_devices(4)); }, "cannot be empty");
  expect_throw_with<ValueError>([] { DeviceMesh({4, 2}, {"batch"}, cpu_devices(8)); }, "same length");
  expect_throw_with<ValueError>([] { DeviceMesh({4, 2}, {"batch", "model"}, cpu_devices(4)); },
                                "needs 8 devices, but 4 were given");
  expect_throw_with<ValueError>([] { DeviceMesh({2, 2}, {"x", "x"}, cpu_devices(4)); }, "distinct");
  expect_throw_with<ValueError>([] { DeviceMesh({0}, {"x"}, cpu_devices(0)); }, "positive");
  DeviceMesh one_process({1}, {"batch"});  // defaults to list_devices()
  // As in Keras, the empty string is an axis name like any other.
  DeviceMesh unnamed({2, 2}, {"", "model"}, cpu_devices(4));
  EXPECT_EQ(unnamed.axis_size(""), 2);
  EXPECT_EQ(unnamed.to_string(), "<DeviceMesh shape=(2, 2), axis_names=['', 'model']>");
  expect_throw_with<ValueError>([] { DeviceMesh({2, 2}, {"", ""}, cpu_devices(4)); }, "distinct");
  EXPECT_EQ(one_process.devices(), (std::vector<std::string>{"cpu:0"}));
}

TEST(TensorLayout, ValidatesAxesEagerlyAndOnLateMeshBinding) {
  auto mesh = std::make_shared<DeviceMesh>(std::vector<std::int64_t>{4, 2},
                                           std::vector<std::string>{"data", "model"}, cpu_devices(8));
  TensorLayout layout({"data", std::nullopt}, mesh);
  EXPECT_EQ(layout.device_mesh(), mesh);
  expect_throw_with<ValueError>([&] { TensorLayout({"data", "unknown", std::nullopt}, mesh); },
                                "Invalid axis names");
  TensorLayout late({"data", "unknown"});
  expect_throw_with<ValueError>([&] { late.set_device_mesh(mesh); }, "Invalid axis names");
  TensorLayout bindable({std::nullopt, "model"});
  bindable.set_device_mesh(mesh);
  EXPECT_EQ(bindable.device_mesh(), mesh);
  expect_throw_with<ValueError>([&] { bindable.set_device_mesh(mesh); }, "Cannot override");
  expect_throw_with<ValueError>([] { TensorLayout({"model", "model"}); }, "twice");
}

TEST(TensorLayout, ShardsFollowMeshCoordinatesAndCheckRankAndDivisibility) {
  auto mesh = std::make_shared<DeviceMesh>(std::vector<std::int64_t>{2, 4},
                                           std::vector<std::string>{"batch", "model"}, cpu_devices(8));
  TensorLayout kernel({std::nullopt, "model"}, mesh);
  auto [starts, sizes] = kernel.shard_of({16, 8}, 6);  // device 6 = coordinates (1, 2)
  EXPECT_EQ(starts, (Shape{0, 4}));
  EXPECT_EQ(sizes, (Shape{16, 2}));
  TensorLayout data({"batch", std::nullopt}, mesh);
  EXPECT_EQ(data.shard_of({6, 3}, 5).first, (Shape{3, 0}));
  expect_throw_with<ValueError>([&] { kernel.check_fits({16, 6}, "kernel"); },
                                "cannot be split evenly over mesh axis 'model' of size 4");
  expect_throw_with<ValueError>([&] { kernel.check_fits({16}, "bias"); }, "one entry");
}

TEST(LayoutMap, FullMatchExactFirstAmbiguityAndOrder) {
  auto mesh = std::make_shared<DeviceMesh>(std::vector<std::int64_t>{2, 4},
                                           std::vector<std::string>{"batch", "model"}, cpu_devices(8));
  LayoutMap map(mesh);
  map["dense/kernel"] = TensorLayout({std::nullopt, "model"});
  map["dense/bias"] = TensorLayout({"model"});
  map[".*dense.*kernel"] = Axes{"model", std::nullopt};
  map[".*dense.*bias"] = TensorLayout({std::nullopt});
  map[".*bias"] = TensorLayout({"batch"});
  EXPECT_EQ(map.size(), 5u);
  EXPECT_EQ(map.keys(), (std::vector<std::string>{"dense/kernel", "dense/bias", ".*dense.*kernel",
                                                  ".*dense.*bias", ".*bias"}));
  EXPECT_EQ(map.get("dense/kernel")->axes(), (Axes{std::nullopt, "model"}));
  EXPECT_EQ(map.get("dense_2/kernel")->axes(), (Axes{"model", std::nullopt}));
  EXPECT_EQ(map.get("dense_2/kernel")->device_mesh(), mesh);
  expect_throw_with<ValueError>([&] { map.get("dense_2/bias"); },
                                "Path 'dense_2/bias' matches several LayoutMap keys");
  EXPECT_EQ(map.get("conv2d/kernel"), nullptr);
  EXPECT_EQ(map.get("conv2d/bias")->axes(), (Axes{"batch"}));
  EXPECT_EQ(map.get("my_dense/kernel_2"), nullptr) << "keys must match the whole path";
  expect_throw_with<ValueError>([&] { map["dense/kernel"] = TensorLayout({std::nullopt}); },
                                "already exists");
  expect_throw_with<ValueError>([&] { map["dense/other"] = TensorLayout({"unknown"}); },
                                "Invalid axis names");
  expect_throw_with<ValueError>([&] { map["(unclosed"] = TensorLayout({std::nullopt}); },
                                "not a valid regular expression");
  // Found by tests/fuzz/layout_fuzzer when keys were std::regex (undefined behaviour on these
  // numbers). PCRE2 refuses the count; it reads \\8... as literal digits, as Perl does (Python
  // would call it a bad group reference), which is harmless.
  expect_throw_with<ValueError>([&] { map["a{1,88888888888888888888}"] = TensorLayout({std::nullopt}); },
                                "not a valid regular expression");
  map["\\88888888888888888888"] = TensorLayout({std::nullopt});
  EXPECT_NE(map.get("88888888888888888888"), nullptr);
  map.pop("\\88888888888888888888");
  map.pop("dense/bias");
  EXPECT_EQ(map.size(), 4u);
  expect_throw_with<ValueError>([&] { map.pop(".*b.*"); }, "no key");
}

TEST(LayoutMap, KeysAreWrittenInPythonsDialect) {
  auto mesh = std::make_shared<DeviceMesh>(std::vector<std::int64_t>{1, 2},
                                           std::vector<std::string>{"batch", "model"}, cpu_devices(2));
  LayoutMap map(mesh);
  map["(?i)DECODER/.*/kernel"] = TensorLayout({std::nullopt, "model"});       // inline flag
  map["(?P<block>encoder_\\d+)/(?P=block)_proj/bias"] = TensorLayout({"model"});  // named group
  map["(?!.*lora).*attention.*/kernel"] = TensorLayout({"model", std::nullopt});  // lookahead
  EXPECT_NE(map.get("decoder/dense/kernel"), nullptr);
  EXPECT_NE(map.get("encoder_3/encoder_3_proj/bias"), nullptr);
  EXPECT_EQ(map.get("encoder_3/encoder_4_proj/bias"), nullptr);
  EXPECT_NE(map.get("self_attention/query/kernel"), nullptr);
  EXPECT_EQ(map.get("self_attention/query/lora_a/kernel"), nullptr) << "LoRA paths excluded";
  // A key with nested repetition against a long path stops at the match limit with a
  // ValueError rather than backtracking for minutes.
  map["(a*)*b"] = TensorLayout({std::nullopt});
  expect_throw_with<ValueError>([&] { map.get(std::string(40, 'a') + "cb"); }, "backtracking steps");
}

TEST(LayoutMap, CopiesAndModelParallelShareTheEntries) {
  auto mesh = std::make_shared<DeviceMesh>(std::vector<std::int64_t>{1},
                                           std::vector<std::string>{"model"}, cpu_devices(1));
  LayoutMap map(mesh);
  ModelParallel parallel(map);
  LayoutMap copy = map;
  map["dense/kernel"] = TensorLayout({std::nullopt, "model"});  // after the distribution was made
  EXPECT_NE(parallel.get_tensor_layout("dense/kernel"), nullptr) << "Keras shares the map";
  EXPECT_EQ(copy.size(), 1u);
}

TEST(Distribution, ScopeNestsAndRestores) {
  set_distribution(nullptr);
  auto mesh = std::make_shared<DeviceMesh>(std::vector<std::int64_t>{1},
                                           std::vector<std::string>{"batch"}, cpu_devices(1));
  auto first = std::make_shared<DataParallel>(mesh);
  auto second = std::make_shared<DataParallel>(mesh);
  EXPECT_EQ(distribution(), nullptr);
  {
    auto outer = first->scope();
    EXPECT_EQ(distribution(), first);
    {
      auto inner = second->scope();
      EXPECT_EQ(distribution(), second);
    }
    EXPECT_EQ(distribution(), first);
  }
  EXPECT_EQ(distribution(), nullptr);
}

TEST(Distribution, ClearSessionResetsTheGlobalDistribution) {
  set_distribution(std::make_shared<DataParallel>());
  ASSERT_NE(distribution(), nullptr);
  clear_session();
  EXPECT_EQ(distribution(), nullptr);
}

TEST(Distribution, DataShardIdUsesContiguousReplicaGroups) {
  for (int pid = 0; pid < 4; ++pid) EXPECT_EQ(data_shard_id_for(8, 4, pid), pid);
  std::vector<std::int64_t> shards;
  for (int pid = 0; pid < 4; ++pid) shards.push_back(data_shard_id_for(2, 4, pid));
  EXPECT_EQ(shards, (std::vector<std::int64_t>{0, 0, 1, 1}));
}

TEST(DataParallel, LayoutsAndReplicas) {
  DataParallel by_mesh(std::make_shared<DeviceMesh>(std::vector<std::int64_t>{8},
                                                    std::vector<std::string>{"data"}, cpu_devices(8)));
  EXPECT_EQ(by_mesh.batch_dim_name(), "data");
  EXPECT_EQ(by_mesh.num_model_replicas(), 8);
  EXPECT_EQ(by_mesh.num_processes(), 1);
  EXPECT_EQ(by_mesh.process_id(), 0);
  EXPECT_FALSE(by_mesh.is_multi_process());
  EXPECT_EQ(by_mesh.get_data_layout({4, 2, 2})->axes(), (Axes{"data", std::nullopt, std::nullopt}));
  EXPECT_EQ(by_mesh.get_data_layout({4, 2, 2})->device_mesh(), by_mesh.device_mesh());
  EXPECT_EQ(by_mesh.get_variable_layout({"dense/bias", {3}, nullptr})->axes(), (Axes{std::nullopt}));
  auto explicit_layout = std::make_shared<TensorLayout>(Axes{"data"}, by_mesh.device_mesh());
  EXPECT_EQ(by_mesh.get_variable_layout({"v", {8}, explicit_layout}), explicit_layout);
  EXPECT_EQ(by_mesh.get_tensor_layout("dense/output"), nullptr);
  DataParallel by_devices(cpu_devices(2));
  EXPECT_EQ(by_devices.device_mesh()->axis_names(), (std::vector<std::string>{"batch"}));
  DataParallel all_devices;
  EXPECT_EQ(all_devices.device_mesh()->devices(), list_devices());
  EXPECT_EQ(by_mesh.to_string(), "<DataParallel device_mesh=<DeviceMesh shape=(8,), axis_names=['data']>>");
}

TEST(ModelParallel, TakesLayoutsFromTheMapAndValidates) {
  auto mesh = std::make_shared<DeviceMesh>(std::vector<std::int64_t>{2, 4},
                                           std::vector<std::string>{"data", "model"}, cpu_devices(8));
  auto map = std::make_shared<LayoutMap>(mesh);
  (*map)[".*kernel"] = TensorLayout({std::nullopt, "model"});
  (*map)[".*bias"] = TensorLayout({"model"});
  (*map)["/model/layer/tensor"] = TensorLayout({"data", std::nullopt});
  ModelParallel parallel(map, "data");
  EXPECT_EQ(parallel.get_variable_layout({"dense/kernel", {8, 8}, nullptr})->axes(),
            (Axes{std::nullopt, "model"}));
  EXPECT_EQ(parallel.get_variable_layout({"dense/bias", {8}, nullptr})->axes(), (Axes{"model"}));
  EXPECT_EQ(parallel.get_variable_layout({"seed", {2}, nullptr})->axes(), (Axes{std::nullopt}));
  EXPECT_EQ(parallel.get_data_layout({16, 3, 3})->axes(), (Axes{"data", std::nullopt, std::nullopt}));
  EXPECT_EQ(parallel.get_tensor_layout("/model/layer/tensor")->axes(), (Axes{"data", std::nullopt}));
  EXPECT_EQ(parallel.get_tensor_layout("/model/layer/other_tensor"), nullptr);
  EXPECT_EQ(parallel.num_model_replicas(), 2);
  ModelParallel default_batch(map);
  EXPECT_EQ(default_batch.batch_dim_name(), "data");
  expect_throw_with<ValueError>([&] { ModelParallel(map, "rows"); }, "'rows' is not an axis");
  expect_throw_with<ValueError>([] { ModelParallel(std::shared_ptr<LayoutMap>()); }, "layout_map");
  expect_throw_with<ValueError>([] { ModelParallel without_mesh{LayoutMap{}}; }, "no device mesh");
}

TEST(Runtime, JobAddressesDevicesAndDistributeTensor) {
  EXPECT_EQ(parse_job_addresses("10.0.0.1:1234,10.0.0.2:2345", 2),
            (std::vector<std::string>{"10.0.0.1:1234", "10.0.0.2:2345"}));
  expect_throw_with<ValueError>([] { parse_job_addresses("a:1,b:2", 3); }, "lists 2 processes, but num_processes is 3");
  // The coordinator's address alone is a valid job of any size (Keras counts only comma lists).
  EXPECT_EQ(parse_job_addresses("127.0.0.1:1234", 2), (std::vector<std::string>{"127.0.0.1:1234"}));
  expect_throw_with<ValueError>([] { parse_job_addresses("a:1,b", std::nullopt); }, "host:port");
  expect_throw_with<ValueError>([] { parse_job_addresses("a:99999", std::nullopt); }, "host:port");
  EXPECT_EQ(list_devices("CPU"), (std::vector<std::string>{"cpu:0"}));
  EXPECT_EQ(get_device_count("cpu"), 1);
  expect_throw_with<ValueError>([] { list_devices("tpu"); }, "unknown device type 'tpu'");
  EXPECT_EQ(num_processes(), 1);
  EXPECT_EQ(process_id(), 0);
  Tensor full = Tensor::arange(8, float32);
  auto mesh = std::make_shared<DeviceMesh>(std::vector<std::int64_t>{1}, std::vector<std::string>{"batch"});
  auto layout = std::make_shared<TensorLayout>(Axes{"batch"}, mesh);
  EXPECT_EQ(distribute_tensor(full, layout).to_vector<float>(), full.to_vector<float>());
  EXPECT_TRUE(distribute_tensor(full, nullptr).same_as(full));
  // Found against Keras: a replicated layout skipped every check.
  expect_throw_with<ValueError>(
      [&] { distribute_tensor(full, std::make_shared<TensorLayout>(Axes{std::nullopt})); },
      "has no device mesh");
  expect_throw_with<ValueError>(
      [&] { distribute_tensor(full, std::make_shared<TensorLayout>(Axes{std::nullopt, std::nullopt}, mesh)); },
      "has 2 axes but the tensor has shape (8,)");
  EXPECT_EQ(list_devices(""), list_devices());  // Keras: "" means the default type
  DeviceMesh elsewhere({1}, {"batch"}, std::vector<std::string>{"cpu:7"});
  expect_throw_with<ValueError>([&] { process_coordinates(elsewhere); },
                                "does not hold this process's device");
}

// The environment-variable and mpirun cases run in their own processes (initialize_* in CTest).
TEST(Runtime, InitializeRefusesAfterADistribution) {
  if (is_initialized()) GTEST_SKIP() << "initialize() already ran in this process";
  // Distributions were created by the tests above (or are created here), so initialize refuses.
  DataParallel created;
  expect_throw_with<ValueError>([] { initialize(); }, "before any Distribution");
}

TEST(Communicator, LocalGroupIsANoOp) {
  LocalCommunicator local;
  Tensor values = Tensor::from_vector<float>({1, 2, 3}, {3});
  local.all_reduce(values, ReduceOperation::mean);
  EXPECT_EQ(values.to_vector<float>(), (std::vector<float>{1, 2, 3}));
  EXPECT_EQ(local.all_gather(values).shape(), (Shape{1, 3}));
  EXPECT_EQ(local.reduce_scatter(values).to_vector<float>(), (std::vector<float>{1, 2, 3}));
  expect_throw_with<ValueError>([&] { local.broadcast(values, 1); }, "root 1");
}

// Slurm's compressed node lists: the first host, its zero padding kept.
TEST(LauncherVariables, FirstSlurmNodeOfACompressedList) {
  EXPECT_EQ(first_slurm_node("node[03-10,12],gpu7"), "node03");
  EXPECT_EQ(first_slurm_node("gpu7,gpu8"), "gpu7");
  EXPECT_EQ(first_slurm_node("solo"), "solo");
  EXPECT_EQ(first_slurm_node("rack[1-2]-node[003-010]"), "rack1-node003");
  EXPECT_EQ(first_slurm_node("n[7]"), "n7");
  expect_throw_with<ValueError>([] { first_slurm_node(""); }, "its first entry is empty");
  expect_throw_with<ValueError>([] { first_slurm_node("node[03-10"); }, "a '[' without its ']'");
  expect_throw_with<ValueError>([] { first_slurm_node("node]3"); }, "a ']' without its '['");
  expect_throw_with<ValueError>([] { first_slurm_node("node[a-c]"); }, "does not start with a node number");
  EXPECT_EQ(slurm_coordinator_port(0), 61440);
  EXPECT_EQ(slurm_coordinator_port(4096 + 95), 61535);
}

// Sets environment variables for one test and restores them after.
class ScopedVariables {
 public:
  ScopedVariables(std::initializer_list<std::pair<std::string, std::string>> values) {
    for (const char* name : {"MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "RANK", "SLURM_STEP_NODELIST",
                             "SLURM_NTASKS", "SLURM_PROCID", "SLURM_JOB_ID"}) {
      const char* old = std::getenv(name);
      saved_.emplace_back(name, old ? std::optional<std::string>(old) : std::nullopt);
      unsetenv(name);
    }
    for (const auto& [name, value] : values) setenv(name.c_str(), value.c_str(), 1);
  }
  ScopedVariables(const ScopedVariables&) = delete;
  ScopedVariables& operator=(const ScopedVariables&) = delete;
  ~ScopedVariables() {
    for (const auto& [name, value] : saved_) {
      if (value) {
        setenv(name.c_str(), value->c_str(), 1);
      } else {
        unsetenv(name.c_str());
      }
    }
  }

 private:
  std::vector<std::pair<std::string, std::optional<std::string>>> saved_;
};

// torchrun's variables, then Slurm's; set in part, an error naming what is missing.
TEST(LauncherVariables, JobFromTorchrunThenSlurm) {
  {
    ScopedVariables none{};
    EXPECT_FALSE(job_from_launcher_variables());
  }
  {
    ScopedVariables torchrun({{"MASTER_ADDR", "10.0.0.1"}, {"MASTER_PORT", "29500"}, {"WORLD_SIZE", "4"}, {"RANK", "3"}});
    std::optional<LauncherJob> job = job_from_launcher_variables();
    ASSERT_TRUE(job);
    EXPECT_EQ(job->coordinator, "10.0.0.1:29500");
    EXPECT_EQ(job->num_processes, 4);
    EXPECT_EQ(job->process_id, 3);
  }
  {
    ScopedVariables slurm({{"SLURM_STEP_NODELIST", "gpu[12-13]"}, {"SLURM_NTASKS", "2"}, {"SLURM_PROCID", "1"},
                           {"SLURM_JOB_ID", "4097"}});
    std::optional<LauncherJob> job = job_from_launcher_variables();
    ASSERT_TRUE(job);
    EXPECT_EQ(job->launcher, "Slurm");
    EXPECT_EQ(job->coordinator, "gpu12:61441");
    EXPECT_EQ(job->process_id, 1);
  }
  {
    ScopedVariables one_task({{"SLURM_STEP_NODELIST", "gpu12"}, {"SLURM_NTASKS", "1"}, {"SLURM_PROCID", "0"},
                              {"SLURM_JOB_ID", "5"}});
    EXPECT_FALSE(job_from_launcher_variables()) << "a step of one task is one process";
  }
  {
    ScopedVariables rank_alone({{"RANK", "1"}});
    EXPECT_FALSE(job_from_launcher_variables()) << "RANK alone is too common a name to mean a job";
  }
  {
    ScopedVariables in_part({{"MASTER_ADDR", "10.0.0.1"}, {"WORLD_SIZE", "2"}});
    expect_throw_with<ValueError>([] { job_from_launcher_variables(); }, "MASTER_PORT, RANK missing");
  }
  {
    ScopedVariables bad_rank({{"MASTER_ADDR", "h"}, {"MASTER_PORT", "1"}, {"WORLD_SIZE", "2"}, {"RANK", "2"}});
    expect_throw_with<ValueError>([] { job_from_launcher_variables(); }, "RANK");
  }
  {
    ScopedVariables bad_port({{"MASTER_ADDR", "h"}, {"MASTER_PORT", "70000"}, {"WORLD_SIZE", "2"}, {"RANK", "0"}});
    expect_throw_with<ValueError>([] { job_from_launcher_variables(); }, "MASTER_PORT");
  }
  {
    ScopedVariables ipv6({{"MASTER_ADDR", "fd00::1"}, {"MASTER_PORT", "29500"}, {"WORLD_SIZE", "2"}, {"RANK", "0"}});
    EXPECT_EQ(job_from_launcher_variables()->coordinator, "[fd00::1]:29500");
  }
}

}  // namespace
}  // namespace keras::distribution
