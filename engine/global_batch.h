// The global batch a loss is computed over. Under a distribution each process computes its
// loss on its own rows of the global batch; the trainer scales that loss by the fraction of
// the rows it holds and sums the gradients (docs/ARCHITECTURE.md, "The life of a training step"), which
// is exact for a mean over the rows. A reduction that is not such a mean (Keras' "sum",
// "mean_with_sample_weight", and the mean over the labels an `ignore_class` keeps) needs
// global sums: the trainer installs a GlobalBatch for the step and the loss reads it. Outside
// a distributed step there is none and a loss is computed over the rows it is given.
#pragma once
#include <vector>

namespace keras {

class GlobalBatch {
 public:
  virtual ~GlobalBatch() = default;
  // Sums `values` in place over the processes that hold the global batch, each row counted
  // once (one small all-reduce). Every process of the step calls it, in the same order: the
  // loss is computed on every process, on zero rows too.
  virtual void sum(std::vector<double>& values) const = 0;
  // The fraction of the global batch's rows this process holds (0 on a process without rows).
  virtual double local_fraction() const = 0;

  // The batch of the step running on this thread, or null.
  static const GlobalBatch* current();

  class Scope {
   public:
    explicit Scope(const GlobalBatch* batch);
    ~Scope();
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;

   private:
    const GlobalBatch* previous_;
  };
};

}  // namespace keras
