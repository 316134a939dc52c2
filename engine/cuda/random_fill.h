// GPU random fill: element i of the output is random_element(spec, its index in the full
// tensor), the function the CPU fill calls (engine/random_element.h).
#pragma once
#include "engine/cuda/kernels.h"
#include "engine/random_element.h"

namespace keras::gpu_kernels {

template <typename T>
struct RandomBody {
  RandomSpec spec;
  IndexMap<2> map;  // index in the full tensor, element of out
  std::int64_t base;
  T* out;
  KERAS_HOST_DEVICE void operator()(std::int64_t i) const {
    std::int64_t at[2];
    map.offsets(i, at);
    out[at[1]] = static_cast<T>(random_element(spec, static_cast<std::uint64_t>(base + at[0])));
  }
};

template <class Launcher>
void random(Launcher& launcher, const RandomSpec& spec, const Shape& full_shape,
            const Shape& starts, Tensor& out) {
  std::vector<std::int64_t> full_strides = row_major_strides(full_shape);
  std::int64_t base = 0;
  for (std::size_t i = 0; i < starts.size(); ++i) base += starts[i] * full_strides[i];
  IndexMap<2> map =
      index_map(make_plan<2>(out.shape(), {full_strides, row_major_strides(out.shape())}), "random");
  dispatch_floating(out.dtype(), "random", [&](auto zero) {
    using T = decltype(zero);
    launcher.for_each(out.size(), RandomBody<T>{spec, map, base, static_cast<T*>(out.raw_data())});
  });
}

}  // namespace keras::gpu_kernels
