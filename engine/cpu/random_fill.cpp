// CPU random fill: each element is computed from its index in the full tensor.
#include "engine/cpu/kernels.h"
#include "engine/cpu/strided_loops.h"

namespace keras::cpu {

void random(const RandomSpec& spec, const Shape& full_shape, const Shape& starts, Tensor& out) {
  std::vector<std::int64_t> full_strides = row_major_strides(full_shape);
  std::int64_t base = 0;
  for (std::size_t i = 0; i < starts.size(); ++i) base += starts[i] * full_strides[i];
  auto plan = make_plan<2>(out.shape(), {full_strides, row_major_strides(out.shape())});
  dispatch_floating(out.dtype(), "random", [&](auto zero) {
    using T = decltype(zero);
    T* data = static_cast<T*>(out.raw_data());
    for_each_row<2>(plan, [&](const std::array<std::int64_t, 2>& offsets,
                              const std::array<std::int64_t, 2>& strides, std::int64_t count) {
      for (std::int64_t i = 0; i < count; ++i) {
        auto index = static_cast<std::uint64_t>(base + offsets[0] + i * strides[0]);
        data[offsets[1] + i * strides[1]] = static_cast<T>(random_element(spec, index));
      }
    });
  });
}

}  // namespace keras::cpu
