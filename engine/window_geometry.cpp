// Keras' output-size and padding rule for 2-D windows (keras.ops.conv and the pools), checked
// once here for every backend.
#include "engine/window_geometry.h"

#include <algorithm>
#include <cctype>

#include "engine/errors.h"

namespace keras {

WindowPadding parse_window_padding(const std::string& padding, const char* op) {
  std::string lowered = padding;
  std::transform(lowered.begin(), lowered.end(), lowered.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  if (lowered == "valid") return WindowPadding::valid;
  if (lowered == "same") return WindowPadding::same;
  throw ValueError(str(op, ": padding must be \"valid\" or \"same\", got \"", padding, "\""));
}

std::vector<std::int64_t> window_pair(const std::vector<std::int64_t>& value, const char* op,
                                      const char* argument) {
  if (value.size() != 1 && value.size() != 2) {
    throw ValueError(str(op, ": ", argument, " must have 1 or 2 entries (height, width), got ",
                         value.size()));
  }
  std::vector<std::int64_t> pair = value.size() == 1
                                       ? std::vector<std::int64_t>{value[0], value[0]}
                                       : value;
  for (std::int64_t entry : pair) {
    if (entry < 1) {
      throw ValueError(str(op, ": ", argument, " must be positive, got (", pair[0], ", ", pair[1],
                           ")"));
    }
  }
  return pair;
}

namespace {

struct AxisWindow {
  std::int64_t output = 0, pad_before = 0, pad_after = 0;
};

AxisWindow along_axis(std::int64_t input, std::int64_t window, std::int64_t stride,
                      std::int64_t dilation, WindowPadding padding, const char* axis,
                      const char* op) {
  std::int64_t extent = (window - 1) * dilation + 1;
  AxisWindow result;
  if (padding == WindowPadding::valid) {
    if (extent > input) {
      throw ValueError(str(op, ": the window's ", axis, " of ", extent, " (size ", window,
                           ", dilation ", dilation, ") is larger than the input's ", axis, " of ",
                           input, " with padding \"valid\"; use a smaller window or padding "
                           "\"same\""));
    }
    result.output = (input - extent) / stride + 1;
    return result;
  }
  if (input == 0) {
    throw ValueError(str(op, ": the input's ", axis, " is 0; a window needs at least one element"));
  }
  result.output = (input + stride - 1) / stride;
  std::int64_t total = std::max<std::int64_t>((result.output - 1) * stride + extent - input, 0);
  result.pad_before = total / 2;
  result.pad_after = total - result.pad_before;
  return result;
}

}  // namespace

WindowGeometry window_geometry(const Shape& input_shape, std::int64_t window_height,
                               std::int64_t window_width, const std::vector<std::int64_t>& strides,
                               WindowPadding padding, const std::vector<std::int64_t>& dilation,
                               const char* op) {
  if (input_shape.size() != 4) {
    throw ValueError(str(op, " expects a rank-4 channels_last input (batch, height, width, "
                         "channels), got shape ", shape_to_string(input_shape)));
  }
  std::vector<std::int64_t> stride = window_pair(strides, op, "strides");
  std::vector<std::int64_t> rate = window_pair(dilation, op, "dilation_rate");
  WindowGeometry geometry;
  geometry.batch = input_shape[0];
  geometry.input_height = input_shape[1];
  geometry.input_width = input_shape[2];
  geometry.input_channels = input_shape[3];
  geometry.output_channels = input_shape[3];
  geometry.window_height = window_height;
  geometry.window_width = window_width;
  geometry.stride_height = stride[0];
  geometry.stride_width = stride[1];
  geometry.dilation_height = rate[0];
  geometry.dilation_width = rate[1];
  AxisWindow rows = along_axis(geometry.input_height, window_height, stride[0], rate[0], padding,
                               "height", op);
  AxisWindow columns = along_axis(geometry.input_width, window_width, stride[1], rate[1], padding,
                                  "width", op);
  geometry.output_height = rows.output;
  geometry.output_width = columns.output;
  geometry.pad_top = rows.pad_before;
  geometry.pad_bottom = rows.pad_after;
  geometry.pad_left = columns.pad_before;
  geometry.pad_right = columns.pad_after;
  return geometry;
}

}  // namespace keras
