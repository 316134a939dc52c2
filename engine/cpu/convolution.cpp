// CPU 2-D convolution. float32 runs on oneDNN's convolution primitives (forward, backward data,
// backward weights): activations stay channels_last as they are, and the Keras kernel
// (window_h, window_w, channels / groups, filters) is reordered to the blocked layout the
// primitive picked, which is what lets it use its JIT kernels rather than its reference path.
// float64, which oneDNN does not have, runs the patch matrix of engine/window_rules.h through
// Eigen: it is the op table's reference precision, not a training path.
//
// Threads: the batch is split over the engine's pool (engine/thread_pool.h), each part on
// primitives of its own thread with OpenMP held to one thread; the parts of a kernel gradient
// are summed at the end. Each thread keeps its primitives keyed by pass and geometry (a model
// uses a handful), so none is created on the hot path after the first step.
#include <dnnl.hpp>

#include <Eigen/Core>
#include <array>
#include <map>
#include <vector>

#include "engine/cpu/kernels.h"
#include "engine/cpu/onednn_threads.h"
#include "engine/errors.h"
#include "engine/thread_pool.h"
#include "engine/window_rules.h"

namespace keras::cpu {
namespace {

enum class Pass { forward, backward_data, backward_weights };

using Dims = dnnl::memory::dims;
constexpr auto kFloat = dnnl::memory::data_type::f32;

dnnl::memory::desc channels_last(std::int64_t images, std::int64_t channels, std::int64_t height,
                                 std::int64_t width) {
  return dnnl::memory::desc(Dims{images, channels, height, width}, kFloat,
                            dnnl::memory::format_tag::nhwc);
}

// The Keras kernel layout in oneDNN's logical order: (filters, channels, h, w), or with groups
// (groups, filters / groups, channels / groups, h, w).
dnnl::memory::desc keras_kernel(const WindowGeometry& g) {
  std::int64_t filters = g.output_channels, group_channels = g.channels_per_group();
  std::int64_t row = g.window_width * group_channels * filters, column = group_channels * filters;
  if (g.groups == 1) {
    return dnnl::memory::desc(Dims{filters, group_channels, g.window_height, g.window_width},
                              kFloat, Dims{1, filters, row, column});
  }
  return dnnl::memory::desc(Dims{g.groups, g.filters_per_group(), group_channels, g.window_height,
                                 g.window_width},
                            kFloat, Dims{g.filters_per_group(), 1, filters, row, column});
}

class ConvolutionPrimitives {
 public:
  // forward: (input, kernel) -> out; backward_data: (output_gradient, kernel) -> input_gradient;
  // backward_weights: (input, output_gradient) -> kernel_gradient. `g` is the part's geometry.
  void run(Pass pass, const WindowGeometry& g, const float* first, const float* second,
           float* result) {
    Entry& entry = entry_for(pass, g);
    auto memory = [&](const dnnl::memory::desc& desc, const float* data) {
      return dnnl::memory(desc, engine_, const_cast<float*>(data));
    };
    if (scratch_.size() * sizeof(float) < entry.scratchpad.get_size()) {
      scratch_.resize((entry.scratchpad.get_size() + sizeof(float) - 1) / sizeof(float));
    }
    if (weights_.size() * sizeof(float) < entry.weights.get_size()) {
      weights_.resize((entry.weights.get_size() + sizeof(float) - 1) / sizeof(float));
    }
    dnnl::memory scratchpad = memory(entry.scratchpad, scratch_.data());
    if (pass == Pass::backward_weights) {
      // diff_weights in the primitive's layout, then reordered to the Keras one.
      dnnl::memory kernel = entry.reorder ? memory(entry.weights, weights_.data())
                                          : memory(entry.keras_weights, result);
      entry.primitive.execute(stream_, {{DNNL_ARG_SRC, memory(entry.source, first)},
                                        {DNNL_ARG_DIFF_DST, memory(entry.destination, second)},
                                        {DNNL_ARG_DIFF_WEIGHTS, kernel},
                                        {DNNL_ARG_SCRATCHPAD, scratchpad}});
      if (entry.reorder) {
        dnnl::memory keras = memory(entry.keras_weights, result);
        entry.weights_reorder.execute(stream_, kernel, keras);
      }
      stream_.wait();
      return;
    }
    dnnl::memory kernel = memory(entry.keras_weights, second);
    if (entry.reorder) {
      dnnl::memory keras = kernel;
      kernel = memory(entry.weights, weights_.data());
      entry.weights_reorder.execute(stream_, keras, kernel);
    }
    if (pass == Pass::forward) {
      entry.primitive.execute(stream_, {{DNNL_ARG_SRC, memory(entry.source, first)},
                                        {DNNL_ARG_WEIGHTS, kernel},
                                        {DNNL_ARG_DST, memory(entry.destination, result)},
                                        {DNNL_ARG_SCRATCHPAD, scratchpad}});
    } else {
      entry.primitive.execute(stream_, {{DNNL_ARG_DIFF_DST, memory(entry.destination, first)},
                                        {DNNL_ARG_WEIGHTS, kernel},
                                        {DNNL_ARG_DIFF_SRC, memory(entry.source, result)},
                                        {DNNL_ARG_SCRATCHPAD, scratchpad}});
    }
    stream_.wait();
  }

 private:
  struct Entry {
    dnnl::memory::desc source, destination, weights, keras_weights, scratchpad;
    dnnl::primitive primitive;
    bool reorder = false;
    dnnl::reorder weights_reorder;
  };
  using Key = std::array<std::int64_t, 19>;

  Entry& entry_for(Pass pass, const WindowGeometry& g) {
    Key key{static_cast<std::int64_t>(pass), g.batch, g.input_height, g.input_width,
            g.input_channels, g.output_height, g.output_width, g.output_channels,
            g.window_height, g.window_width, g.stride_height, g.stride_width, g.dilation_height,
            g.dilation_width, g.pad_top, g.pad_left, g.pad_bottom, g.pad_right, g.groups};
    auto found = entries_.find(key);
    if (found != entries_.end()) return found->second;
    Entry entry;
    entry.source = channels_last(g.batch, g.input_channels, g.input_height, g.input_width);
    entry.destination = channels_last(g.batch, g.output_channels, g.output_height, g.output_width);
    entry.keras_weights = keras_kernel(g);
    dnnl::memory::desc any_weights(entry.keras_weights.dims(), kFloat,
                                   dnnl::memory::format_tag::any);
    Dims strides{g.stride_height, g.stride_width};
    // oneDNN counts dilation from 0 (no dilation), Keras from 1.
    Dims dilation{g.dilation_height - 1, g.dilation_width - 1};
    Dims padding_before{g.pad_top, g.pad_left}, padding_after{g.pad_bottom, g.pad_right};
    dnnl::primitive_attr attributes;
    attributes.set_scratchpad_mode(dnnl::scratchpad_mode::user);
    dnnl::convolution_forward::primitive_desc forward(
        dnnl::convolution_forward::desc(dnnl::prop_kind::forward_training,
                                        dnnl::algorithm::convolution_direct, entry.source,
                                        any_weights, entry.destination, strides, dilation,
                                        padding_before, padding_after),
        attributes, engine_);
    if (pass == Pass::forward) {
      entry.weights = forward.weights_desc();
      entry.scratchpad = forward.scratchpad_desc();
      entry.primitive = dnnl::convolution_forward(forward);
    } else if (pass == Pass::backward_data) {
      dnnl::convolution_backward_data::primitive_desc data(
          dnnl::convolution_backward_data::desc(dnnl::algorithm::convolution_direct, entry.source,
                                                any_weights, entry.destination, strides, dilation,
                                                padding_before, padding_after),
          attributes, engine_, forward);
      entry.weights = data.weights_desc();
      entry.scratchpad = data.scratchpad_desc();
      entry.primitive = dnnl::convolution_backward_data(data);
    } else {
      dnnl::convolution_backward_weights::primitive_desc weights(
          dnnl::convolution_backward_weights::desc(dnnl::algorithm::convolution_direct,
                                                   entry.source, any_weights, entry.destination,
                                                   strides, dilation, padding_before,
                                                   padding_after),
          attributes, engine_, forward);
      entry.weights = weights.diff_weights_desc();
      entry.scratchpad = weights.scratchpad_desc();
      entry.primitive = dnnl::convolution_backward_weights(weights);
    }
    entry.reorder = entry.weights != entry.keras_weights;
    if (entry.reorder) {
      entry.weights_reorder =
          pass == Pass::backward_weights
              ? dnnl::reorder(dnnl::reorder::primitive_desc(engine_, entry.weights, engine_,
                                                            entry.keras_weights))
              : dnnl::reorder(dnnl::reorder::primitive_desc(engine_, entry.keras_weights, engine_,
                                                            entry.weights));
    }
    return entries_.emplace(key, std::move(entry)).first->second;
  }

  dnnl::engine engine_{dnnl::engine::kind::cpu, 0};
  dnnl::stream stream_{engine_};
  std::map<Key, Entry> entries_;
  std::vector<float> scratch_, weights_;
};

void run_part(Pass pass, const WindowGeometry& g, const float* first, const float* second,
              float* result) {
  limit_openmp_to_this_thread();
  thread_local ConvolutionPrimitives primitives;
  try {
    primitives.run(pass, g, first, second, result);
  } catch (const dnnl::error& failure) {
    throw Error(str("oneDNN convolution failed (", failure.what(), ") for input (", g.batch, ", ",
                    g.input_height, ", ", g.input_width, ", ", g.input_channels, "), window (",
                    g.window_height, ", ", g.window_width, "), ", g.output_channels,
                    " filters, groups ", g.groups));
  }
}

// Splits the batch into parts over the pool: body(part, first image, geometry of the part).
// Below ~4 M multiply-adds a second thread costs more than it saves (as for matmul.cpp).
std::int64_t image_parts(const WindowGeometry& g) {
  std::int64_t multiply_adds = g.output_pixels() * g.patch_size() * g.output_channels;
  return multiply_adds < (std::int64_t{1} << 22) ? 1 : std::min<std::int64_t>(num_threads(), g.batch);
}

template <class Body>
void over_image_parts(const WindowGeometry& g, std::int64_t parts, const Body& body) {
  parallel_for(parts, 1, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t part = begin; part < end; ++part) {
      std::int64_t first = g.batch * part / parts, last = g.batch * (part + 1) / parts;
      WindowGeometry slice = g;
      slice.batch = last - first;
      if (slice.batch > 0) body(part, first, slice);
    }
  });
}

std::int64_t input_image_size(const WindowGeometry& g) {
  return g.input_height * g.input_width * g.input_channels;
}
std::int64_t output_image_size(const WindowGeometry& g) {
  return g.output_height * g.output_width * g.output_channels;
}

// float64: the patch matrix through Eigen, one group at a time.
using Matrix = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using Strided = Eigen::Map<Matrix, 0, Eigen::OuterStride<>>;
using ConstStrided = Eigen::Map<const Matrix, 0, Eigen::OuterStride<>>;

std::vector<double> patch_matrix(const double* input, const WindowGeometry& g) {
  std::vector<double> patches(static_cast<std::size_t>(g.groups * g.output_pixels() * g.patch_size()));
  parallel_for(static_cast<std::int64_t>(patches.size()), 4096, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t e = begin; e < end; ++e) patches[e] = window::patch_element(input, g, e);
  });
  return patches;
}

void convolution_float64(const double* input, const double* kernel, const WindowGeometry& g,
                         double* out) {
  std::vector<double> patches = patch_matrix(input, g);
  std::int64_t pixels = g.output_pixels(), patch = g.patch_size(), filters = g.filters_per_group();
  for (std::int64_t group = 0; group < g.groups; ++group) {
    Strided(out + group * filters, pixels, filters, Eigen::OuterStride<>(g.output_channels)).noalias() =
        ConstStrided(patches.data() + group * pixels * patch, pixels, patch, Eigen::OuterStride<>(patch)) *
        ConstStrided(kernel + group * filters, patch, filters, Eigen::OuterStride<>(g.output_channels));
  }
}

void convolution_input_gradient_float64(const double* output_gradient, const double* kernel,
                                        const WindowGeometry& g, double* input_gradient) {
  std::int64_t pixels = g.output_pixels(), patch = g.patch_size(), filters = g.filters_per_group();
  std::vector<double> patch_gradient(static_cast<std::size_t>(g.groups * pixels * patch));
  for (std::int64_t group = 0; group < g.groups; ++group) {
    Strided(patch_gradient.data() + group * pixels * patch, pixels, patch, Eigen::OuterStride<>(patch)).noalias() =
        ConstStrided(output_gradient + group * filters, pixels, filters, Eigen::OuterStride<>(g.output_channels)) *
        ConstStrided(kernel + group * filters, patch, filters, Eigen::OuterStride<>(g.output_channels)).transpose();
  }
  std::int64_t count = g.batch * input_image_size(g);
  parallel_for(count, 4096, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t e = begin; e < end; ++e) {
      input_gradient[e] = window::input_gradient_element(patch_gradient.data(), g, e);
    }
  });
}

void convolution_kernel_gradient_float64(const double* input, const double* output_gradient,
                                         const WindowGeometry& g, double* kernel_gradient) {
  std::vector<double> patches = patch_matrix(input, g);
  std::int64_t pixels = g.output_pixels(), patch = g.patch_size(), filters = g.filters_per_group();
  for (std::int64_t group = 0; group < g.groups; ++group) {
    Strided(kernel_gradient + group * filters, patch, filters, Eigen::OuterStride<>(g.output_channels)).noalias() =
        ConstStrided(patches.data() + group * pixels * patch, pixels, patch, Eigen::OuterStride<>(patch)).transpose() *
        ConstStrided(output_gradient + group * filters, pixels, filters, Eigen::OuterStride<>(g.output_channels));
  }
}

void check_dtype(const Tensor& x, const char* what) {
  if (x.dtype() != float32 && x.dtype() != float64) {
    throw DTypeError(str(what, " supports float32 and float64, got ", dtype_name(x.dtype())));
  }
}

}  // namespace

void convolution(const Tensor& input, const Tensor& kernel, const WindowGeometry& geometry,
                 Tensor& out) {
  check_dtype(input, "convolution");
  if (out.size() == 0) return;
  if (geometry.patch_size() == 0) {
    fill(out, 0.0);
    return;
  }
  if (input.dtype() == float64) {
    convolution_float64(elements_of<double>(input), elements_of<double>(kernel), geometry,
                        elements_of<double>(out));
    return;
  }
  const float* x = elements_of<float>(input);
  const float* w = elements_of<float>(kernel);
  float* y = elements_of<float>(out);
  over_image_parts(geometry, image_parts(geometry), [&](std::int64_t, std::int64_t first, const WindowGeometry& part) {
    run_part(Pass::forward, part, x + first * input_image_size(part), w,
             y + first * output_image_size(part));
  });
}

void convolution_input_gradient(const Tensor& output_gradient, const Tensor& kernel,
                                const WindowGeometry& geometry, Tensor& input_gradient) {
  check_dtype(kernel, "convolution input gradient");
  if (input_gradient.size() == 0) return;
  if (output_gradient.size() == 0) {
    fill(input_gradient, 0.0);
    return;
  }
  if (kernel.dtype() == float64) {
    convolution_input_gradient_float64(elements_of<double>(output_gradient),
                                       elements_of<double>(kernel), geometry,
                                       elements_of<double>(input_gradient));
    return;
  }
  const float* dy = elements_of<float>(output_gradient);
  const float* w = elements_of<float>(kernel);
  float* dx = elements_of<float>(input_gradient);
  over_image_parts(geometry, image_parts(geometry), [&](std::int64_t, std::int64_t first, const WindowGeometry& part) {
    run_part(Pass::backward_data, part, dy + first * output_image_size(part), w,
             dx + first * input_image_size(part));
  });
}

void convolution_kernel_gradient(const Tensor& input, const Tensor& output_gradient,
                                 const WindowGeometry& geometry, Tensor& kernel_gradient) {
  check_dtype(input, "convolution kernel gradient");
  if (kernel_gradient.size() == 0) return;
  if (geometry.output_pixels() == 0) {
    fill(kernel_gradient, 0.0);
    return;
  }
  if (input.dtype() == float64) {
    convolution_kernel_gradient_float64(elements_of<double>(input),
                                        elements_of<double>(output_gradient), geometry,
                                        elements_of<double>(kernel_gradient));
    return;
  }
  const float* x = elements_of<float>(input);
  const float* dy = elements_of<float>(output_gradient);
  float* dw = elements_of<float>(kernel_gradient);
  std::int64_t kernel_size = kernel_gradient.size();
  // Part 0 writes the result; the others write their own partial gradients, summed below.
  std::int64_t parts = image_parts(geometry);
  std::vector<float> partial(static_cast<std::size_t>((parts - 1) * kernel_size));
  over_image_parts(geometry, parts, [&](std::int64_t part, std::int64_t first, const WindowGeometry& slice) {
    float* target = part == 0 ? dw : partial.data() + (part - 1) * kernel_size;
    run_part(Pass::backward_weights, slice, x + first * input_image_size(slice),
             dy + first * output_image_size(slice), target);
  });
  for (std::int64_t part = 1; part < parts; ++part) {
    const float* add = partial.data() + (part - 1) * kernel_size;
    for (std::int64_t i = 0; i < kernel_size; ++i) dw[i] += add[i];
  }
}

}  // namespace keras::cpu
