// The Model API: compile, the entry points of training (handed to layers/trainer.h), summaries,
// the optimizer and its state, and weights on disk.
#include "layers/model.h"

#include <cstdio>

#include "distribution/gradient_reducer.h"
#include "distribution/runtime.h"
#include "distribution/sharded_tensor.h"
#include "engine/errors.h"
#include "engine/ops.h"
#include "io/safetensors.h"
#include "layers/checkpoint_files.h"
#include "layers/model_summary.h"
#include "layers/trainer.h"

namespace keras {

Model::Model(const std::string& name, const std::string& default_prefix)
    : Layer(default_prefix, name) {}

void Model::compile(std::shared_ptr<optimizers::Optimizer> optimizer, LossSpec loss,
                    const std::vector<std::string>& metrics) {
  if (!optimizer) throw ValueError("compile: optimizer is null");
  if (!loss.get()) throw ValueError("compile: loss is null");
  for (const std::string& metric : metrics) metrics::get(metric, loss.get()->sparse_labels());
  optimizer_ = std::move(optimizer);
  loss_ = loss.get();
  metric_names_ = metrics;
}

void Model::compile(const std::string& optimizer, LossSpec loss,
                    const std::vector<std::string>& metrics) {
  compile(optimizers::get(optimizer), std::move(loss), metrics);
}

optimizers::Optimizer& Model::optimizer() {
  check_compiled("optimizer()");
  return *optimizer_;
}

void Model::check_compiled(const char* what) const {
  if (!optimizer_ || !loss_) {
    throw ValueError(str(what, ": model '", name(), "' must be compiled first; call ",
                         "compile(optimizer, loss, metrics)"));
  }
}

History Model::fit(const Tensor& x, const Tensor& y, const FitOptions& options) {
  return Trainer(*this).fit(x, y, options);
}

std::map<std::string, double> Model::evaluate(const Tensor& x, const Tensor& y,
                                              const EvaluateOptions& options) {
  return Trainer(*this).evaluate(x, y, options);
}

Tensor Model::predict(const Tensor& x, std::int64_t batch_size) {
  return Trainer(*this).predict(x, batch_size);
}

double Model::train_on_batch(const Tensor& x, const Tensor& y) {
  return Trainer(*this).train_on_batch(x, y);
}

void Model::gather_optimizer_state() {
  if (gradient_reducer_ && optimizer_) gradient_reducer_->gather_optimizer_state(*optimizer_);
}

double Model::last_gradient_sync_seconds() const {
  return gradient_reducer_ ? gradient_reducer_->last_communication_seconds() : 0.0;
}

void Model::resume_training_from(TrainingPosition position) { resume_from_ = std::move(position); }

std::string Model::summary_text() { return keras::summary_text(*this, last_step_collectives_); }

void Model::summary() {
  std::string text = summary_text();
  if (distribution::process_id() == 0) std::fputs(text.c_str(), stdout);
}

namespace {
void check_weights_path(const std::string& path, const char* what) {
  const std::string suffix = ".safetensors";
  if (path.size() < suffix.size() ||
      path.compare(path.size() - suffix.size(), suffix.size(), suffix) != 0) {
    throw ValueError(str(what, ": the file name must end in '.safetensors', got '", path, "'"));
  }
}
}  // namespace

void Model::save_weights(const std::string& path) {
  check_weights_path(path, "save_weights");
  check_built("save_weights");
  // Full tensors, whatever the distribution. A replicated model is written by whichever
  // process calls this (each write is a private temporary renamed over the target, so several
  // processes writing the same bytes is safe, and one alone — the usual `if chief` — is too).
  // A sharded model is gathered, which every process must take part in; then process 0 writes
  // and the others learn whether it succeeded, so no process goes on to load a file that is
  // not there.
  std::vector<std::pair<std::string, Tensor>> tensors;
  bool gathered = false;
  {
    NoGradGuard no_grad;
    for (Variable* variable : variables()) {
      gathered = gathered || distribution::sharding_of(variable->value).has_value();
      tensors.emplace_back(variable->path(), checkpoint::full_tensor(variable->value, variable->value));
    }
  }
  checkpoint::write_file(path, tensors, {{"format", "keras-cpp"}, {"model", name()}}, gathered,
                         "save_weights");
}

void Model::load_weights(const std::string& path) {
  check_weights_path(path, "load_weights");
  check_built("load_weights");
  auto loaded = io::load_safetensors(path);
  std::map<std::string, Tensor> by_name(loaded.begin(), loaded.end());
  std::vector<Variable*> model_variables = variables();
  // Check everything before changing anything, so a bad file leaves the model as it was.
  for (Variable* variable : model_variables) {
    auto found = by_name.find(variable->path());
    if (found == by_name.end()) {
      throw ValueError(str("load_weights: '", path, "' has no weight '", variable->path(),
                           "', which model '", name(), "' needs"));
    }
    if (found->second.shape() != variable->global_shape()) {
      throw ShapeError(str("load_weights: weight '", variable->path(), "' in '", path,
                           "' has shape ", shape_to_string(found->second.shape()),
                           " but the model expects ", shape_to_string(variable->global_shape())));
    }
    if (!is_floating(found->second.dtype())) {
      throw DTypeError(str("load_weights: weight '", variable->path(), "' in '", path, "' is ",
                           dtype_name(found->second.dtype()), "; expected a float dtype"));
    }
  }
  if (by_name.size() != model_variables.size()) {
    for (const auto& [key, value] : by_name) {
      bool used = false;
      for (Variable* variable : model_variables) used = used || variable->path() == key;
      if (!used) {
        throw ValueError(str("load_weights: '", path, "' has weight '", key, "', which model '",
                             name(), "' does not have"));
      }
    }
  }
  NoGradGuard no_grad;
  for (Variable* variable : model_variables) {
    // A sharded variable keeps its own block of the full tensor in the file.
    Tensor block = checkpoint::local_block(by_name[variable->path()], variable->value);
    variable->value.assign(ops::cast(block, variable->value.dtype()));
  }
}

}  // namespace keras
