// Range checks of index tensors (take's indices, Embedding's inputs, sparse labels) that do not
// stop a GPU. On the CPU an index out of range throws at once. A GPU cannot throw: its check
// kernel records the first bad index it meets in the device's error slot and the host carries
// on queueing work, so a training step never waits for the device to learn its labels were
// fine. The error is thrown by the next read from that device (Tensor::to the host, item(),
// to_vector(): fit() reads the loss once per log), with the same message the CPU gives. The
// kernels that use indices (take, its gradient, one_hot) leave a bad index's row alone on a
// GPU rather than read or write outside their tensors in the meantime.
//
// A check's message is a text with "{}" where the bad index goes. Kernels cannot carry text,
// so the texts are interned here and a kernel reports a number.
#pragma once
#include <cstdint>
#include <string>

namespace keras {

struct IndexCheck {
  std::int64_t lower = 0, upper = 0;  // indices must lie in [lower, upper)
  int message = 0;                    // the interned text, from make_index_check()
};

// An IndexCheck whose error is `message` with "{}" replaced by the index.
IndexCheck make_index_check(std::int64_t lower, std::int64_t upper, const std::string& message);

// The error text of check message `message` for `index`.
std::string index_error_message(int message, long long index);

}  // namespace keras
