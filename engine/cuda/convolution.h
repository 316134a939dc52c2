// GPU 2-D convolution as im2col + cuBLAS: the patch matrix of a chunk of images
// (engine/window_rules.h, one thread per element) times the kernel, one strided-batched GEMM over
// the groups. The gradients are the two other products of the same matrices, the input's
// gathered back from the patch gradient with no atomics. cuDNN would be faster for large
// kernels, but no cuDNN is installed with the toolkit here (PyPI's nvidia-cudnn ships no CMake
// config and Debian has none), and this path needs nothing beyond cuBLAS; it has run only on the
// emulated GPU, so its speed is unmeasured.
//
// Row-major products map onto column-major GEMMs as in matmul.h (group_product).
#pragma once
#include <algorithm>

#include "engine/cuda/kernels.h"
#include "engine/window_rules.h"

namespace keras::gpu_kernels {

// A row-major matrix per group: `rows` x `columns`, rows `stride` apart, one group's matrix
// `group` elements after the previous one's.
struct GroupMatrix {
  std::int64_t rows = 0, columns = 0, stride = 0, group = 0;
};

// The three matrices of a convolution of geometry `c`, per group: the patches
// [pixels, patch], the Keras kernel [patch, filters_g] (its rows all the filters apart) and the
// output (or its gradient) [pixels, filters_g] (channels_last: the same strides).
inline GroupMatrix patch_matrix(const WindowGeometry& c) {
  return {c.output_pixels(), c.patch_size(), c.patch_size(), c.output_pixels() * c.patch_size()};
}
inline GroupMatrix kernel_matrix(const WindowGeometry& c) {
  return {c.patch_size(), c.filters_per_group(), c.output_channels, c.filters_per_group()};
}
inline GroupMatrix output_matrix(const WindowGeometry& c) {
  return {c.output_pixels(), c.filters_per_group(), c.output_channels, c.filters_per_group()};
}

// C = op(A) op(B) for each of `groups` groups (C += with `accumulate`), as one column-major
// strided-batched GEMM: C^T = op(B)^T op(A)^T, so the call takes B first
// (launcher.gemm(call, B, A, C)).
inline GemmCall group_product(const GroupMatrix& a, bool transpose_a, const GroupMatrix& b, bool transpose_b,
                              const GroupMatrix& c, std::int64_t groups, bool accumulate = false) {
  GemmCall call;
  call.transpose_a = transpose_b;
  call.transpose_b = transpose_a;
  call.m = c.columns;
  call.n = c.rows;
  call.k = transpose_a ? a.rows : a.columns;
  call.lda = b.stride;
  call.ldb = a.stride;
  call.ldc = c.stride;
  call.stride_a = b.group;
  call.stride_b = a.group;
  call.stride_c = c.group;
  call.batch = groups;
  call.accumulate = accumulate;
  return call;
}

template <typename T>
struct PatchBody {
  const T* input;
  T* patches;
  WindowGeometry geometry;
  KERAS_HOST_DEVICE void operator()(std::int64_t e) const {
    patches[e] = window::patch_element(input, geometry, e);
  }
};

template <typename T>
struct PatchGatherBody {
  const T* patch_gradient;
  T* input_gradient;
  WindowGeometry geometry;
  KERAS_HOST_DEVICE void operator()(std::int64_t e) const {
    input_gradient[e] = window::input_gradient_element(patch_gradient, geometry, e);
  }
};

// The patch matrix of every image at once would be batch × out_pixels × patch elements (the
// Fashion-MNIST CNN's second layer: 8 M floats at batch 128); chunks of images bound it.
constexpr std::int64_t kPatchElementsPerChunk = std::int64_t{1} << 26;

inline std::int64_t images_per_chunk(const WindowGeometry& g) {
  std::int64_t per_image = g.output_height * g.output_width * g.patch_size() * g.groups;
  return std::max<std::int64_t>(1, std::min(g.batch, kPatchElementsPerChunk / std::max<std::int64_t>(per_image, 1)));
}

// The geometry of images [first, first + count) of `g`.
inline WindowGeometry chunk_of(WindowGeometry g, std::int64_t count) {
  g.batch = count;
  return g;
}

// Calls fn(first_image, chunk geometry, patch matrix) over chunks of the batch; the patch matrix
// is a workspace of the chunk's size.
template <typename T, class Fn>
void over_image_chunks(const WindowGeometry& g, Device device, Fn&& fn) {
  std::int64_t chunk = images_per_chunk(g);
  WindowGeometry full = chunk_of(g, chunk);
  Tensor patches = Tensor::empty({full.groups * full.output_pixels() * full.patch_size()},
                                 dtype_of<T>::value, device);
  for (std::int64_t first = 0; first < g.batch; first += chunk) {
    fn(first, chunk_of(g, std::min(chunk, g.batch - first)), elements_of<T>(patches));
  }
}

template <class Launcher>
void convolution(Launcher& launcher, const Tensor& input, const Tensor& kernel,
                 const WindowGeometry& geometry, Tensor& out) {
  if (out.size() == 0) return;
  if (geometry.patch_size() == 0) {
    fill(launcher, out, 0.0);
    return;
  }
  auto run = [&](auto zero) {
    using T = decltype(zero);
    const T* x = elements_of<T>(input);
    T* y = elements_of<T>(out);
    over_image_chunks<T>(geometry, out.device(), [&](std::int64_t first, const WindowGeometry& c, T* patches) {
      const T* x_chunk = x + first * c.input_height * c.input_width * c.input_channels;
      T* y_chunk = y + first * c.output_height * c.output_width * c.output_channels;
      launcher.for_each(c.groups * c.output_pixels() * c.patch_size(), PatchBody<T>{x_chunk, patches, c});
      // out = patches @ kernel, per group.
      launcher.gemm(group_product(patch_matrix(c), false, kernel_matrix(c), false, output_matrix(c), c.groups),
                    elements_of<T>(kernel), patches, y_chunk);
    });
  };
  // bfloat16 and float16 as they are: the patches are copies and the GEMM rounds each output
  // once (its gradients sum across windows or chunks, so they keep float32 stand-ins).
  if (!dispatch_half_precision(input.dtype(), run)) dispatch_floating(input.dtype(), "convolution", run);
}

template <class Launcher>
void convolution_input_gradient(Launcher& launcher, const Tensor& output_gradient,
                                const Tensor& kernel, const WindowGeometry& geometry,
                                Tensor& input_gradient) {
  if (input_gradient.size() == 0) return;
  if (output_gradient.size() == 0) {
    fill(launcher, input_gradient, 0.0);
    return;
  }
  dispatch_floating(kernel.dtype(), "convolution input gradient", [&](auto zero) {
    using T = decltype(zero);
    const T* dy = elements_of<T>(output_gradient);
    T* dx = elements_of<T>(input_gradient);
    over_image_chunks<T>(geometry, kernel.device(), [&](std::int64_t first, const WindowGeometry& c, T* patch_gradient) {
      const T* dy_chunk = dy + first * c.output_height * c.output_width * c.output_channels;
      T* dx_chunk = dx + first * c.input_height * c.input_width * c.input_channels;
      // patch_gradient = dy @ kernel^T, per group.
      launcher.gemm(group_product(output_matrix(c), false, kernel_matrix(c), true, patch_matrix(c), c.groups),
                    elements_of<T>(kernel), dy_chunk, patch_gradient);
      launcher.for_each(c.batch * c.input_height * c.input_width * c.input_channels,
                        PatchGatherBody<T>{patch_gradient, dx_chunk, c});
    });
  });
}

template <class Launcher>
void convolution_kernel_gradient(Launcher& launcher, const Tensor& input,
                                 const Tensor& output_gradient, const WindowGeometry& geometry,
                                 Tensor& kernel_gradient) {
  if (kernel_gradient.size() == 0) return;
  if (geometry.output_pixels() == 0) {
    fill(launcher, kernel_gradient, 0.0);
    return;
  }
  dispatch_floating(input.dtype(), "convolution kernel gradient", [&](auto zero) {
    using T = decltype(zero);
    const T* x = elements_of<T>(input);
    const T* dy = elements_of<T>(output_gradient);
    over_image_chunks<T>(geometry, input.device(), [&](std::int64_t first, const WindowGeometry& c, T* patches) {
      const T* x_chunk = x + first * c.input_height * c.input_width * c.input_channels;
      const T* dy_chunk = dy + first * c.output_height * c.output_width * c.output_channels;
      launcher.for_each(c.groups * c.output_pixels() * c.patch_size(), PatchBody<T>{x_chunk, patches, c});
      // kernel_gradient (+)= patches^T @ dy, per group, summed over the chunks.
      launcher.gemm(group_product(patch_matrix(c), true, output_matrix(c), false, kernel_matrix(c), c.groups,
                                  /*accumulate=*/first > 0),
                    dy_chunk, patches, elements_of<T>(kernel_gradient));
    });
  });
}

}  // namespace keras::gpu_kernels
