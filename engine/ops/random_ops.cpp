// Random tensors (no gradient: they are sources) and dropout, whose mask is one.
#include "engine/ops/op_helpers.h"

namespace keras::ops {

Tensor random_slice(const RandomSpec& spec, const Shape& full_shape, const Shape& starts,
                    const Shape& shape, DType dtype, Device device) {
  check_valid_shape(full_shape, "random");
  check_valid_shape(shape, "random");
  if (!is_floating(dtype)) {
    throw DTypeError(str("random: dtype must be floating (float32, float64, bfloat16 or float16), got ", dtype_name(dtype)));
  }
  if (starts.size() != full_shape.size() || shape.size() != full_shape.size()) {
    throw ValueError(str("random_slice: starts ", shape_to_string(starts), " and shape ",
                         shape_to_string(shape), " must have the rank of the full shape ",
                         shape_to_string(full_shape)));
  }
  for (std::size_t i = 0; i < full_shape.size(); ++i) {
    if (starts[i] < 0 || starts[i] + shape[i] > full_shape[i]) {
      throw ValueError(str("random_slice: the block at ", shape_to_string(starts), " of shape ",
                           shape_to_string(shape), " does not lie inside ",
                           shape_to_string(full_shape)));
    }
  }
  if (spec.distribution == RandomDistribution::uniform && !(spec.a <= spec.b)) {
    throw ValueError(str("random uniform: minval ", spec.a, " must not exceed maxval ", spec.b));
  }
  if (spec.distribution != RandomDistribution::uniform && !(spec.b >= 0.0)) {
    throw ValueError(str("random normal: stddev must be >= 0, got ", spec.b));
  }
  Tensor out = Tensor::empty(shape, dtype, device);
  backend_for(device).random(spec, full_shape, starts, out);
  return out;
}

Tensor random(const RandomSpec& spec, const Shape& shape, DType dtype, Device device) {
  return random_slice(spec, shape, Shape(shape.size(), 0), shape, dtype, device);
}

Tensor dropout(const Tensor& x, double rate, std::uint64_t key) {
  if (!x.defined()) throw ValueError("dropout: x is undefined");
  if (!(rate >= 0.0 && rate < 1.0)) throw ValueError(str("dropout: rate must be in [0, 1), got ", rate));
  if (!is_floating(x.dtype())) {
    throw DTypeError(str("dropout: x must be floating (float32, float64, bfloat16 or float16), got ", dtype_name(x.dtype())));
  }
  auto draw = [rate, key](const std::vector<Tensor>& local, const Shape& whole, const Shape& starts) {
    const Tensor& block = local[0];
    RandomSpec spec{RandomDistribution::uniform, 0.0, 1.0, key};
    Tensor uniform = random_slice(spec, whole, starts, block.shape(), block.dtype(), block.device());
    Tensor keep = cast(greater_equal(uniform, scalar_like(uniform, rate)), block.dtype());
    return block * keep * (1.0 / (1.0 - rate));
  };
  // With a handler installed the draw always goes through it, annotated or not: an
  // unannotated activation under DataParallel is this process's rows of the global batch.
  if (sharded_op_handler() != nullptr) {
    OpCall call{"dropout", OpFamily::random, {x},
                [draw](const std::vector<Tensor>& local) {
                  return draw(local, local[0].shape(), Shape(local[0].shape().size(), 0));
                }};
    call.draw_block = draw;
    return detail::through_handler(std::move(call));
  }
  return draw({x}, x.shape(), Shape(x.shape().size(), 0));
}

}  // namespace keras::ops
