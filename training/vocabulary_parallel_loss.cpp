// Vocabulary-parallel cross-entropy (see the header).
#include "training/vocabulary_parallel_loss.h"

#include "distribution/redistribute.h"
#include "distribution/sharded_tensor.h"
#include "distribution/sharding_rules.h"
#include "distribution/step_context.h"
#include "engine/errors.h"
#include "engine/ops.h"

namespace keras {

std::optional<Tensor> vocabulary_parallel_loss(const losses::Loss& loss, const Tensor& labels_in, const Tensor& logits) {
  const auto* sparse = dynamic_cast<const losses::SparseCategoricalCrossentropy*>(&loss);
  if (sparse == nullptr || !sparse->from_logits()) return std::nullopt;
  const distribution::ShardingContext* context = distribution::StepContext::sharding();
  std::optional<distribution::Sharding> sharding = distribution::sharding_of(logits);
  if (!context || !sharding || sharding->has_partial() || logits.rank() < 2 || !is_floating(logits.dtype())) {
    return std::nullopt;
  }
  const int last = logits.rank() - 1;
  const int vocabulary_axis = sharding->axis_sharding(last);
  if (vocabulary_axis < 0 || vocabulary_axis == context->batch_axis) return std::nullopt;
  for (int axis = 0; axis < context->axes(); ++axis) {
    const distribution::Placement& placement = sharding->placement(axis);
    bool fine = placement.is_replicate() || axis == vocabulary_axis || (placement.is_shard() && placement.dim() == 0);
    if (!fine) return std::nullopt;  // other dimensions split too: gathered, the usual way
  }
  const char* what = "sparse_categorical_crossentropy";
  Tensor labels = labels_in;
  if (labels.rank() == logits.rank() && labels.shape().back() == 1) labels = ops::squeeze(labels, -1);
  Shape expected(logits.shape().begin(), logits.shape().end() - 1);
  if (labels.dtype() != int32 && labels.dtype() != int64) {
    throw DTypeError(str(what, ": labels must be integer class indices (int32 or int64), got ",
                         dtype_name(labels.dtype())));
  }
  if (labels.shape() != expected) {
    throw ShapeError(str(what, ": labels of shape ", shape_to_string(labels_in.shape()), " do not fit predictions of ",
                         "shape ", shape_to_string(sharding->global_shape()), "; expected labels of shape ",
                         shape_to_string(expected)));
  }
  const std::int64_t classes = sharding->global_shape().back();
  ops::check_indices(labels, 0, classes,
                     str(what, ": label {} is out of range for ", classes, " classes; expected labels in [0, ",
                         classes, ")"));
  const std::int64_t local_classes = logits.shape().back();
  const std::int64_t first = sharding->block(context->coordinates).first.back();
  std::shared_ptr<distribution::Communicator> group = context->group(vocabulary_axis);

  // Row maxima over the whole vocabulary, a constant for the gradient (the loss does not
  // depend on the shift).
  Tensor maxima;
  {
    NoGradGuard constant;
    maxima = ops::max(logits, {-1}, /*keepdims=*/true).clone();
    maxima.set_annotation(nullptr);
    group->serving(maxima.device(), what).all_reduce(maxima, distribution::ReduceOperation::max);
  }
  Tensor shifted = logits - maxima;
  // The sums of exponentials and the labels' logits are partial sums over the vocabulary axis.
  const distribution::Sharding partial = distribution::sharding_rules::reduction(*sharding, {last}, false);
  const distribution::Sharding summed = distribution::sharding_rules::resolved(partial);
  auto sum_over_vocabulary = [&](const Tensor& local) {
    return distribution::redistribute(local, partial, summed);
  };
  Tensor sums = sum_over_vocabulary(ops::sum(ops::exp(shifted), {-1}));
  Tensor device_labels = ops::cast(labels.to(logits.device()), int64);
  Tensor start = Tensor::full({}, static_cast<double>(first), int64, logits.device());
  Tensor end = Tensor::full({}, static_cast<double>(first + local_classes), int64, logits.device());
  Tensor held = ops::logical_and(ops::greater_equal(device_labels, start), ops::less(device_labels, end));
  Tensor local_labels = ops::where(held, device_labels - start, Tensor::zeros({}, int64, logits.device()));
  Tensor picked_here = ops::sum(shifted * ops::one_hot(local_labels, local_classes, shifted.dtype()), {-1}) *
                       ops::cast(held, shifted.dtype());
  Tensor picked = sum_over_vocabulary(picked_here);
  Tensor per_position = ops::log(sums) - picked;  // logsumexp - logit, both shifted by the maximum
  per_position.set_annotation(nullptr);
  return ops::mean(per_position);
}

}  // namespace keras
