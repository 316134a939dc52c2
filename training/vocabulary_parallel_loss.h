// Megatron's vocabulary-parallel cross-entropy: when a model's logits come out split on their
// class (vocabulary) axis under ModelParallel, sparse categorical cross-entropy from logits is
// computed on each process's block, without gathering the logits: the row maxima (for
// stability) and the sums of exponentials are all-reduced over the axis that splits the
// vocabulary, and so is the logit of each label (held by one process). Three all-reduces of
// (batch, ...) values instead of an all-gather of (batch, ..., vocabulary); the gradient stays
// local (softmax minus one-hot on each block).
#pragma once
#include <optional>

#include "engine/losses.h"
#include "engine/tensor.h"

namespace keras {

// The loss of `labels` against `logits` when that applies (a distribution is active, the logits'
// sharding splits their last axis and nothing else but the batch, and the loss is
// SparseCategoricalCrossentropy(from_logits=true)); nullopt otherwise, for the caller to gather
// the logits and use the loss itself. The value is the loss's own: the mean over this process's
// rows.
std::optional<Tensor> vocabulary_parallel_loss(const losses::Loss& loss, const Tensor& labels, const Tensor& logits);

}  // namespace keras
