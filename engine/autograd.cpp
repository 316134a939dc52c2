// Reverse-mode automatic differentiation over the graph of GradientNodes that ops record.
// Gradients flow from the roots in dependency order: a tensor's gradient is passed on only
// when every op that consumed it has contributed, so each gradient rule runs exactly once.
#include <unordered_map>
#include <vector>

#include "engine/errors.h"
#include "engine/ops.h"
#include "engine/op_dispatch.h"
#include "engine/tensor.h"

namespace keras {
namespace {
thread_local bool grad_mode_enabled = true;

bool takes_part(const Tensor& tensor) {
  return tensor.defined() && (tensor.requires_grad() || tensor.gradient_node() != nullptr);
}
}  // namespace

bool grad_enabled() { return grad_mode_enabled; }

NoGradGuard::NoGradGuard() : previous_(grad_mode_enabled) { grad_mode_enabled = false; }
NoGradGuard::~NoGradGuard() { grad_mode_enabled = previous_; }

Tensor record_gradient(Tensor output, const char* op_name, std::vector<Tensor> inputs,
                       std::function<std::vector<Tensor>(const Tensor&)> backward_rule) {
  if (!grad_mode_enabled) return output;
  bool any = false;
  for (const Tensor& input : inputs) any = any || takes_part(input);
  if (!any) return output;
  auto node = std::make_shared<GradientNode>();
  node->op_name = op_name;
  node->inputs = std::move(inputs);
  node->backward = std::move(backward_rule);
  output.impl()->gradient_node = std::move(node);
  output.impl()->requires_grad = true;
  return output;
}

void Tensor::backward(const Tensor& seed) const {
  if (!takes_part(*this)) {
    throw ValueError("backward() on a tensor that does not require gradients: no input of the "
                     "computation had requires_grad set (or it ran under NoGradGuard)");
  }
  Tensor start = seed;
  if (!start.defined()) {
    if (size() != 1) {
      throw ValueError(str("backward() without a seed needs a scalar, got shape ",
                           shape_to_string(shape()), "; pass a seed gradient of that shape"));
    }
    start = Tensor::ones(shape(), dtype(), device());
  }
  keras::backward({*this}, {start});
}

void backward(const std::vector<Tensor>& roots, const std::vector<Tensor>& seeds,
              const std::function<void(const Tensor& leaf)>& on_leaf_ready) {
  if (roots.size() != seeds.size()) {
    throw ValueError(str("backward: got ", roots.size(), " roots and ", seeds.size(),
                         " seeds; expected one seed per root"));
  }
  NoGradGuard no_grad;  // gradient rules are not themselves differentiated
  // Gradient rules compute on the local blocks their forward ops saw (op_dispatch.h): no
  // sharded-op handler takes them over.
  ShardedOpScope local_blocks(nullptr);

  // Count, for each tensor in the graph, how many recorded uses still owe it a gradient.
  std::unordered_map<TensorImpl*, int> pending_uses;
  std::vector<Tensor> stack;
  std::unordered_map<TensorImpl*, bool> visited;
  for (const Tensor& root : roots) {
    if (takes_part(root)) stack.push_back(root);
  }
  while (!stack.empty()) {
    Tensor tensor = stack.back();
    stack.pop_back();
    if (visited[tensor.impl()]) continue;
    visited[tensor.impl()] = true;
    if (const auto& node = tensor.gradient_node()) {
      for (const Tensor& input : node->inputs) {
        if (!takes_part(input)) continue;
        pending_uses[input.impl()] += 1;
        stack.push_back(input);
      }
    }
  }

  std::unordered_map<TensorImpl*, Tensor> gradients;
  auto accumulate = [&](const Tensor& tensor, const Tensor& gradient) {
    Tensor& slot = gradients[tensor.impl()];
    slot = slot.defined() ? ops::add(slot, gradient) : gradient;
  };
  std::vector<Tensor> ready;
  for (std::size_t i = 0; i < roots.size(); ++i) {
    if (!takes_part(roots[i])) continue;
    if (seeds[i].shape() != roots[i].shape()) {
      throw ShapeError(str("backward: seed of shape ", shape_to_string(seeds[i].shape()),
                           " for a root of shape ", shape_to_string(roots[i].shape())));
    }
    accumulate(roots[i], seeds[i]);
    if (pending_uses[roots[i].impl()] == 0) ready.push_back(roots[i]);
  }

  while (!ready.empty()) {
    Tensor tensor = ready.back();
    ready.pop_back();
    auto found = gradients.find(tensor.impl());
    if (found == gradients.end()) continue;
    Tensor gradient = found->second;
    gradients.erase(found);
    const auto& node = tensor.gradient_node();
    if (!node) {
      if (tensor.requires_grad()) {
        Tensor previous = tensor.grad();
        tensor.set_grad(previous.defined() ? ops::add(previous, gradient) : gradient);
        if (on_leaf_ready) on_leaf_ready(tensor);
      }
      continue;
    }
    std::vector<Tensor> input_gradients = node->backward(gradient);
    if (input_gradients.size() != node->inputs.size()) {
      throw Error(str("internal error: the gradient rule of '", node->op_name, "' returned ",
                      input_gradients.size(), " gradients for ", node->inputs.size(), " inputs"));
    }
    for (std::size_t i = 0; i < node->inputs.size(); ++i) {
      const Tensor& input = node->inputs[i];
      if (!takes_part(input)) continue;
      const Tensor& input_gradient = input_gradients[i];
      if (input_gradient.defined()) {
        if (input_gradient.shape() != input.shape()) {
          throw Error(str("internal error: the gradient rule of '", node->op_name,
                          "' gave input ", i, " a gradient of shape ",
                          shape_to_string(input_gradient.shape()), " for an input of shape ",
                          shape_to_string(input.shape())));
        }
        accumulate(input, input_gradient);
      }
      if (--pending_uses[input.impl()] == 0) ready.push_back(input);
    }
  }
}

}  // namespace keras
