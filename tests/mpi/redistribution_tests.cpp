// Redistribution rules as autograd ops, under mpirun with 2 and 4 processes.
// One table of (mesh, from, to) cases; each is checked three ways:
//   1. forward: this process's output is exactly its block of the global tensor under `to`;
//   2. gradient: backward of the replicated objective L = sum(W * tanh(Y)) gives this process
//      the block of dL/dX that its input placement calls for (the full gradient for Replicate
//      and Partial axes, its block for Shard axes);
//   3. finite differences: every element of dL/dX, computed by perturbing the global X and
//      running the whole distributed forward again, equals that gradient.
// Plus the Megatron column->row MLP built from these ops against the one-process computation.
#include <gtest/gtest.h>

#include <cmath>

#include "distribution/sharding/redistribute.h"
#include "keras.h"
#include "tests/test_helpers.h"

namespace keras {
namespace {

namespace kd = keras::distribution;
using kd::Placement;
using kd::Sharding;

struct RedistributionCase {
  std::string name;
  std::vector<std::int64_t> mesh_shape;
  std::vector<std::string> axis_names;
  std::vector<Placement> from, to;
};

std::vector<RedistributionCase> cases_for(int processes) {
  const Placement R = Placement::replicate(), P = Placement::partial();
  auto S = [](int dim) { return Placement::shard(dim); };
  std::vector<RedistributionCase> cases;
  if (processes == 2 || processes == 4) {
    std::vector<std::int64_t> line = {processes};
    std::vector<std::string> model = {"model"};
    cases.push_back({"partial_to_replicate_all_reduce", line, model, {P}, {R}});
    cases.push_back({"partial_to_shard0_reduce_scatter", line, model, {P}, {S(0)}});
    cases.push_back({"partial_to_shard1_reduce_scatter", line, model, {P}, {S(1)}});
    cases.push_back({"shard0_to_replicate_all_gather", line, model, {S(0)}, {R}});
    cases.push_back({"shard1_to_replicate_all_gather", line, model, {S(1)}, {R}});
    cases.push_back({"replicate_to_shard1_local_chunk", line, model, {R}, {S(1)}});
    cases.push_back({"shard0_to_shard1_all_to_all", line, model, {S(0)}, {S(1)}});
    cases.push_back({"shard1_to_shard1_nothing", line, model, {S(1)}, {S(1)}});
  }
  if (processes == 4) {
    std::vector<std::int64_t> grid = {2, 2};
    std::vector<std::string> axes = {"batch", "model"};
    cases.push_back({"grid_partial_model_to_shard", grid, axes, {S(0), P}, {S(0), S(1)}});
    cases.push_back({"grid_partial_both_to_replicate", grid, axes, {P, P}, {R, R}});
    cases.push_back({"grid_shards_swap", grid, axes, {S(0), S(1)}, {S(1), S(0)}});
    cases.push_back({"grid_replicate_to_both_shards", grid, axes, {R, R}, {S(1), S(0)}});
    cases.push_back({"grid_shard_and_partial_to_replicate", grid, axes, {S(1), P}, {R, R}});
    cases.push_back({"grid_partial_onto_a_sharded_dim", grid, axes, {S(0), P}, {R, S(0)}});
  }
  return cases;
}

const Shape kGlobalShape = {4, 8};

// This process's input for `from`: its block, scaled on Partial axes so that the summands over
// each such axis add up to X (the weight of coordinate c of n is (c + 1) / (n (n + 1) / 2)).
Tensor local_input(const Tensor& global, const Sharding& from, const std::vector<std::int64_t>& coordinates) {
  auto [starts, sizes] = from.block(coordinates);
  Tensor block = ops::slice(global, starts, sizes);
  double weight = 1.0;
  for (std::size_t axis = 0; axis < coordinates.size(); ++axis) {
    if (!from.placements()[axis].is_partial()) continue;
    double n = static_cast<double>(from.mesh()->shape()[axis]);
    weight *= (static_cast<double>(coordinates[axis]) + 1.0) / (n * (n + 1.0) / 2.0);
  }
  return block * weight;
}

// The replicated objective sum(W * tanh(Y)) from this process's block of Y under `to`.
Tensor objective(const Tensor& local_output, const Tensor& weights, const Sharding& to,
                 const std::vector<std::int64_t>& coordinates) {
  auto [starts, sizes] = to.block(coordinates);
  Tensor value = ops::sum(ops::slice(weights, starts, sizes) * ops::tanh(local_output));
  const kd::DeviceMesh& mesh = *to.mesh();
  for (std::size_t axis = 0; axis < coordinates.size(); ++axis) {
    if (to.placements()[axis].is_shard()) {
      value = kd::all_reduce_sum(value, kd::mesh_axis_group(mesh, mesh.axis_names()[axis]));
    }
  }
  return value;
}

void PrintTo(const RedistributionCase& c, std::ostream* stream) { *stream << c.name; }

class Redistribution : public ::testing::TestWithParam<RedistributionCase> {};

TEST_P(Redistribution, ForwardGradientAndFiniteDifferences) {
  const RedistributionCase& c = GetParam();
  auto mesh = std::make_shared<kd::DeviceMesh>(c.mesh_shape, c.axis_names);
  Sharding from(mesh, c.from, kGlobalShape), to(mesh, c.to, kGlobalShape);
  std::vector<std::int64_t> coordinates = mesh->coordinates(kd::process_id());
  Tensor global = testing::random_tensor(kGlobalShape, 11, float64, -1.5, 1.5);
  Tensor weights = testing::random_tensor(kGlobalShape, 12, float64);

  // 1. Forward.
  Tensor input = local_input(global, from, coordinates).clone().set_requires_grad(true);
  Tensor output = kd::redistribute(input, from, to);
  auto [starts, sizes] = to.block(coordinates);
  testing::expect_close(output.to_vector<double>(), ops::slice(global, starts, sizes).to_vector<double>(),
                        1e-12, c.name + " forward");

  // 2. Gradient against the closed form dL/dX = W * (1 - tanh(X)^2).
  objective(output, weights, to, coordinates).backward();
  Tensor full_gradient = weights * (1.0 - ops::square(ops::tanh(global)));
  auto [input_starts, input_sizes] = from.block(coordinates);
  Tensor expected = ops::slice(full_gradient, input_starts, input_sizes);
  ASSERT_TRUE(input.grad().defined()) << c.name;
  testing::expect_close(input.grad().to_vector<double>(), expected.to_vector<double>(), 1e-12,
                        c.name + " gradient");

  // 3. Finite differences of the whole distributed computation, element by element of X.
  NoGradGuard no_grad;
  std::vector<double> base = global.to_vector<double>();
  std::vector<double> numeric(base.size());
  const double step = 1e-6;
  for (std::size_t k = 0; k < base.size(); ++k) {
    double values[2];
    for (int side = 0; side < 2; ++side) {
      std::vector<double> shifted = base;
      shifted[k] += side == 0 ? step : -step;
      Tensor x = local_input(Tensor::from_vector(shifted, kGlobalShape), from, coordinates);
      values[side] = objective(kd::redistribute(x, from, to), weights, to, coordinates).item();
    }
    numeric[k] = (values[0] - values[1]) / (2 * step);
  }
  testing::expect_close(numeric, full_gradient.to_vector<double>(), 1e-7, c.name + " finite differences");
}

// Registered (before main runs) for the process count this binary runs with: mpirun's, or the
// one a job started by hand is given (scripts/launch_local.sh).
std::vector<RedistributionCase> registered_cases() {
  int processes = 2;
  if (const char* size = std::getenv("OMPI_COMM_WORLD_SIZE")) {
    processes = std::atoi(size);
  } else if (const char* given = std::getenv("KERAS_DISTRIBUTION_NUM_PROCESSES")) {
    processes = std::atoi(given);
  }
  return cases_for(processes);
}

INSTANTIATE_TEST_SUITE_P(Table, Redistribution, ::testing::ValuesIn(registered_cases()),
                         [](const ::testing::TestParamInfo<RedistributionCase>& parameter) { return parameter.param.name; });

TEST(Redistribution, PlannerRefusesWhatItCannotDo) {
  auto mesh = std::make_shared<kd::DeviceMesh>(std::vector<std::int64_t>{kd::num_processes()},
                                               std::vector<std::string>{"model"});
  Sharding shard(mesh, {Placement::shard(1)}, kGlobalShape);
  Sharding partial(mesh, {Placement::partial()}, kGlobalShape);
  testing::expect_throw_with<ValueError>(
      [&] { kd::redistribute(Tensor::zeros({4, 8 / kd::num_processes()}, float64), shard, partial); },
      "Partial is a matmul's output, never a target");
  testing::expect_throw_with<ShapeError>(
      [&] { kd::redistribute(Tensor::zeros({4, 8}, float64), shard, Sharding::replicated(mesh, kGlobalShape)); },
      "gives each process a block of shape");
  testing::expect_throw_with<ValueError>([&] { Sharding(mesh, {Placement::shard(1)}, {4, 7}); },
                                         "cannot be split evenly over mesh axis 'model'");
  testing::expect_throw_with<ValueError>([&] { Sharding(mesh, {Placement::shard(2)}, kGlobalShape); },
                                         "expected a dimension in [0, 2)");
  kd::TensorLayout layout({std::nullopt, "model"}, mesh);
  EXPECT_EQ(Sharding::from_layout(layout, kGlobalShape, "kernel").placements(),
            (std::vector<Placement>{Placement::shard(1)}));
}

// Megatron's MLP: x replicated, A column-sharded, B row-sharded; one all-reduce forward (g)
// and one backward (f). Output and every gradient equal the one-process computation.
TEST(Redistribution, ColumnThenRowParallelMlpMatchesOneProcess) {
  const int n = kd::num_processes();
  auto mesh = std::make_shared<kd::DeviceMesh>(std::vector<std::int64_t>{n}, std::vector<std::string>{"model"});
  auto group = kd::mesh_axis_group(*mesh, "model");
  const int rank = group->rank();
  Tensor x_full = testing::random_tensor({3, 4}, 21, float64);
  Tensor a_full = testing::random_tensor({4, 8}, 22, float64);
  Tensor b_full = testing::random_tensor({8, 5}, 23, float64);
  Tensor w = testing::random_tensor({3, 5}, 24, float64);
  const std::int64_t width = 8 / n;

  Tensor x = x_full.clone().set_requires_grad(true);
  Tensor a = ops::slice(a_full, {0, rank * width}, {4, width}).clone().set_requires_grad(true);
  Tensor b = ops::slice(b_full, {rank * width, 0}, {width, 5}).clone().set_requires_grad(true);
  Tensor hidden = ops::relu(ops::matmul(kd::identity_with_summed_grad(x, group), a));  // S(1)
  Tensor y = kd::all_reduce_sum(ops::matmul(hidden, b), group);                         // P -> R
  ops::sum(w * y).backward();

  Tensor x1 = x_full.clone().set_requires_grad(true);
  Tensor a1 = a_full.clone().set_requires_grad(true);
  Tensor b1 = b_full.clone().set_requires_grad(true);
  Tensor y1 = ops::matmul(ops::relu(ops::matmul(x1, a1)), b1);
  ops::sum(w * y1).backward();

  testing::expect_close(y.to_vector<double>(), y1.to_vector<double>(), 1e-12, "output");
  testing::expect_close(x.grad().to_vector<double>(), x1.grad().to_vector<double>(), 1e-12, "dx");
  testing::expect_close(a.grad().to_vector<double>(),
                        ops::slice(a1.grad(), {0, rank * width}, {4, width}).to_vector<double>(), 1e-12, "dA");
  testing::expect_close(b.grad().to_vector<double>(),
                        ops::slice(b1.grad(), {rank * width, 0}, {width, 5}).to_vector<double>(), 1e-12, "dB");
}

}  // namespace
}  // namespace keras
