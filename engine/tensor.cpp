// Tensor handle: creation, element access, device moves.
#include "engine/tensor.h"

#include <sstream>

#include "engine/backend.h"
#include "engine/errors.h"
#include "engine/gpu_provider.h"
#include "engine/op_dispatch.h"
#include "engine/ops.h"

namespace keras {

Tensor Tensor::empty(const Shape& shape, DType dtype, Device device) {
  check_valid_shape(shape, "Tensor::empty");
  auto impl = std::make_shared<TensorImpl>();
  impl->shape = shape;
  impl->dtype = dtype;
  impl->storage = std::make_shared<Storage>(shape_bytes(shape, dtype_size(dtype), "Tensor::empty"),
                                            device);
  return Tensor(std::move(impl));
}

Tensor Tensor::full(const Shape& shape, double value, DType dtype, Device device) {
  Tensor out = empty(shape, dtype, device);
  backend_for(device).fill(out, value);
  return out;
}

Tensor Tensor::zeros(const Shape& shape, DType dtype, Device device) {
  return full(shape, 0.0, dtype, device);
}

Tensor Tensor::ones(const Shape& shape, DType dtype, Device device) {
  return full(shape, 1.0, dtype, device);
}

Tensor Tensor::scalar(double value, DType dtype) { return full({}, value, dtype); }

template <typename T>
Tensor Tensor::from_vector(const std::vector<T>& values, const Shape& shape) {
  check_valid_shape(shape, "Tensor::from_vector");
  if (static_cast<std::int64_t>(values.size()) != shape_size(shape)) {
    throw ShapeError(str("Tensor::from_vector: got ", values.size(), " values for shape ",
                         shape_to_string(shape), ", which needs ", shape_size(shape)));
  }
  Tensor out = empty(shape, dtype_of<T>::value);
  T* destination = out.data<T>();
  for (std::size_t i = 0; i < values.size(); ++i) destination[i] = values[i];
  return out;
}
template Tensor Tensor::from_vector(const std::vector<float>&, const Shape&);
template Tensor Tensor::from_vector(const std::vector<double>&, const Shape&);
template Tensor Tensor::from_vector(const std::vector<std::int32_t>&, const Shape&);
template Tensor Tensor::from_vector(const std::vector<std::int64_t>&, const Shape&);
template Tensor Tensor::from_vector(const std::vector<std::uint8_t>&, const Shape&);
template Tensor Tensor::from_vector(const std::vector<bool>&, const Shape&);

Tensor Tensor::arange(std::int64_t count, DType dtype) {
  if (count < 0) throw ValueError(str("Tensor::arange: got count ", count, "; expected >= 0"));
  std::vector<std::int64_t> values(static_cast<std::size_t>(count));
  for (std::int64_t i = 0; i < count; ++i) values[i] = i;
  Tensor out = from_vector(values, {count});
  return dtype == int64 ? out : out.astype(dtype);
}

Tensor Tensor::view_of(const Tensor& base, std::int64_t offset, const Shape& shape) {
  base.check_defined("Tensor::view_of");
  check_valid_shape(shape, "Tensor::view_of");
  const std::int64_t stored = shape_size(base.local_shape());
  if (offset < 0 || offset > stored || shape_size(shape) > stored - offset) {
    throw ValueError(str("Tensor::view_of: ", shape_size(shape), " elements from offset ", offset,
                         " are outside a tensor of ", stored, " elements"));
  }
  std::size_t element = dtype_size(base.dtype());
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = std::make_shared<Storage>(base.impl()->storage,
                                            static_cast<std::size_t>(offset) * element,
                                            static_cast<std::size_t>(shape_size(shape)) * element);
  impl->shape = shape;
  impl->dtype = base.dtype();
  return Tensor(std::move(impl));
}

void Tensor::check_defined(const char* what) const {
  if (!impl_) throw ValueError(str(what, " was called on an undefined (empty-handle) Tensor"));
}

const Shape& Tensor::shape() const {
  check_defined("Tensor::shape");
  // Two loads and a branch for an unannotated tensor; a thread-local read for an annotated one.
  if (impl_->annotation && sharded_op_handler() != nullptr) return impl_->annotation->logical_shape();
  return impl_->shape;
}

const Shape& Tensor::local_shape() const {
  check_defined("Tensor::local_shape");
  return impl_->shape;
}

Tensor Tensor::local() const {
  check_defined("Tensor::local");
  if (!impl_->annotation) return *this;
  Tensor block = detach();
  block.set_annotation(nullptr);
  return record_gradient(block, "local_block", {*this},
                         [](const Tensor& gradient) { return std::vector<Tensor>{gradient}; });
}

std::int64_t Tensor::dim(int axis) const {
  return shape()[normalize_axis(axis, rank(), "Tensor::dim")];
}

DType Tensor::dtype() const {
  check_defined("Tensor::dtype");
  return impl_->dtype;
}

Device Tensor::device() const {
  check_defined("Tensor::device");
  return impl_->storage->device();
}

void* Tensor::raw_data() const {
  check_defined("Tensor::raw_data");
  return impl_->storage->data();
}

template <typename T>
T* Tensor::data() {
  return const_cast<T*>(static_cast<const Tensor&>(*this).data<T>());
}

template <typename T>
const T* Tensor::data() const {
  check_defined("Tensor::data");
  if (dtype() != dtype_of<T>::value) {
    throw DTypeError(str("Tensor::data<", dtype_name(dtype_of<T>::value), ">() on a ",
                         dtype_name(dtype()), " tensor; the element type must match the dtype"));
  }
  if (!device().is_cpu()) {
    throw ValueError(str("Tensor::data() on a tensor on ", device().to_string(),
                         "; move it to the CPU first with .to(Device::cpu())"));
  }
  return static_cast<const T*>(impl_->storage->data());
}

#define KERAS_INSTANTIATE_DATA(T)       \
  template T* Tensor::data<T>();        \
  template const T* Tensor::data<T>() const;
KERAS_INSTANTIATE_DATA(bool)
KERAS_INSTANTIATE_DATA(std::uint8_t)
KERAS_INSTANTIATE_DATA(std::int32_t)
KERAS_INSTANTIATE_DATA(std::int64_t)
KERAS_INSTANTIATE_DATA(float)
KERAS_INSTANTIATE_DATA(double)
KERAS_INSTANTIATE_DATA(BFloat16)
KERAS_INSTANTIATE_DATA(Float16)
#undef KERAS_INSTANTIATE_DATA

template <typename T>
std::vector<T> Tensor::to_vector() const {
  ShardedOpScope stored_block(nullptr);  // the values of the block this tensor stores
  Tensor host = to(Device::cpu());
  if (host.dtype() != dtype_of<T>::value) {
    Tensor converted = Tensor::empty(host.shape(), dtype_of<T>::value);
    cpu_backend().cast(host, converted);
    host = converted;
  }
  const T* values = host.data<T>();
  return std::vector<T>(values, values + host.size());
}
template std::vector<float> Tensor::to_vector() const;
template std::vector<double> Tensor::to_vector() const;
template std::vector<std::int32_t> Tensor::to_vector() const;
template std::vector<std::int64_t> Tensor::to_vector() const;
template std::vector<std::uint8_t> Tensor::to_vector() const;

double Tensor::item() const {
  ShardedOpScope stored_block(nullptr);
  if (size() != 1) {
    throw ValueError(str("Tensor::item() needs a tensor with one element, got shape ",
                         shape_to_string(shape())));
  }
  return to_vector<double>()[0];
}

Tensor Tensor::to(Device target) const {
  check_defined("Tensor::to");
  Device source = device();
  if (source == target) return *this;
  ShardedOpScope stored_block(nullptr);
  Tensor out = empty(shape(), dtype(), target);
  if (nbytes() > 0) {
    if (source.is_cpu() && target.is_gpu()) {
      gpu_provider().copy_to_device(out.raw_data(), raw_data(), nbytes(), target.index);
    } else if (source.is_gpu() && target.is_cpu()) {
      gpu_provider().copy_to_host(out.raw_data(), raw_data(), nbytes(), source.index);
    } else {
      Tensor host = to(Device::cpu());
      return host.to(target);
    }
  }
  return out;
}

Tensor Tensor::astype(DType target) const { return ops::cast(*this, target); }

Tensor Tensor::clone() const {
  ShardedOpScope stored_block(nullptr);
  Tensor out = empty(shape(), dtype(), device());
  backend_for(device()).cast(*this, out);
  return out;
}

Tensor Tensor::detach() const {
  check_defined("Tensor::detach");
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = impl_->storage;
  impl->shape = impl_->shape;
  impl->dtype = impl_->dtype;
  impl->annotation = impl_->annotation;  // the same block of the same tensor, as DTensor's detach()
  return Tensor(std::move(impl));
}

void Tensor::assign(const Tensor& source) {
  check_defined("Tensor::assign");
  // Inside a layer's call a value laid out otherwise than its target (a variable split by its
  // layout, a statistic computed on blocks) first moves to the target's layout (op_dispatch.h).
  if (ops::detail::goes_through_handler({this, &source})) {
    ops::detail::through_handler({"assign", OpFamily::assign, {*this, source}, [](const std::vector<Tensor>& local) {
                                    Tensor target = local[0];
                                    target.assign(local[1]);
                                    return target;
                                  }});
    return;
  }
  ShardedOpScope stored_blocks(nullptr);  // blocks are copied: a variable's and its new value's
  if (source.shape() != shape()) {
    throw ShapeError(str("cannot assign a tensor of shape ", shape_to_string(source.shape()),
                         " to '", name(), "' of shape ", shape_to_string(shape())));
  }
  if (source.device() != device()) {
    assign(source.to(device()));
    return;
  }
  backend_for(device()).cast(source, *this);
}

bool Tensor::requires_grad() const { return impl_ && impl_->requires_grad; }

Tensor& Tensor::set_requires_grad(bool value) {
  check_defined("Tensor::set_requires_grad");
  if (value && !is_floating(dtype())) {
    throw DTypeError(str("only floating tensors can require gradients, got ",
                         dtype_name(dtype())));
  }
  impl_->requires_grad = value;
  return *this;
}

Tensor Tensor::grad() const {
  check_defined("Tensor::grad");
  return impl_->grad ? Tensor(impl_->grad) : Tensor();
}

void Tensor::set_grad(const Tensor& gradient) {
  check_defined("Tensor::set_grad");
  impl_->grad = gradient.defined() ? gradient.detach().impl_ : nullptr;
}

void Tensor::zero_grad() {
  check_defined("Tensor::zero_grad");
  impl_->grad = nullptr;
}

const std::shared_ptr<GradientNode>& Tensor::gradient_node() const {
  check_defined("Tensor::gradient_node");
  return impl_->gradient_node;
}

const std::string& Tensor::name() const {
  static const std::string unnamed = "<unnamed>";
  return impl_ && !impl_->name.empty() ? impl_->name : unnamed;
}

Tensor& Tensor::set_name(std::string name) {
  check_defined("Tensor::set_name");
  impl_->name = std::move(name);
  return *this;
}

const std::shared_ptr<const TensorAnnotation>& Tensor::annotation() const {
  static const std::shared_ptr<const TensorAnnotation> none;
  return impl_ ? impl_->annotation : none;
}

Tensor& Tensor::set_annotation(std::shared_ptr<const TensorAnnotation> annotation) {
  check_defined("Tensor::set_annotation");
  impl_->annotation = std::move(annotation);
  return *this;
}

std::string Tensor::to_string(int max_elements) const {
  if (!defined()) return "Tensor(undefined)";
  ShardedOpScope stored_block(nullptr);
  std::ostringstream out;
  out << "Tensor(shape=" << shape_to_string(shape()) << ", dtype=" << dtype_name(dtype())
      << ", device=" << device().to_string() << ", values=[";
  std::vector<double> values = to_vector<double>();
  for (std::size_t i = 0; i < values.size() && static_cast<int>(i) < max_elements; ++i) {
    if (i > 0) out << ", ";
    out << values[i];
  }
  if (static_cast<int>(values.size()) > max_elements) out << ", …";
  out << "])";
  return out.str();
}

}  // namespace keras
