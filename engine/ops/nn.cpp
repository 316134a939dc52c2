// softmax and log_softmax, computed stably (max subtracted) in one fused kernel each, with
// fused gradient kernels: the composed form allocated five temporaries per call.
#include "engine/ops/op_helpers.h"

namespace keras::ops {
namespace {
Tensor softmax_family(const Tensor& x, std::int64_t axis_in, bool log, const char* name) {
  if (detail::goes_through_handler({&x})) {
    return detail::through_handler({name, OpFamily::along_axis, {x},
                                    [axis_in, log, name](const std::vector<Tensor>& local) { return softmax_family(local[0], axis_in, log, name); }, {axis_in}});
  }
  detail::check_defined(x, name, "x");
  detail::check_floating(x, name);
  if (x.rank() == 0) throw ValueError(str(name, " needs a tensor of rank >= 1, got a scalar"));
  int axis = normalize_axis(axis_in, x.rank(), name);
  Tensor out = Tensor::empty(x.shape(), x.dtype(), x.device());
  backend_for(x.device()).softmax(x, axis, log, out);
  Tensor saved = out.detach();
  return record_gradient(out, name, {x}, [saved, axis, log](const Tensor& g) {
    Tensor input_gradient = Tensor::empty(saved.shape(), saved.dtype(), saved.device());
    backend_for(saved.device()).softmax_gradient(saved, g, axis, log, input_gradient);
    return std::vector<Tensor>{input_gradient};
  });
}
}  // namespace

Tensor softmax(const Tensor& x, std::int64_t axis) {
  return softmax_family(x, axis, false, "softmax");
}
Tensor log_softmax(const Tensor& x, std::int64_t axis) {
  return softmax_family(x, axis, true, "log_softmax");
}

}  // namespace keras::ops
