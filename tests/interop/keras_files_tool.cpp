// The keras-cpp half of check_keras_files.py: trains each model of tests/keras_file_models.h
// for two steps of Adam here and writes, into the directory given, NAME.weights.h5
// (save_weights), NAME.keras (save) and NAME.io.h5 with its inputs (x0, x1, ...), targets, our
// predictions (y) and our predictions after one more step of Adam (y_after_step), for Python
// Keras to load, predict and take that step from; the MLP under LossScaleOptimizer as
// mlp_loss_scaled.*; Dense layers with 16-bit variables as dense_{bfloat16,float16}.*.
#include <cstdio>
#include <exception>

#include "io/hdf5_file.h"
#include "tests/keras_file_models.h"

namespace {

using namespace keras;

Tensor normal(const Shape& shape, std::uint64_t seed) {
  return ops::random({RandomDistribution::normal, 0.0, 1.0, seed}, shape, float32);
}

std::vector<Tensor> inputs_of(const std::string& name) {
  if (name == "mlp") return {normal({4, 8}, 1)};
  if (name == "convnet") return {ops::random({RandomDistribution::uniform, 0.0, 255.0, 2}, {4, 28, 28, 1}, float32)};
  if (name == "two_inputs") return {normal({4, 8}, 3), normal({4, 4}, 4)};
  if (name == "branches") return {normal({4, 6}, 6)};
  return {normal({4, 5, 8}, 5)};
}

// `loss_scaled`: the MLP under Keras' LossScaleOptimizer(Adam(0.01), initial_scale=1024,
// dynamic_growth_steps=3), trained 4 steps (so the scale has doubled once and one finite step
// counts toward the next), written as NAME_loss_scaled.*.
void write(const std::string& directory, const std::string& name, bool loss_scaled = false) {
  set_random_seed(77);
  std::shared_ptr<Model> model = testing::make_keras_file_model(name);
  std::shared_ptr<optimizers::Optimizer> optimizer;
  if (loss_scaled) {
    optimizer = std::make_shared<optimizers::LossScaleOptimizer<optimizers::Adam>>(optimizers::Adam(0.01), 1024.0, 3);
  } else {
    optimizer = std::make_shared<optimizers::Adam>(0.01);
  }
  model->compile(optimizer, "mse");
  std::vector<Tensor> x = inputs_of(name);
  Tensor first = x.size() == 1 ? (*model)(x[0]) : (*model)(x)[0];
  Tensor targets = normal(first.shape(), 9);
  FitOptions options;
  options.batch_size = 2;
  options.epochs = loss_scaled ? 2 : 1;
  options.shuffle = false;
  options.verbose = 0;
  model->fit(x, {targets}, options);
  Tensor predictions = x.size() == 1 ? (*model)(x[0]) : (*model)(x)[0];
  const std::string stem = directory + "/" + name + (loss_scaled ? "_loss_scaled" : "");
  model->save_weights(stem + ".weights.h5");
  model->save(stem + ".keras");
  options.epochs = 1;
  // One more step (the whole batch), which Keras takes from the loaded file too: equal
  // predictions after it need Adam's state in Keras' order.
  options.batch_size = 4;
  model->fit(x, {targets}, options);
  Tensor after_step = x.size() == 1 ? (*model)(x[0]) : (*model)(x)[0];
  io::hdf5::File file = io::hdf5::File::create(stem + ".io.h5");
  {
    io::hdf5::Group root = file.root();
    for (std::size_t i = 0; i < x.size(); ++i) root.write_dataset(str("x", i), x[i]);
    root.write_dataset("targets", targets);
    root.write_dataset("y", predictions);
    root.write_dataset("y_after_step", after_step);
  }
  file.close();
}

// dense_<policy>.weights.h5: Dense(3) on 4 features under a pure 16-bit policy ("bfloat16"
// or "float16": its variables are 16-bit), and dense_<policy>.io.h5 with its kernel and bias
// as float32 (exact), for Keras to load the file and compare.
void write_half_policy(const std::string& directory, const std::string& policy) {
  set_random_seed(78);
  mixed_precision::set_global_policy(policy);
  Sequential model({layers::Dense(3, "", {.bias_initializer = initializers::get("random_normal")})});
  model(Tensor::ones({1, 4}));
  mixed_precision::set_global_policy("float32");
  model.save_weights(directory + "/dense_" + policy + ".weights.h5");
  io::hdf5::File file = io::hdf5::File::create(directory + "/dense_" + policy + ".io.h5");
  {
    io::hdf5::Group root = file.root();
    root.write_dataset("kernel", ops::cast(model.trainable_weights()[0], float32));
    root.write_dataset("bias", ops::cast(model.trainable_weights()[1], float32));
  }
  file.close();
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: keras_files_tool DIRECTORY\n");
    return 2;
  }
  try {
    for (const std::string& name : keras::testing::kKerasFileModels) write(argv[1], name);
    write(argv[1], "mlp", /*loss_scaled=*/true);
    write_half_policy(argv[1], "bfloat16");
    write_half_policy(argv[1], "float16");
  } catch (const std::exception& error) {
    std::fprintf(stderr, "keras_files_tool: %s\n", error.what());
    return 1;
  }
  return 0;
}
