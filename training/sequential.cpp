// Sequential: calls its layers in order.
#include "engine/errors.h"
#include "training/model.h"

namespace keras {

Sequential::Sequential(std::vector<AnyLayer> layers, const std::string& name)
    : Model(name, "sequential") {
  for (AnyLayer& layer : layers) add(std::move(layer));
}

void Sequential::add(AnyLayer layer) {
  if (built()) {
    throw ValueError(str("Sequential '", this->name(),
                         "' is already built; add layers before its first call"));
  }
  track(layer.get());
}

Tensor Sequential::call(const Tensor& inputs, bool training) {
  if (layers().empty()) throw ValueError(str("Sequential '", name(), "' has no layers"));
  Tensor outputs = inputs;
  for (const LayerPtr& layer : layers()) outputs = (*layer)(outputs, training);
  return outputs;
}

}  // namespace keras
