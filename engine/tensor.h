// Tensor: a cheap handle (shared_ptr) to a dense, contiguous, row-major array of one dtype on one
// device, plus what reverse-mode autograd needs (requires_grad, the accumulated gradient and the
// node that produced it). Copying a Tensor copies the handle, not the data, as in PyTorch.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "engine/allocator.h"
#include "engine/device.h"
#include "engine/dtype.h"
#include "engine/shape.h"

namespace keras {

class Tensor;
struct GradientNode;

// Something a higher layer knows about a tensor that the engine carries but never interprets:
// the distribution module records here how a local tensor lies in a global one (its sharding).
// An op with an annotated operand hands itself to the handler a higher layer installed
// (engine/op_dispatch.h); with none installed (code that computes on local blocks itself),
// element-wise ops copy their input's annotation to their output (see ops/elementwise.cpp).
struct TensorAnnotation {
  virtual ~TensorAnnotation() = default;
  virtual bool equals(const TensorAnnotation& other) const = 0;
  virtual std::string to_string() const = 0;
  // The shape code written on whole tensors reads (Tensor::shape() inside a handler's scope):
  // a sharding's global shape, with the batch rows this process holds.
  virtual const Shape& logical_shape() const = 0;
};

struct TensorImpl {
  std::shared_ptr<Storage> storage;
  Shape shape;
  DType dtype = DType::float32;
  bool requires_grad = false;
  std::shared_ptr<GradientNode> gradient_node;  // null for leaves and constants
  std::shared_ptr<TensorImpl> grad;             // accumulated gradient of a leaf
  std::string name;                             // variable path, for error messages
  std::shared_ptr<const TensorAnnotation> annotation;  // null unless a higher layer set one
};

class Tensor {
 public:
  Tensor() = default;  // an undefined tensor; defined() is false
  explicit Tensor(std::shared_ptr<TensorImpl> impl) : impl_(std::move(impl)) {}

  // Creation. Data given as a vector is copied; its length must equal the shape's size.
  static Tensor empty(const Shape& shape, DType dtype = float32, Device device = Device::cpu());
  static Tensor zeros(const Shape& shape, DType dtype = float32, Device device = Device::cpu());
  static Tensor ones(const Shape& shape, DType dtype = float32, Device device = Device::cpu());
  static Tensor full(const Shape& shape, double value, DType dtype = float32,
                     Device device = Device::cpu());
  static Tensor scalar(double value, DType dtype = float32);
  template <typename T>
  static Tensor from_vector(const std::vector<T>& values, const Shape& shape);
  // 0, 1, …, count-1 as int64 (or `dtype`).
  static Tensor arange(std::int64_t count, DType dtype = int64);
  // A tensor of `shape` whose data are elements [offset, offset + size) of `base`'s data
  // (no copy; writes through either are seen by both).
  static Tensor view_of(const Tensor& base, std::int64_t offset, const Shape& shape);

  bool defined() const { return impl_ != nullptr; }
  // The shape code written on whole tensors sees, as DTensor's: while a sharded-op handler is
  // installed (inside a layer's call() under a distribution, engine/op_dispatch.h), an annotated
  // tensor's logical shape (global in every dimension but the batch rows this process holds);
  // everywhere else, and always for an unannotated tensor, the shape of the stored block.
  // Kernels run with no handler installed, so they read the block they compute on.
  const Shape& shape() const;
  int rank() const { return static_cast<int>(shape().size()); }
  std::int64_t dim(int axis) const;  // negative axes count from the end
  std::int64_t size() const { return shape_size(shape()); }
  // The stored block: its shape, and the block itself as a tensor without annotation whose
  // gradient flows back to this one (DTensor's to_local()); for an unannotated tensor, itself.
  const Shape& local_shape() const;
  Tensor local() const;
  DType dtype() const;
  Device device() const;
  std::size_t nbytes() const { return static_cast<std::size_t>(shape_size(local_shape())) * dtype_size(dtype()); }

  // Raw element access on CPU tensors; T must match the dtype (checked).
  template <typename T>
  T* data();
  template <typename T>
  const T* data() const;
  void* raw_data() const;
  template <typename T>
  std::vector<T> to_vector() const;  // converts from any dtype, copies from any device
  double item() const;               // the single element of a size-1 tensor

  Tensor to(Device device) const;
  Tensor astype(DType dtype) const;  // differentiable between floating dtypes
  Tensor clone() const;              // a new tensor with a copy of the data, no graph
  Tensor detach() const;             // same data (and annotation), cut from the graph
  // Copies `source` (same shape and dtype) into this tensor's storage, outside autograd. Inside
  // a layer's call under a distribution, `source` first moves to this tensor's layout.
  void assign(const Tensor& source);

  // Autograd.
  bool requires_grad() const;
  Tensor& set_requires_grad(bool value);
  Tensor grad() const;  // undefined until backward() reached this tensor
  void set_grad(const Tensor& gradient);
  void zero_grad();
  // Backpropagates from this scalar (or with an explicit seed gradient of the same shape).
  void backward(const Tensor& seed = Tensor()) const;
  const std::shared_ptr<GradientNode>& gradient_node() const;

  const std::string& name() const;
  Tensor& set_name(std::string name);
  // The annotation a higher layer attached (null if none); see TensorAnnotation.
  const std::shared_ptr<const TensorAnnotation>& annotation() const;
  Tensor& set_annotation(std::shared_ptr<const TensorAnnotation> annotation);
  std::string to_string(int max_elements = 8) const;

  TensorImpl* impl() const { return impl_.get(); }
  bool same_as(const Tensor& other) const { return impl_ == other.impl_; }

 private:
  void check_defined(const char* what) const;
  std::shared_ptr<TensorImpl> impl_;
};

// A node in the autograd graph: the inputs of the op that produced a tensor and the op's
// gradient rule, which maps the output's gradient to one gradient per input (an undefined
// Tensor where an input needs none).
struct GradientNode {
  std::string op_name;
  std::vector<Tensor> inputs;
  std::function<std::vector<Tensor>(const Tensor& output_gradient)> backward;
};

// Whether ops record the graph. Off inside NoGradGuard (and inside gradient rules).
bool grad_enabled();
class NoGradGuard {
 public:
  NoGradGuard();
  ~NoGradGuard();
  NoGradGuard(const NoGradGuard&) = delete;
  NoGradGuard& operator=(const NoGradGuard&) = delete;

 private:
  bool previous_;
};

// Called by every op: when grad mode is on and some input requires grad, attaches a node with
// the gradient rule to `output` and returns it.
Tensor record_gradient(Tensor output, const char* op_name, std::vector<Tensor> inputs,
                       std::function<std::vector<Tensor>(const Tensor&)> backward);

// Reverse-mode pass from `roots` with seed gradients. Each leaf that requires grad gets its
// gradient accumulated into grad(); `on_leaf_ready`, when given, is called once per leaf as soon
// as its gradient is final, in a deterministic order — the hook a data-parallel reducer uses to
// start communication while the rest of the backward pass is still running.
void backward(const std::vector<Tensor>& roots, const std::vector<Tensor>& seeds,
              const std::function<void(const Tensor& leaf)>& on_leaf_ready = {});

}  // namespace keras
