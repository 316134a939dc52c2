// GPU 2-D convolution as im2col + cuBLAS: the patch matrix of a chunk of images
// (engine/window_rules.h, one thread per element) times the kernel, one strided-batched GEMM over
// the groups. The gradients are the two other products of the same matrices, the input's
// gathered back from the patch gradient with no atomics. cuDNN would be faster for large
// kernels, but no cuDNN is installed with the toolkit here (PyPI's nvidia-cudnn ships no CMake
// config and Debian has none), and this path needs nothing beyond cuBLAS; it has run only on the
// emulated GPU, so its speed is unmeasured.
//
// Row-major products map onto column-major GEMMs as in matmul.h: C[M,N] = A[M,K] B[K,N]
// row-major is C^T = B^T A^T column-major, so the call takes B first (launcher.gemm(call, B, A, C)).
#pragma once
#include <algorithm>

#include "engine/cuda/kernels.h"
#include "engine/window_rules.h"

namespace keras::gpu_kernels {

// A row-major product per group: C = op(A) op(B), each matrix given by its row stride and the
// offset from one group's matrix to the next.
struct RowMajorProduct {
  std::int64_t m = 0, n = 0, k = 0;
  bool transpose_a = false, transpose_b = false;
  std::int64_t lda = 0, ldb = 0, ldc = 0;
  std::int64_t group_a = 0, group_b = 0, group_c = 0;
  std::int64_t groups = 1;
  bool accumulate = false;
};

inline GemmCall column_major(const RowMajorProduct& p) {
  GemmCall call;
  call.transpose_a = p.transpose_b;
  call.transpose_b = p.transpose_a;
  call.m = p.n;
  call.n = p.m;
  call.k = p.k;
  call.lda = p.ldb;
  call.ldb = p.lda;
  call.ldc = p.ldc;
  call.stride_a = p.group_b;
  call.stride_b = p.group_a;
  call.stride_c = p.group_c;
  call.batch = p.groups;
  call.accumulate = p.accumulate;
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

// Per group: out[pixels, filters_g] = patches[pixels, patch] @ kernel[patch, filters_g], the
// kernel's rows OC apart and the groups' filters filters_g apart.
inline RowMajorProduct forward_product(const WindowGeometry& c) {
  RowMajorProduct p;
  p.m = c.output_pixels();
  p.n = c.filters_per_group();
  p.k = c.patch_size();
  p.lda = c.patch_size();
  p.ldb = c.output_channels;
  p.ldc = c.output_channels;
  p.group_a = c.output_pixels() * c.patch_size();
  p.group_b = c.filters_per_group();
  p.group_c = c.filters_per_group();
  p.groups = c.groups;
  return p;
}

template <class Launcher>
void convolution(Launcher& launcher, const Tensor& input, const Tensor& kernel,
                 const WindowGeometry& geometry, Tensor& out) {
  if (out.size() == 0) return;
  if (geometry.patch_size() == 0) {
    fill(launcher, out, 0.0);
    return;
  }
  dispatch_floating(input.dtype(), "convolution", [&](auto zero) {
    using T = decltype(zero);
    const T* x = elements_of<T>(input);
    T* y = elements_of<T>(out);
    over_image_chunks<T>(geometry, out.device(), [&](std::int64_t first, const WindowGeometry& c, T* patches) {
      const T* x_chunk = x + first * c.input_height * c.input_width * c.input_channels;
      T* y_chunk = y + first * c.output_height * c.output_width * c.output_channels;
      launcher.for_each(c.groups * c.output_pixels() * c.patch_size(), PatchBody<T>{x_chunk, patches, c});
      launcher.gemm(column_major(forward_product(c)), elements_of<T>(kernel), patches, y_chunk);
    });
  });
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
      // patch_gradient[pixels, patch] = dy[pixels, filters_g] @ kernel[patch, filters_g]^T.
      RowMajorProduct p;
      p.m = c.output_pixels();
      p.n = c.patch_size();
      p.k = c.filters_per_group();
      p.transpose_b = true;
      p.lda = c.output_channels;
      p.ldb = c.output_channels;
      p.ldc = c.patch_size();
      p.group_a = c.filters_per_group();
      p.group_b = c.filters_per_group();
      p.group_c = c.output_pixels() * c.patch_size();
      p.groups = c.groups;
      const T* dy_chunk = dy + first * c.output_height * c.output_width * c.output_channels;
      T* dx_chunk = dx + first * c.input_height * c.input_width * c.input_channels;
      launcher.gemm(column_major(p), elements_of<T>(kernel), dy_chunk, patch_gradient);
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
      // kernel_gradient[patch, filters_g] (+)= patches[pixels, patch]^T @ dy[pixels, filters_g].
      RowMajorProduct p;
      p.m = c.patch_size();
      p.n = c.filters_per_group();
      p.k = c.output_pixels();
      p.transpose_a = true;
      p.lda = c.patch_size();
      p.ldb = c.output_channels;
      p.ldc = c.output_channels;
      p.group_a = c.output_pixels() * c.patch_size();
      p.group_b = c.filters_per_group();
      p.group_c = c.filters_per_group();
      p.groups = c.groups;
      p.accumulate = first > 0;
      const T* x_chunk = x + first * c.input_height * c.input_width * c.input_channels;
      const T* dy_chunk = dy + first * c.output_height * c.output_width * c.output_channels;
      launcher.for_each(c.groups * c.output_pixels() * c.patch_size(), PatchBody<T>{x_chunk, patches, c});
      launcher.gemm(column_major(p), dy_chunk, patches, elements_of<T>(kernel_gradient));
    });
  });
}

}  // namespace keras::gpu_kernels
