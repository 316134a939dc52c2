// The geometry of a 2-D sliding window over a channels_last batch (batch, height, width,
// channels): what a convolution and a pooling share. The op computes it once from the shapes and
// Keras' padding rule (engine/window_geometry.cpp) and every backend's kernel reads it, so the
// output size and the "same" padding split are decided in one place.
//
// For a convolution, `groups` splits the input channels and the filters into that many
// independent halves (keras.ops.conv infers it as channels / kernel.shape[2]); for a pooling the
// window runs over each channel alone, output_channels == input_channels and groups == 1.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "engine/host_device.h"
#include "engine/shape.h"

namespace keras {

struct WindowGeometry {
  std::int64_t batch = 0;
  std::int64_t input_height = 0, input_width = 0, input_channels = 0;
  std::int64_t output_height = 0, output_width = 0, output_channels = 0;
  std::int64_t window_height = 1, window_width = 1;
  std::int64_t stride_height = 1, stride_width = 1;
  std::int64_t dilation_height = 1, dilation_width = 1;
  // "same" pads (total) / 2 before and the rest after, as TensorFlow and JAX do.
  std::int64_t pad_top = 0, pad_left = 0, pad_bottom = 0, pad_right = 0;
  std::int64_t groups = 1;

  KERAS_HOST_DEVICE std::int64_t channels_per_group() const { return input_channels / groups; }
  KERAS_HOST_DEVICE std::int64_t filters_per_group() const { return output_channels / groups; }
  // Elements of one group's patch: window_height * window_width * channels_per_group.
  KERAS_HOST_DEVICE std::int64_t patch_size() const {
    return window_height * window_width * channels_per_group();
  }
  KERAS_HOST_DEVICE std::int64_t output_pixels() const {
    return batch * output_height * output_width;
  }
  Shape output_shape() const { return {batch, output_height, output_width, output_channels}; }
};

// Keras' padding argument: "valid" (no padding) or "same" (output = ceil(input / stride)).
enum class WindowPadding { valid, same };

// Reads "valid" / "same" (any case, as Keras lowers it); ValueError otherwise, naming `op`.
WindowPadding parse_window_padding(const std::string& padding, const char* op);

// A Keras size argument of one or two entries ((3) means (3, 3)), each >= 1; ValueError naming
// `op` and `argument` otherwise.
std::vector<std::int64_t> window_pair(const std::vector<std::int64_t>& value, const char* op,
                                      const char* argument);

// The geometry of a window of (window_height, window_width) over `input_shape` (rank 4,
// channels_last), with the output's height and width from Keras' rule. ValueError when the
// (dilated) window is larger than the padded input, naming `op`.
WindowGeometry window_geometry(const Shape& input_shape, std::int64_t window_height,
                               std::int64_t window_width, const std::vector<std::int64_t>& strides,
                               WindowPadding padding, const std::vector<std::int64_t>& dilation,
                               const char* op);

}  // namespace keras
