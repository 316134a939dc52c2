// CPU 2-D convolution. float32 runs on oneDNN's convolution primitives (forward, backward data,
// backward weights): activations stay channels_last as they are, and the Keras kernel
// (window_h, window_w, channels / groups, filters) is reordered to the blocked layout the
// primitive picked, which is what lets it use its JIT kernels rather than its reference path.
// float64, which oneDNN does not have, runs the patch matrix of engine/window_rules.h through
// Eigen: it is the op table's reference precision, not a training path.
//
// bfloat16 runs on oneDNN's bf16 primitives where the CPU's bfloat16 multiplies pay (AMX, or
// AVX512-BF16 measured fast: engine/cpu/matmul_primitives.h) and oneDNN has more than its
// reference loop for the geometry: float32 accumulation, each result rounded once; the kernel
// gradient's parts are written and summed in float32 and rounded once at the end. Elsewhere,
// and for float16, the float32 primitives run on float32 copies (engine/float32_compute.h's
// rule).
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

#include "engine/cpu/matmul_primitives.h"
#include "engine/cpu/half_conversion.h"
#include "engine/cpu/kernels.h"
#include "engine/cpu/onednn_threads.h"
#include "engine/errors.h"
#include "engine/thread_pool.h"
#include "engine/window_rules.h"

namespace keras::cpu {
namespace {

enum class Pass { forward, backward_data, backward_weights };

using Dims = dnnl::memory::dims;
using DataType = dnnl::memory::data_type;
constexpr auto kFloat = DataType::f32;

dnnl::memory::desc channels_last(std::int64_t images, std::int64_t channels, std::int64_t height,
                                 std::int64_t width, DataType type) {
  return dnnl::memory::desc(Dims{images, channels, height, width}, type,
                            dnnl::memory::format_tag::nhwc);
}

// The Keras kernel layout in oneDNN's logical order: (filters, channels, h, w), or with groups
// (groups, filters / groups, channels / groups, h, w).
dnnl::memory::desc keras_kernel(const WindowGeometry& g, DataType type) {
  std::int64_t filters = g.output_channels, group_channels = g.channels_per_group();
  std::int64_t row = g.window_width * group_channels * filters, column = group_channels * filters;
  if (g.groups == 1) {
    return dnnl::memory::desc(Dims{filters, group_channels, g.window_height, g.window_width},
                              type, Dims{1, filters, row, column});
  }
  return dnnl::memory::desc(Dims{g.groups, g.filters_per_group(), group_channels, g.window_height,
                                 g.window_width},
                            type, Dims{g.filters_per_group(), 1, filters, row, column});
}

class ConvolutionPrimitives {
 public:
  // forward: (input, kernel) -> out; backward_data: (output_gradient, kernel) -> input_gradient;
  // backward_weights: (input, output_gradient) -> kernel_gradient. `g` is the part's geometry;
  // `type` the activations' and kernel's data type (f32 or bf16); a kernel gradient is float32.
  void run(Pass pass, const WindowGeometry& g, DataType type, const void* first, const void* second,
           void* result) {
    Entry& entry = entry_for(pass, g, type);
    auto memory = [&](const dnnl::memory::desc& desc, const void* data) {
      return dnnl::memory(desc, engine_, const_cast<void*>(data));
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

  // Whether oneDNN has more than its reference loop for this pass and geometry (bf16 asks).
  bool is_fast(Pass pass, const WindowGeometry& g, DataType type) {
    try {
      return !std::string_view(entry_for(pass, g, type).implementation).starts_with("ref");
    } catch (const dnnl::error&) {
      return false;
    }
  }

 private:
  struct Entry {
    dnnl::memory::desc source, destination, weights, keras_weights, scratchpad;
    dnnl::primitive primitive;
    bool reorder = false;
    dnnl::reorder weights_reorder;
    std::string implementation;
  };
  using Key = std::array<std::int64_t, 20>;

  // oneDNN fixes a primitive's OpenMP team size when it is created: held to one thread first,
  // on whichever thread creates it (is_fast runs on the calling thread).
  Entry& entry_for(Pass pass, const WindowGeometry& g, DataType type) {
    limit_openmp_to_this_thread();
    Key key{static_cast<std::int64_t>(pass), g.batch, g.input_height, g.input_width,
            g.input_channels, g.output_height, g.output_width, g.output_channels,
            g.window_height, g.window_width, g.stride_height, g.stride_width, g.dilation_height,
            g.dilation_width, g.pad_top, g.pad_left, g.pad_bottom, g.pad_right, g.groups,
            static_cast<std::int64_t>(type)};
    auto found = entries_.find(key);
    if (found != entries_.end()) return found->second;
    Entry entry;
    entry.source = channels_last(g.batch, g.input_channels, g.input_height, g.input_width, type);
    entry.destination = channels_last(g.batch, g.output_channels, g.output_height, g.output_width, type);
    // The kernel gradient is written in float32 whatever the activations' type.
    const DataType weights_type = pass == Pass::backward_weights ? kFloat : type;
    entry.keras_weights = keras_kernel(g, weights_type);
    dnnl::memory::desc any_weights(entry.keras_weights.dims(), weights_type,
                                   dnnl::memory::format_tag::any);
    // The forward pass a backward pass is described against has the activations' type throughout.
    dnnl::memory::desc any_forward_weights(entry.keras_weights.dims(), type, dnnl::memory::format_tag::any);
    Dims strides{g.stride_height, g.stride_width};
    // oneDNN counts dilation from 0 (no dilation), Keras from 1.
    Dims dilation{g.dilation_height - 1, g.dilation_width - 1};
    Dims padding_before{g.pad_top, g.pad_left}, padding_after{g.pad_bottom, g.pad_right};
    dnnl::primitive_attr attributes;
    attributes.set_scratchpad_mode(dnnl::scratchpad_mode::user);
    dnnl::convolution_forward::primitive_desc forward(
        dnnl::convolution_forward::desc(dnnl::prop_kind::forward_training,
                                        dnnl::algorithm::convolution_direct, entry.source,
                                        any_forward_weights, entry.destination, strides, dilation,
                                        padding_before, padding_after),
        attributes, engine_);
    if (pass == Pass::forward) {
      entry.weights = forward.weights_desc();
      entry.scratchpad = forward.scratchpad_desc();
      entry.implementation = forward.impl_info_str();
      entry.primitive = dnnl::convolution_forward(forward);
    } else if (pass == Pass::backward_data) {
      dnnl::convolution_backward_data::primitive_desc data(
          dnnl::convolution_backward_data::desc(dnnl::algorithm::convolution_direct, entry.source,
                                                any_weights, entry.destination, strides, dilation,
                                                padding_before, padding_after),
          attributes, engine_, forward);
      entry.weights = data.weights_desc();
      entry.scratchpad = data.scratchpad_desc();
      entry.implementation = data.impl_info_str();
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
      entry.implementation = weights.impl_info_str();
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

ConvolutionPrimitives& convolution_primitives_of_this_thread() {
  thread_local ConvolutionPrimitives primitives;
  return primitives;
}

void run_part(Pass pass, const WindowGeometry& g, DataType type, const void* first, const void* second,
              void* result) {
  limit_openmp_to_this_thread();
  try {
    convolution_primitives_of_this_thread().run(pass, g, type, first, second, result);
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
  if (x.dtype() != float32 && x.dtype() != float64 && !is_half_precision(x.dtype())) {
    throw DTypeError(str(what, " supports float32, float64, bfloat16 and float16, got ", dtype_name(x.dtype())));
  }
}

// The first part's geometry of a split over the pool (the others differ at most by one image).
WindowGeometry first_part(const WindowGeometry& g, std::int64_t parts) {
  WindowGeometry part = g;
  part.batch = g.batch / parts;
  return part;
}

// Whether a pass's three tensors are all bfloat16 and it runs on oneDNN's bf16 primitives (the
// rule at the top of this file).
bool runs_in_bfloat16(Pass pass, const WindowGeometry& g, const Tensor& first, const Tensor& second,
                      const Tensor& result) {
  return first.dtype() == bfloat16 && second.dtype() == bfloat16 && result.dtype() == bfloat16 &&
         cpu_multiplies_bfloat16() &&
         convolution_primitives_of_this_thread().is_fast(pass, first_part(g, image_parts(g)), DataType::bf16);
}

// Whether any of a pass's tensors is 16-bit: then, unless the pass runs in bfloat16, all of them
// are computed on float32 copies (float32 tensors as they are).
bool any_half(const Tensor& first, const Tensor& second, const Tensor& result) {
  return is_half_precision(first.dtype()) || is_half_precision(second.dtype()) || is_half_precision(result.dtype());
}

// Element `index` of a float32 or bfloat16 tensor's data, for oneDNN.
const void* at(const Tensor& x, std::int64_t index) {
  return static_cast<const char*>(x.raw_data()) + index * static_cast<std::int64_t>(dtype_size(x.dtype()));
}
void* at(Tensor& x, std::int64_t index) {
  return static_cast<char*>(x.raw_data()) + index * static_cast<std::int64_t>(dtype_size(x.dtype()));
}

DataType onednn_type(const Tensor& x) { return x.dtype() == bfloat16 ? DataType::bf16 : kFloat; }

// The kernel gradient in float32 from float32 or bfloat16 activations: part 0 writes `dw`, the
// others their own partial gradients, summed into it at the end.
void kernel_gradient_parts(const Tensor& input, const Tensor& output_gradient, const WindowGeometry& geometry,
                           DataType type, float* dw) {
  const std::int64_t kernel_size = geometry.patch_size() * geometry.output_channels;
  const std::int64_t parts = image_parts(geometry);
  std::vector<float> partial(static_cast<std::size_t>((parts - 1) * kernel_size));
  over_image_parts(geometry, parts, [&](std::int64_t part, std::int64_t first, const WindowGeometry& slice) {
    float* target = part == 0 ? dw : partial.data() + (part - 1) * kernel_size;
    run_part(Pass::backward_weights, slice, type, at(input, first * input_image_size(slice)),
             at(output_gradient, first * output_image_size(slice)), target);
  });
  for (std::int64_t part = 1; part < parts; ++part) {
    const float* add = partial.data() + (part - 1) * kernel_size;
    for (std::int64_t i = 0; i < kernel_size; ++i) dw[i] += add[i];
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
  if (any_half(input, kernel, out) && !runs_in_bfloat16(Pass::forward, geometry, input, kernel, out)) {
    round_into(out, [&](Tensor& wide) { convolution(float32_copy(input), float32_copy(kernel), geometry, wide); });
    return;
  }
  const DataType type = onednn_type(input);
  over_image_parts(geometry, image_parts(geometry), [&](std::int64_t, std::int64_t first, const WindowGeometry& part) {
    run_part(Pass::forward, part, type, at(input, first * input_image_size(part)), kernel.raw_data(),
             at(out, first * output_image_size(part)));
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
  if (any_half(output_gradient, kernel, input_gradient) &&
      !runs_in_bfloat16(Pass::backward_data, geometry, output_gradient, kernel, input_gradient)) {
    round_into(input_gradient, [&](Tensor& wide) {
      convolution_input_gradient(float32_copy(output_gradient), float32_copy(kernel), geometry, wide);
    });
    return;
  }
  const DataType type = onednn_type(kernel);
  over_image_parts(geometry, image_parts(geometry), [&](std::int64_t, std::int64_t first, const WindowGeometry& part) {
    run_part(Pass::backward_data, part, type, at(output_gradient, first * output_image_size(part)),
             kernel.raw_data(), at(input_gradient, first * input_image_size(part)));
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
  if (any_half(input, output_gradient, kernel_gradient)) {
    // The primitives write the gradient in float32 (its parts are summed there); one rounding.
    const bool native = runs_in_bfloat16(Pass::backward_weights, geometry, input, output_gradient, kernel_gradient);
    round_into(kernel_gradient, [&](Tensor& wide) {
      if (native) {
        kernel_gradient_parts(input, output_gradient, geometry, DataType::bf16, elements_of<float>(wide));
      } else {
        convolution_kernel_gradient(float32_copy(input), float32_copy(output_gradient), geometry, wide);
      }
    });
    return;
  }
  kernel_gradient_parts(input, output_gradient, geometry, kFloat, elements_of<float>(kernel_gradient));
}

}  // namespace keras::cpu
