// conv, max_pool and average_pool: their argument checks, the window geometry
// (engine/window_geometry.h) and their gradient rules, each beside its forward computation.
#include "engine/ops/op_helpers.h"

namespace keras::ops {
namespace {

bool needs_gradient(const Tensor& x) { return x.requires_grad() || x.gradient_node(); }

void check_channels_last(const std::string& data_format, const char* op) {
  if (data_format == "channels_last") return;
  if (data_format == "channels_first") {
    throw NotImplementedError(str(op, ": data_format \"channels_first\" is not supported; "
                                  "keras-cpp is channels_last (batch, height, width, channels): "
                                  "transpose the input with ops::transpose(x, {0, 2, 3, 1})"));
  }
  throw ValueError(str(op, ": data_format must be \"channels_last\" or \"channels_first\", got \"",
                       data_format, "\""));
}

void check_image_batch(const Tensor& inputs, const char* op) {
  detail::check_defined(inputs, op, "inputs");
  detail::check_floating(inputs, op);
  if (inputs.rank() != 4) {
    throw ValueError(str(op, " expects a rank-4 channels_last input (batch, height, width, "
                         "channels), got shape ", shape_to_string(inputs.shape())));
  }
}

}  // namespace

Tensor conv(const Tensor& inputs, const Tensor& kernel, const std::vector<std::int64_t>& strides,
            const std::string& padding, const std::string& data_format,
            const std::vector<std::int64_t>& dilation_rate) {
  check_channels_last(data_format, "conv");
  if (detail::goes_through_handler({&inputs, &kernel})) {
    return detail::through_handler({"conv", OpFamily::convolution, {inputs, kernel},
                                    [strides, padding, data_format, dilation_rate](const std::vector<Tensor>& local) { return conv(local[0], local[1], strides, padding, data_format, dilation_rate); }});
  }
  check_image_batch(inputs, "conv");
  detail::check_defined(kernel, "conv", "kernel");
  detail::check_same_dtype(inputs, kernel, "conv");
  detail::check_same_device(inputs, kernel, "conv");
  if (kernel.rank() != 4) {
    throw ValueError(str("conv expects a rank-4 kernel (kernel_height, kernel_width, channels / "
                         "groups, filters), got shape ", shape_to_string(kernel.shape())));
  }
  const Shape& k = kernel.shape();
  std::int64_t channels = inputs.shape()[3];
  if (k[2] < 1 || channels % k[2] != 0) {
    throw ValueError(str("conv: the input has ", channels, " channels on its last axis (shape ",
                         shape_to_string(inputs.shape()), "), which is not a multiple of the "
                         "kernel's ", k[2], " channels per group (kernel shape ",
                         shape_to_string(k), "); inputs are channels_last (batch, height, width, "
                         "channels), so a channels_first input must be transposed first"));
  }
  std::int64_t groups = channels / k[2];
  if (k[3] % groups != 0) {
    throw ValueError(str("conv: ", k[3], " filters (kernel shape ", shape_to_string(k),
                         ") cannot be split into ", groups, " groups (", channels,
                         " input channels / ", k[2], " per group)"));
  }
  WindowGeometry geometry = window_geometry(inputs.shape(), k[0], k[1], strides,
                                            parse_window_padding(padding, "conv"), dilation_rate,
                                            "conv");
  geometry.output_channels = k[3];
  geometry.groups = groups;
  Tensor out = Tensor::empty(geometry.output_shape(), inputs.dtype(), inputs.device());
  backend_for(inputs.device()).convolution(inputs, kernel, geometry, out);
  Tensor saved_inputs = inputs.detach(), saved_kernel = kernel.detach();
  bool inputs_need = needs_gradient(inputs), kernel_needs = needs_gradient(kernel);
  return record_gradient(out, "conv", {inputs, kernel},
                         [saved_inputs, saved_kernel, geometry, inputs_need, kernel_needs](const Tensor& g) {
    Backend& backend = backend_for(g.device());
    Tensor input_gradient, kernel_gradient;
    if (inputs_need) {
      input_gradient = Tensor::empty(saved_inputs.shape(), g.dtype(), g.device());
      backend.convolution_input_gradient(g, saved_kernel, geometry, input_gradient);
    }
    if (kernel_needs) {
      kernel_gradient = Tensor::empty(saved_kernel.shape(), g.dtype(), g.device());
      backend.convolution_kernel_gradient(saved_inputs, g, geometry, kernel_gradient);
    }
    return std::vector<Tensor>{input_gradient, kernel_gradient};
  });
}

namespace {

Tensor pool(PoolOp op, const Tensor& inputs, const std::vector<std::int64_t>& pool_size,
            const std::vector<std::int64_t>& strides, const std::string& padding,
            const std::string& data_format, const char* name) {
  check_channels_last(data_format, name);
  if (detail::goes_through_handler({&inputs})) {
    return detail::through_handler({name, OpFamily::window, {inputs},
                                    [op, pool_size, strides, padding, data_format, name](const std::vector<Tensor>& local) {
                                      return pool(op, local[0], pool_size, strides, padding, data_format, name);
                                    }});
  }
  check_image_batch(inputs, name);
  std::vector<std::int64_t> window = window_pair(pool_size, name, "pool_size");
  WindowGeometry geometry =
      window_geometry(inputs.shape(), window[0], window[1], strides.empty() ? window : strides,
                      parse_window_padding(padding, name), {1}, name);
  Tensor out = Tensor::empty(geometry.output_shape(), inputs.dtype(), inputs.device());
  backend_for(inputs.device()).pool(op, inputs, geometry, out);
  Tensor saved = inputs.detach();
  return record_gradient(out, name, {inputs}, [saved, geometry, op](const Tensor& g) {
    Tensor input_gradient = Tensor::empty(saved.shape(), g.dtype(), g.device());
    backend_for(g.device()).pool_gradient(op, saved, g, geometry, input_gradient);
    return std::vector<Tensor>{input_gradient};
  });
}

}  // namespace

Tensor max_pool(const Tensor& inputs, const std::vector<std::int64_t>& pool_size,
                const std::vector<std::int64_t>& strides, const std::string& padding,
                const std::string& data_format) {
  return pool(PoolOp::max, inputs, pool_size, strides, padding, data_format, "max_pool");
}

Tensor average_pool(const Tensor& inputs, const std::vector<std::int64_t>& pool_size,
                    const std::vector<std::int64_t>& strides, const std::string& padding,
                    const std::string& data_format) {
  return pool(PoolOp::average, inputs, pool_size, strides, padding, data_format, "average_pool");
}

}  // namespace keras::ops
