// One element of each sliding-window computation, written once for the CPU and the GPU
// (KERAS_HOST_DEVICE): a convolution's patch matrix ("im2col") and its gather back onto the
// input ("col2im"), and max / average pooling with their gradients. Each function computes the
// element with flat index `e` of its output from nothing but its inputs, so a GPU runs one thread
// per element with no atomics and no ordering between threads.
//
// The patch matrix of group g is [output_pixels, patch_size] row-major, groups one after the
// other; a patch's elements run (window row, window column, channel), the order of a Keras
// kernel's (kernel_height, kernel_width, channels / groups) axes, so that a group's output is
// patches @ kernel[..., group's filters] with no reordering of the kernel.
#pragma once
#include <cstdint>

#include "engine/host_device.h"
#include "engine/scalar_rules.h"
#include "engine/window_geometry.h"

namespace keras::window {

// Where a flat index lies: an input element (image, row, column, channel), or an output pixel
// (image, row, column; channel unused).
struct Position {
  std::int64_t image, row, column, channel;
};

KERAS_HOST_DEVICE inline Position input_position(const WindowGeometry& g, std::int64_t e) {
  std::int64_t pixel = e / g.input_channels;
  return {pixel / (g.input_width * g.input_height), pixel / g.input_width % g.input_height,
          pixel % g.input_width, e % g.input_channels};
}

KERAS_HOST_DEVICE inline Position output_position(const WindowGeometry& g, std::int64_t pixel) {
  return {pixel / (g.output_width * g.output_height), pixel / g.output_width % g.output_height,
          pixel % g.output_width, 0};
}

// The patch-matrix element e of `input` (batch, height, width, channels); 0 in the padding.
template <typename T>
KERAS_HOST_DEVICE T patch_element(const T* input, const WindowGeometry& g, std::int64_t e) {
  std::int64_t group_channels = g.channels_per_group();
  std::int64_t channel = e % group_channels;
  std::int64_t rest = e / group_channels;
  std::int64_t window_column = rest % g.window_width;
  rest /= g.window_width;
  std::int64_t window_row = rest % g.window_height;
  rest /= g.window_height;
  std::int64_t group = rest / g.output_pixels();
  Position out = output_position(g, rest % g.output_pixels());
  std::int64_t row = out.row * g.stride_height - g.pad_top + window_row * g.dilation_height;
  std::int64_t column = out.column * g.stride_width - g.pad_left + window_column * g.dilation_width;
  if (row < 0 || row >= g.input_height || column < 0 || column >= g.input_width) return T(0);
  return input[((out.image * g.input_height + row) * g.input_width + column) * g.input_channels +
               group * group_channels + channel];
}

// The output pixel whose window, at window offset (window_row, window_column), covers input
// (row, column); -1 when none does (off the stride, or outside the output).
KERAS_HOST_DEVICE inline std::int64_t covering_output(const WindowGeometry& g, std::int64_t image,
                                                      std::int64_t row, std::int64_t column,
                                                      std::int64_t window_row,
                                                      std::int64_t window_column) {
  std::int64_t row_offset = row + g.pad_top - window_row * g.dilation_height;
  std::int64_t column_offset = column + g.pad_left - window_column * g.dilation_width;
  if (row_offset < 0 || column_offset < 0) return -1;
  if (row_offset % g.stride_height != 0 || column_offset % g.stride_width != 0) return -1;
  std::int64_t output_row = row_offset / g.stride_height;
  std::int64_t output_column = column_offset / g.stride_width;
  if (output_row >= g.output_height || output_column >= g.output_width) return -1;
  return (image * g.output_height + output_row) * g.output_width + output_column;
}

// Input-gradient element e (batch, height, width, channels) from the patch matrix's gradient:
// the sum over every patch entry that read this input element.
template <typename T>
KERAS_HOST_DEVICE T input_gradient_element(const T* patch_gradient, const WindowGeometry& g,
                                           std::int64_t e) {
  Position in = input_position(g, e);
  std::int64_t group_channels = g.channels_per_group();
  std::int64_t group = in.channel / group_channels;
  std::int64_t group_channel = in.channel % group_channels;
  T total = T(0);
  for (std::int64_t window_row = 0; window_row < g.window_height; ++window_row) {
    for (std::int64_t window_column = 0; window_column < g.window_width; ++window_column) {
      std::int64_t pixel = covering_output(g, in.image, in.row, in.column, window_row, window_column);
      if (pixel < 0) continue;
      std::int64_t patch_row = group * g.output_pixels() + pixel;
      total += patch_gradient[((patch_row * g.window_height + window_row) * g.window_width +
                               window_column) * group_channels + group_channel];
    }
  }
  return total;
}

// The input offset of the element a max-pooling window selects: the first NaN, else the first
// maximum in (row, column) order, as XLA's select-and-scatter with `>=` picks it.
template <typename T>
KERAS_HOST_DEVICE std::int64_t max_pool_selection(const T* input, const WindowGeometry& g,
                                                  std::int64_t pixel, std::int64_t channel) {
  Position out = output_position(g, pixel);
  std::int64_t selected = -1;
  for (std::int64_t window_row = 0; window_row < g.window_height; ++window_row) {
    std::int64_t row = out.row * g.stride_height - g.pad_top + window_row;
    if (row < 0 || row >= g.input_height) continue;
    for (std::int64_t window_column = 0; window_column < g.window_width; ++window_column) {
      std::int64_t column = out.column * g.stride_width - g.pad_left + window_column;
      if (column < 0 || column >= g.input_width) continue;
      std::int64_t at =
          ((out.image * g.input_height + row) * g.input_width + column) * g.input_channels + channel;
      if (scalar::is_nan(input[at])) return at;
      if (selected < 0 || input[at] > input[selected]) selected = at;
    }
  }
  return selected;
}

// How many input elements (not padding) the window of output `pixel` covers.
KERAS_HOST_DEVICE inline std::int64_t window_count(const WindowGeometry& g, std::int64_t pixel) {
  Position out = output_position(g, pixel);
  std::int64_t first_row = out.row * g.stride_height - g.pad_top;
  std::int64_t first_column = out.column * g.stride_width - g.pad_left;
  std::int64_t rows = 0, columns = 0;
  for (std::int64_t r = first_row; r < first_row + g.window_height; ++r) {
    rows += (r >= 0 && r < g.input_height) ? 1 : 0;
  }
  for (std::int64_t c = first_column; c < first_column + g.window_width; ++c) {
    columns += (c >= 0 && c < g.input_width) ? 1 : 0;
  }
  return rows * columns;
}

// Pooled element e (batch, out_height, out_width, channels). Average divides by the elements
// the window covers, not counting padding (Keras' JAX backend does the same for "same").
template <typename T>
KERAS_HOST_DEVICE T pool_element(bool max, const T* input, const WindowGeometry& g, std::int64_t e) {
  std::int64_t channel = e % g.input_channels;
  std::int64_t pixel = e / g.input_channels;
  if (max) return input[max_pool_selection(input, g, pixel, channel)];
  Position out = output_position(g, pixel);
  T total = T(0);
  for (std::int64_t window_row = 0; window_row < g.window_height; ++window_row) {
    std::int64_t row = out.row * g.stride_height - g.pad_top + window_row;
    if (row < 0 || row >= g.input_height) continue;
    for (std::int64_t window_column = 0; window_column < g.window_width; ++window_column) {
      std::int64_t column = out.column * g.stride_width - g.pad_left + window_column;
      if (column < 0 || column >= g.input_width) continue;
      total += input[((out.image * g.input_height + row) * g.input_width + column) * g.input_channels +
                     channel];
    }
  }
  return total / T(window_count(g, pixel));
}

// Pooling's input-gradient element e: the sum over the windows that cover it of the output
// gradient, for max only where the window selected this element, for average divided by the
// window's count.
template <typename T>
KERAS_HOST_DEVICE T pool_gradient_element(bool max, const T* input, const T* output_gradient,
                                          const WindowGeometry& g, std::int64_t e) {
  Position in = input_position(g, e);
  T total = T(0);
  for (std::int64_t window_row = 0; window_row < g.window_height; ++window_row) {
    for (std::int64_t window_column = 0; window_column < g.window_width; ++window_column) {
      std::int64_t pixel = covering_output(g, in.image, in.row, in.column, window_row, window_column);
      if (pixel < 0) continue;
      T gradient = output_gradient[pixel * g.input_channels + in.channel];
      if (max) {
        if (max_pool_selection(input, g, pixel, in.channel) == e) total += gradient;
      } else {
        total += gradient / T(window_count(g, pixel));
      }
    }
  }
  return total;
}

}  // namespace keras::window
