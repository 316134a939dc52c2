// Keras' weight files (.weights.h5) and the layout safetensors weight files share with them:
// the groups Keras 3.15 writes, round trips with the optimizer's state, a second instance of a
// model reading the first one's file, and files that are damaged, lie or belong to another
// model (typed errors, the model left as it was). Files written by Python Keras are checked
// in tests/interop.
#include <hdf5.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <vector>

#include "io/hdf5_file.h"
#include "keras.h"
#include "layers/layer_config.h"
#include "tests/test_helpers.h"

namespace keras {
namespace {

using testing::expect_throw_with;

class KerasWeightsFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    clear_session();
    set_random_seed(3);
    directory_ = std::filesystem::temp_directory_path() /
                 ("keras_weights_file_test_" + std::to_string(::getpid()));
    std::filesystem::create_directories(directory_);
  }
  void TearDown() override { std::filesystem::remove_all(directory_); }
  std::string file(const std::string& name) const { return (directory_ / name).string(); }
  std::filesystem::path directory_;
};

Sequential small_mlp() {
  return Sequential({layers::Dense(6, "relu"), layers::BatchNormalization(), layers::Dense(3)});
}

std::vector<double> values_of(const Tensor& tensor) { return tensor.to_vector<double>(); }

TEST_F(KerasWeightsFileTest, SnakeCaseFollowsKeras) {
  EXPECT_EQ(to_snake_case("GlobalAveragePooling2D"), "global_average_pooling2d");
  EXPECT_EQ(to_snake_case("ReLU"), "re_lu");
  EXPECT_EQ(to_snake_case("Conv2D"), "conv2d");
  EXPECT_EQ(to_snake_case("MultiHeadAttention"), "multi_head_attention");
  EXPECT_EQ(to_snake_case("InputLayer"), "input_layer");
  EXPECT_EQ(to_snake_case("EinsumDense"), "einsum_dense");
  EXPECT_EQ(to_snake_case("RMSNormalization"), "rms_normalization");
}

TEST_F(KerasWeightsFileTest, GroupsAreKerasLayout) {
  // A functional model with two inputs, a repeated class and MultiHeadAttention's sublayers.
  KerasTensor a = Input({5, 8}, "a");
  KerasTensor b = Input({5, 2}, "b");
  KerasTensor attended = layers::MultiHeadAttention(2, 4)(a);
  KerasTensor hidden = layers::Dense(2)(layers::LayerNormalization()(attended));
  Model model({a, b}, layers::Add()({hidden, b}));
  model.compile(optimizers::Adam(), "mse");
  model.save_weights(file("model.weights.h5"));

  io::hdf5::File saved = io::hdf5::File::open(file("model.weights.h5"));
  io::hdf5::Group root = saved.root();
  EXPECT_EQ(root.member_names(), (std::vector<std::string>{"layers", "optimizer", "vars"}));
  io::hdf5::Group layers_group = root.group("layers");
  EXPECT_EQ(layers_group.member_names(),
            (std::vector<std::string>{"add", "dense", "input_layer", "input_layer_1",
                                      "layer_normalization", "multi_head_attention"}));
  io::hdf5::Group attention = layers_group.group("multi_head_attention");
  EXPECT_EQ(attention.member_names(),
            (std::vector<std::string>{"_dropout_layer", "_softmax", "key_dense", "output_dense",
                                      "query_dense", "value_dense", "vars"}));
  EXPECT_EQ(attention.group("query_dense").group("vars").dataset_info("0").shape, (Shape{8, 2, 4}));
  EXPECT_EQ(attention.group("output_dense").group("vars").dataset_info("0").shape, (Shape{2, 4, 8}));
  EXPECT_EQ(layers_group.group("input_layer").group("vars").string_attribute("name"), "a");
  EXPECT_EQ(layers_group.group("dense").group("vars").dataset_info("0").shape, (Shape{8, 2}));
  EXPECT_TRUE(layers_group.group("add").group("vars").member_names().empty());
  EXPECT_EQ(root.group("vars").string_attribute("name"), model.name());
  // An optimizer before its first step: iterations and learning_rate, as Keras writes it.
  io::hdf5::Group optimizer_vars = root.group("optimizer").group("vars");
  EXPECT_EQ(optimizer_vars.member_names(), (std::vector<std::string>{"0", "1"}));
  EXPECT_EQ(optimizer_vars.string_attribute("name"), "adam");
}

TEST_F(KerasWeightsFileTest, BatchNormalizationKeepsKerasOrder) {
  Sequential model = small_mlp();
  model(testing::random_tensor({4, 5}, 1, float32));
  model.save_weights(file("bn.weights.h5"));
  io::hdf5::File saved = io::hdf5::File::open(file("bn.weights.h5"));
  io::hdf5::Group vars = saved.root().group("layers").group("batch_normalization").group("vars");
  // gamma, beta (trainable), then moving_mean, moving_variance: gamma and moving_variance start
  // at one, beta and moving_mean at zero.
  EXPECT_EQ(vars.read_dataset("0", float32).to_vector<double>(), std::vector<double>(6, 1.0));
  EXPECT_EQ(vars.read_dataset("1", float32).to_vector<double>(), std::vector<double>(6, 0.0));
  EXPECT_EQ(vars.read_dataset("2", float32).to_vector<double>(), std::vector<double>(6, 0.0));
  EXPECT_EQ(vars.read_dataset("3", float32).to_vector<double>(), std::vector<double>(6, 1.0));
}

TEST_F(KerasWeightsFileTest, RoundTripWithOptimizerIntoASecondInstance) {
  testing::Blobs data = testing::make_blobs(64, 5);
  Sequential model = small_mlp();
  model.compile(optimizers::Adam(0.01), losses::SparseCategoricalCrossentropy(true));
  model.fit(data.x, data.y, {.batch_size = 16, .epochs = 2, .verbose = 0});
  Tensor before = model(data.x);
  for (const char* name : {"trained.weights.h5", "trained.safetensors"}) {
    model.save_weights(file(name));
    // No clear_session(): this instance's layers are dense_2, batch_normalization_1, ...
    Sequential copy = small_mlp();
    copy.compile(optimizers::Adam(0.01), losses::SparseCategoricalCrossentropy(true));
    copy(data.x);
    EXPECT_NE(values_of(copy(data.x)), values_of(before)) << name;
    copy.load_weights(file(name));
    EXPECT_EQ(values_of(copy(data.x)), values_of(before)) << name;
    if (std::string(name).ends_with(".h5")) {
      // The optimizer's state came with it: the next step of both is the same.
      EXPECT_EQ(copy.optimizer().iterations(), model.optimizer().iterations());
      Sequential& original = model;
      std::vector<Tensor> trained = original.trainable_weights();
      std::vector<Tensor> loaded = copy.trainable_weights();
      ASSERT_EQ(trained.size(), loaded.size());
      for (std::size_t i = 0; i < trained.size(); ++i) {
        std::vector<Tensor> expected = model.optimizer().slots_of(trained[i]);
        std::vector<Tensor> got = copy.optimizer().slots_of(loaded[i]);
        ASSERT_EQ(expected.size(), got.size());
        for (std::size_t s = 0; s < expected.size(); ++s) EXPECT_EQ(values_of(got[s]), values_of(expected[s]));
      }
    }
  }
}

TEST_F(KerasWeightsFileTest, FrozenLayersHaveNoOptimizerState) {
  // As Keras: a frozen layer's variables are not the optimizer's, so a fine-tuning model's file
  // holds state for the layers that train only (and Keras reads it back).
  testing::Blobs data = testing::make_blobs(32, 5);
  Sequential model = small_mlp();
  model(data.x);
  model.layers()[0]->set_trainable(false);
  model.compile(optimizers::Adam(), losses::SparseCategoricalCrossentropy(true));
  model.fit(data.x, data.y, {.batch_size = 32, .epochs = 1, .verbose = 0});
  model.save_weights(file("frozen.weights.h5"));
  io::hdf5::File saved = io::hdf5::File::open(file("frozen.weights.h5"));
  // iterations, learning_rate, then two moments for each of gamma, beta, kernel and bias.
  EXPECT_EQ(saved.root().group("optimizer").group("vars").member_names().size(), 2u + 2u * 4u);
}

TEST_F(KerasWeightsFileTest, ResumedTrainingMatchesUninterrupted) {
  testing::Blobs data = testing::make_blobs(64, 7);
  auto make = [] {
    Sequential model = small_mlp();
    model.compile(optimizers::RMSprop(0.01, 0.9, 0.5, 1e-7, true), losses::SparseCategoricalCrossentropy(true));
    return model;
  };
  set_random_seed(11);
  Sequential straight = make();
  straight.fit(data.x, data.y, {.batch_size = 64, .epochs = 4, .shuffle = false, .verbose = 0});
  set_random_seed(11);
  Sequential first = make();
  first.fit(data.x, data.y, {.batch_size = 64, .epochs = 2, .shuffle = false, .verbose = 0});
  first.save_weights(file("half.weights.h5"));
  Sequential second = make();
  second(data.x);
  second.load_weights(file("half.weights.h5"));
  second.fit(data.x, data.y, {.batch_size = 64, .epochs = 2, .shuffle = false, .verbose = 0});
  testing::expect_close(values_of(second(data.x)), values_of(straight(data.x)), 1e-12, "resumed");
}

TEST_F(KerasWeightsFileTest, AnotherModelsFileIsRefusedAndChangesNothing) {
  Tensor x = testing::random_tensor({2, 5}, 1, float32);
  Sequential model = small_mlp();
  model(x);
  model.save_weights(file("model.weights.h5"));

  Sequential wider({layers::Dense(7, "relu"), layers::BatchNormalization(), layers::Dense(3)});
  Tensor before = wider(x);
  expect_throw_with<ShapeError>([&] { wider.load_weights(file("model.weights.h5")); },
                                "'layers/dense/vars/0' in '" + file("model.weights.h5") +
                                    "' has shape (5, 6) but variable '");
  EXPECT_EQ(values_of(wider(x)), values_of(before));

  Sequential deeper({layers::Dense(6, "relu"), layers::BatchNormalization(), layers::Dense(3), layers::Dense(1)});
  deeper(x);
  expect_throw_with<ValueError>([&] { deeper.load_weights(file("model.weights.h5")); },
                                "has no group 'layers/dense_2/vars'");
  Sequential shallower({layers::Dense(6, "relu"), layers::BatchNormalization()});
  shallower(x);
  expect_throw_with<ValueError>([&] { shallower.load_weights(file("model.weights.h5")); },
                                "has weight 'layers/dense_1/vars/0', for which model");
  Sequential no_center({layers::Dense(6, "relu"),
                        layers::BatchNormalization(layers::BatchNormalizationOptions{.center = false}),
                        layers::Dense(3)});
  no_center(x);
  expect_throw_with<ValueError>([&] { no_center.load_weights(file("model.weights.h5")); },
                                "holds 4 weights, but 'layers/batch_normalization'");
  expect_throw_with<ValueError>([&] { model.save_weights(file("model.h5")); }, "'.weights.h5'");
}

TEST_F(KerasWeightsFileTest, OptimizerOfAnotherKindIsSkippedWithTheWeightsLoaded) {
  testing::Blobs data = testing::make_blobs(32, 5);
  Sequential model = small_mlp();
  model.compile(optimizers::Adam(), losses::SparseCategoricalCrossentropy(true));
  model.fit(data.x, data.y, {.batch_size = 32, .epochs = 1, .verbose = 0});
  model.save_weights(file("adam.weights.h5"));
  Sequential sgd = small_mlp();
  sgd.compile(optimizers::SGD(0.1, 0.9), losses::SparseCategoricalCrossentropy(true));
  sgd.fit(data.x, data.y, {.batch_size = 32, .epochs = 1, .verbose = 0});
  sgd.load_weights(file("adam.weights.h5"));  // warns, as Keras does
  EXPECT_EQ(values_of(sgd(data.x)), values_of(model(data.x)));
  EXPECT_EQ(sgd.optimizer().iterations(), 1);
  // Uncompiled: the optimizer's part is ignored.
  Sequential plain = small_mlp();
  plain(data.x);
  plain.load_weights(file("adam.weights.h5"));
  EXPECT_EQ(values_of(plain(data.x)), values_of(model(data.x)));
}

// Files made by hand with libhdf5, as a damaged or hostile file would be.
class HostileWeightsFile : public KerasWeightsFileTest {
 protected:
  // The small MLP's file, with `edit` applied to the open file before it is closed.
  template <typename Edit>
  std::string make(const std::string& name, Edit edit) {
    Sequential model({layers::Dense(2)});
    model(testing::random_tensor({1, 3}, 1, float32));
    std::string path = file(name);
    model.save_weights(path);
    hid_t id = H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
    EXPECT_GE(id, 0);
    edit(id);
    H5Fclose(id);
    return path;
  }
  // Replaces the dataset at `path` of an open file by an unwritten one of `type` and `dims`
  // (`most`: its largest dims, null for fixed ones; `properties`: its creation properties).
  static void replace_dataset(hid_t id, const char* path, hid_t type, std::vector<hsize_t> dims,
                              hid_t properties = H5P_DEFAULT, const hsize_t* most = nullptr) {
    H5Ldelete(id, path, H5P_DEFAULT);
    hid_t space = H5Screate_simple(static_cast<int>(dims.size()), dims.data(), most);
    hid_t dataset = H5Dcreate2(id, path, type, space, H5P_DEFAULT, properties, H5P_DEFAULT);
    H5Dclose(dataset);
    H5Sclose(space);
  }
  Sequential target() {
    Sequential model({layers::Dense(2)});
    model(testing::random_tensor({1, 3}, 1, float32));
    return model;
  }
};

TEST_F(HostileWeightsFile, DamagedFilesAreTypedErrors) {
  Sequential model = target();
  std::string good = file("good.weights.h5");
  model.save_weights(good);
  std::uintmax_t size = std::filesystem::file_size(good);
  for (std::uintmax_t keep : {std::uintmax_t{0}, std::uintmax_t{8}, size / 2, size - 16}) {
    std::string cut = file("cut_" + std::to_string(keep) + ".weights.h5");
    std::filesystem::copy_file(good, cut);
    std::filesystem::resize_file(cut, keep);
    EXPECT_THROW(model.load_weights(cut), FileFormatError) << keep << " of " << size << " bytes";
  }
  {
    std::ofstream text(file("text.weights.h5"));
    text << "this is not HDF5";
  }
  expect_throw_with<FileFormatError>([&] { model.load_weights(file("text.weights.h5")); },
                                     "is not an HDF5 file");
  expect_throw_with<FileNotFoundError>([&] { model.load_weights(file("absent.weights.h5")); },
                                       "no such file");
  // Bytes flipped in the middle (the data and the object headers of a small file).
  std::string flipped = file("flipped.weights.h5");
  std::filesystem::copy_file(good, flipped);
  {
    std::fstream bytes(flipped, std::ios::in | std::ios::out | std::ios::binary);
    for (std::uintmax_t at = 512; at < size; at += 97) {
      bytes.seekp(static_cast<std::streamoff>(at));
      bytes.put('\xff');
    }
  }
  try {
    model.load_weights(flipped);
  } catch (const Error&) {
    // Any typed error; a flipped byte in the data alone may also load, changed.
  }
}

// Opaque elements are Keras' bfloat16 only when they are 2 bytes and the dataset says
// dtype="bfloat16"; any other opaque data is refused, not read as numbers.
TEST_F(HostileWeightsFile, OpaqueDataIsReadOnlyAsKerasBfloat16) {
  Sequential model = target();
  for (std::size_t bytes : {std::size_t{2}, std::size_t{4}}) {
    std::string path = make(str("opaque_", bytes, ".weights.h5"), [bytes](hid_t id) {
      hid_t type = H5Tcreate(H5T_OPAQUE, bytes);
      replace_dataset(id, "layers/dense/vars/0", type, {3, 2});
      H5Tclose(type);
      if (bytes == 4) {  // the attribute, on elements of the wrong size
        hid_t dataset = H5Dopen2(id, "layers/dense/vars/0", H5P_DEFAULT);
        hid_t string_type = H5Tcopy(H5T_C_S1);
        H5Tset_size(string_type, 8);
        hid_t space = H5Screate(H5S_SCALAR);
        hid_t attribute = H5Acreate2(dataset, "dtype", string_type, space, H5P_DEFAULT, H5P_DEFAULT);
        H5Awrite(attribute, string_type, "bfloat16");
        H5Aclose(attribute);
        H5Sclose(space);
        H5Tclose(string_type);
        H5Dclose(dataset);
      }
    });
    expect_throw_with<FileFormatError>([&] { model.load_weights(path); }, "holds neither floats nor integers");
  }
}

// LossScaleOptimizer's dynamic_scale (optimizer/vars/3) must be a scale: a file that gives 0,
// a negative or a non-finite one is refused before anything changes.
TEST_F(HostileWeightsFile, ALossScaleThatIsNoScaleIsRefused) {
  auto loss_scaled = [] {
    auto model = std::make_shared<Sequential>(std::vector<AnyLayer>{layers::Dense(2)});
    model->compile(optimizers::LossScaleOptimizer<optimizers::SGD>(optimizers::SGD(0.1), 64.0, 5), "mse");
    (*model)(testing::random_tensor({1, 3}, 1, float32));
    return model;
  };
  std::string path = file("loss_scaled.weights.h5");
  {
    // One step first, as a trained model would be saved.
    auto trained = loss_scaled();
    trained->fit(testing::random_tensor({4, 3}, 2, float32), testing::random_tensor({4, 2}, 3, float32),
                 {.batch_size = 4, .epochs = 1, .verbose = 0});
    trained->save_weights(path);
  }
  for (float scale : {0.0f, -2.0f, INFINITY, NAN}) {
    hid_t id = H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
    ASSERT_GE(id, 0);
    hid_t dataset = H5Dopen2(id, "optimizer/vars/3", H5P_DEFAULT);
    ASSERT_GE(dataset, 0);
    EXPECT_GE(H5Dwrite(dataset, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, &scale), 0);
    H5Dclose(dataset);
    H5Fclose(id);
    auto model = loss_scaled();
    std::vector<double> before = model->trainable_weights()[0].to_vector<double>();
    expect_throw_with<FileFormatError>([&] { model->load_weights(path); }, "gives the loss scale (dynamic_scale)");
    EXPECT_EQ(model->optimizer().loss_scale(), 64.0) << scale;
    EXPECT_EQ(model->trainable_weights()[0].to_vector<double>(), before) << "nothing changes on a refused file";
  }
}

TEST_F(HostileWeightsFile, LyingShapesAndTypesAreRefusedBeforeReading) {
  Sequential model = target();
  Tensor before = model(Tensor::ones({1, 3}));
  // A kernel that claims 2^40 x 2 floats (never allocated: storage comes on write).
  std::string huge = make("huge.weights.h5", [](hid_t id) {
    replace_dataset(id, "layers/dense/vars/0", H5T_IEEE_F32LE, {hsize_t{1} << 40, 2});
  });
  expect_throw_with<ShapeError>([&] { model.load_weights(huge); }, "has shape (1099511627776, 2)");
  // Integers where the kernel's floats should be.
  std::string integers = make("integers.weights.h5", [](hid_t id) {
    replace_dataset(id, "layers/dense/vars/0", H5T_STD_I32LE, {3, 2});
  });
  expect_throw_with<DTypeError>([&] { model.load_weights(integers); }, "holds integers");
  // A string where a weight should be.
  std::string strings = make("strings.weights.h5", [](hid_t id) {
    hid_t type = H5Tcopy(H5T_C_S1);
    H5Tset_size(type, 4);
    replace_dataset(id, "layers/dense/vars/1", type, {2});
    H5Tclose(type);
  });
  expect_throw_with<FileFormatError>([&] { model.load_weights(strings); }, "neither floats nor integers");
  // A group linked into itself (a cycle) and nesting beyond any model.
  std::string cycle = make("cycle.weights.h5", [](hid_t id) {
    H5Lcreate_hard(id, "layers", id, "layers/dense/loop", H5P_DEFAULT, H5P_DEFAULT);
  });
  expect_throw_with<FileFormatError>([&] { model.load_weights(cycle); }, "to an object it already holds");
  // Two links back into itself: a walk without memory would take 2^64 steps.
  std::string doubled = make("doubled.weights.h5", [](hid_t id) {
    H5Lcreate_hard(id, "layers", id, "layers/dense/a", H5P_DEFAULT, H5P_DEFAULT);
    H5Lcreate_hard(id, "layers", id, "layers/dense/b", H5P_DEFAULT, H5P_DEFAULT);
  });
  expect_throw_with<FileFormatError>([&] { model.load_weights(doubled); }, "to an object it already holds");
  // A soft link, and an external one to another file.
  std::string soft = make("soft.weights.h5", [](hid_t id) {
    H5Ldelete(id, "layers/dense/vars/1", H5P_DEFAULT);
    H5Lcreate_soft("/layers/dense/vars/0", id, "layers/dense/vars/1", H5P_DEFAULT, H5P_DEFAULT);
  });
  expect_throw_with<FileFormatError>([&] { model.load_weights(soft); }, "is a soft or external link");
  std::string external = make("external.weights.h5", [](hid_t id) {
    H5Ldelete(id, "layers/dense/vars/1", H5P_DEFAULT);
    H5Lcreate_external("/etc/passwd", "/x", id, "layers/dense/vars/1", H5P_DEFAULT, H5P_DEFAULT);
  });
  expect_throw_with<FileFormatError>([&] { model.load_weights(external); }, "is a soft or external link");
  // Data kept in another file (external storage), and chunks far larger than the dataset.
  std::string outside = make("outside.weights.h5", [&](hid_t id) {
    hid_t properties = H5Pcreate(H5P_DATASET_CREATE);
    H5Pset_external(properties, "/etc/hostname", 0, 8);
    replace_dataset(id, "layers/dense/vars/1", H5T_IEEE_F32LE, {2}, properties);
    H5Pclose(properties);
  });
  expect_throw_with<FileFormatError>([&] { model.load_weights(outside); }, "keeps its data outside the file");
  std::string chunky = make("chunky.weights.h5", [&](hid_t id) {
    hid_t properties = H5Pcreate(H5P_DATASET_CREATE);
    hsize_t chunk[1] = {1u << 26};
    H5Pset_chunk(properties, 1, chunk);
    hsize_t most[1] = {H5S_UNLIMITED};
    replace_dataset(id, "layers/dense/vars/1", H5T_IEEE_F32LE, {2}, properties, most);
    H5Pclose(properties);
  });
  expect_throw_with<FileFormatError>([&] { model.load_weights(chunky); }, "is stored in chunks of");
  EXPECT_EQ(values_of(model(Tensor::ones({1, 3}))), values_of(before));
}

}  // namespace
}  // namespace keras
