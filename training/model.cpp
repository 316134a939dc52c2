// The Model API: compile, the entry points of training (handed to training/trainer.h) and of
// weight files (saving/weight_files.h), summaries, the optimizer and its state.
#include "training/model.h"

#include <cstdio>

#include "distribution/runtime/gradient_reducer.h"
#include "distribution/runtime/runtime.h"
#include "engine/errors.h"
#include "training/model_summary.h"
#include "training/trainer.h"
#include "saving/weight_files.h"

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

void Model::save_weights(const std::string& path) {
  weight_files::check_file_name(path, "save_weights");
  check_built("save_weights");
  weight_files::save(*this, path);
}

void Model::load_weights(const std::string& path) {
  weight_files::check_file_name(path, "load_weights");
  check_built("load_weights");
  weight_files::load(*this, path);
}

}  // namespace keras
