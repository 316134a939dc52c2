// model.summary() and the plan's warnings (see the header).
#include "training/model_summary.h"

#include <algorithm>
#include <cstdio>

#include "distribution/api/distribution.h"
#include "distribution/runtime/runtime.h"
#include "distribution/sharding/sharded_tensor.h"
#include "distribution/sharding/sharding_propagator.h"
#include "engine/errors.h"
#include "training/model.h"

namespace keras {
namespace {

std::string thousands(std::int64_t value) {
  std::string digits = std::to_string(value), out;
  for (std::size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return out;
}

// Keras' byte format (summary_utils.readable_memory_size): powers of 1024, two decimals, so
// the 784-512-256-10 MLP's 535,818 float32 parameters read "2.04 MB".
std::string readable_bytes(double bytes) {
  const char* units[] = {"B", "KB", "MB", "GB", "TB"};
  int unit = 0;
  while (bytes >= 1024.0 && unit < 4) {
    bytes /= 1024.0;
    ++unit;
  }
  char text[32];
  std::snprintf(text, sizeof text, "%.2f %s", bytes, units[unit]);
  return text;
}

std::string shape_text(const Shape& shape) {
  if (shape.empty()) return "?";
  std::string text = "(";
  for (std::size_t i = 0; i < shape.size(); ++i) {
    text += str(i ? ", " : "", shape[i] < 0 ? std::string("None") : std::to_string(shape[i]));
  }
  return text + (shape.size() == 1 ? ",)" : ")");
}

std::string pad(std::string text, std::size_t width, bool right = false) {
  // Width in characters: the box-drawing characters are 3 bytes but never inside cells.
  if (text.size() >= width) return text.substr(0, width);
  std::string fill(width - text.size(), ' ');
  return right ? fill + text : text + fill;
}

std::string repeat(const char* piece, std::size_t count) {
  std::string out;
  for (std::size_t i = 0; i < count; ++i) out += piece;
  return out;
}

std::string table(const std::vector<std::string>& header, const std::vector<std::vector<std::string>>& rows,
                  const std::vector<std::size_t>& widths, const std::vector<bool>& right) {
  auto line = [&](const char* left, const char* fill, const char* middle, const char* end) {
    std::string out = left;
    for (std::size_t c = 0; c < widths.size(); ++c) {
      out += repeat(fill, widths[c] + 2);
      out += c + 1 < widths.size() ? middle : end;
    }
    return out + "\n";
  };
  // A cell may hold several lines ("Connected to" lists one input a line, as Keras does).
  auto row = [&](const std::vector<std::string>& cells, const char* bar) {
    std::vector<std::vector<std::string>> lines(cells.size());
    std::size_t height = 1;
    for (std::size_t c = 0; c < cells.size(); ++c) {
      std::size_t start = 0;
      while (true) {
        std::size_t end = cells[c].find('\n', start);
        lines[c].push_back(cells[c].substr(start, end == std::string::npos ? std::string::npos : end - start));
        if (end == std::string::npos) break;
        start = end + 1;
      }
      height = std::max(height, lines[c].size());
    }
    std::string out;
    for (std::size_t line_index = 0; line_index < height; ++line_index) {
      out += bar;
      for (std::size_t c = 0; c < widths.size(); ++c) {
        std::string text = line_index < lines[c].size() ? lines[c][line_index] : "";
        out += str(" ", pad(text, widths[c], right[c]), " ", bar);
      }
      out += "\n";
    }
    return out;
  };
  std::string out = line("┏", "━", "┳", "┓") + row(header, "┃") + line("┡", "━", "╇", "┩");
  for (std::size_t r = 0; r < rows.size(); ++r) {
    out += row(rows[r], "│");
    if (r + 1 < rows.size()) out += line("├", "─", "┼", "┤");
  }
  return out + line("└", "─", "┴", "┘");
}

std::string layout_text(const Variable& variable) {
  std::optional<distribution::Sharding> sharding = distribution::sharding_of(variable.value);
  if (!sharding) return "replicated";
  std::vector<std::string> per_dim(variable.global_shape().size(), "None");
  const auto& names = sharding->mesh()->axis_names();
  for (std::size_t axis = 0; axis < names.size(); ++axis) {
    const auto& placement = sharding->placement(static_cast<int>(axis));
    if (placement.is_shard()) per_dim[static_cast<std::size_t>(placement.dim())] = str("'", names[axis], "'");
  }
  std::string text = "(";
  for (std::size_t d = 0; d < per_dim.size(); ++d) text += str(d ? ", " : "", per_dim[d]);
  return text + (per_dim.size() == 1 ? ",)" : ")");
}

void collect_output_paths(Layer& layer, std::vector<std::string>& paths) {
  paths.push_back(layer.path() + "/output");
  for (const LayerPtr& child : layer.layers()) collect_output_paths(*child, paths);
}

}  // namespace

std::vector<std::string> plan_warnings(Model& model) {
  std::vector<std::string> warnings;
  auto active = distribution::distribution();
  auto* parallel = dynamic_cast<distribution::ModelParallel*>(active.get());
  if (parallel != nullptr) {
    std::vector<std::string> paths;
    for (Variable* variable : model.variables()) paths.push_back(variable->path());
    collect_output_paths(model, paths);
    for (const std::string& key : parallel->layout_map().keys()) {
      distribution::LayoutPattern pattern(key);
      bool used = false;
      for (const std::string& path : paths) used = used || path == key || pattern.full_match(path);
      if (!used) {
        warnings.push_back(str("LayoutMap key '", key, "' matches no variable and no layer output of "
                               "model '", model.name(), "' (keys must match whole paths, such as '",
                               paths.empty() ? std::string("model/dense/kernel") : paths.front(), "')"));
      }
    }
  }
  for (const distribution::GatheredOperation& operation : distribution::gathered_operations()) {
    if (operation.layer == model.path() || operation.layer.rfind(model.path() + "/", 0) == 0) {
      warnings.push_back(operation.to_string());
    }
  }
  return warnings;
}

std::string summary_text(Model& model, const std::vector<distribution::CollectiveTotal>& last_step) {
  std::string out = str("Model: \"", model.name(), "\"\n");
  std::vector<std::vector<std::string>> rows;
  if (const auto& graph = model.graph()) {
    // A functional model: every layer's shapes are known from its graph, before any data, and
    // "Connected to" names each input as Keras does: layer[node][tensor].
    for (const LayerPtr& layer : graph->layers()) {
      std::vector<Shape> shapes = graph->output_shapes_of(*layer);
      std::string shape_cell;
      for (std::size_t i = 0; i < shapes.size(); ++i) shape_cell += str(i ? "\n" : "", shape_text(shapes[i]));
      std::vector<std::string> connections = graph->connections_of(*layer);
      std::string connected;
      for (std::size_t i = 0; i < connections.size(); ++i) connected += str(i ? ",\n" : "", connections[i]);
      rows.push_back({str(layer->name(), " (", layer->class_name(), ")"), shape_cell,
                      thousands(layer->count_params()), connections.empty() ? "-" : connected});
    }
    out += table({"Layer (type)", "Output Shape", "Param #", "Connected to"}, rows, {29, 20, 11, 21},
                 {false, false, true, false});
  } else {
    for (const LayerPtr& layer : model.layers()) {
      rows.push_back({str(layer->name(), " (", layer->class_name(), ")"), shape_text(layer->output_shape()),
                      thousands(layer->count_params())});
    }
    out += table({"Layer (type)", "Output Shape", "Param #"}, rows, {31, 22, 13}, {false, false, true});
  }
  std::int64_t total = 0, trainable = 0, total_bytes = 0, trainable_bytes = 0, local_bytes = 0;
  std::vector<Variable*> variables = model.variables();
  for (Variable* variable : variables) {
    std::int64_t count = shape_size(variable->global_shape());
    std::int64_t bytes = count * static_cast<std::int64_t>(dtype_size(variable->value.dtype()));
    total += count;
    total_bytes += bytes;
    local_bytes += static_cast<std::int64_t>(variable->value.nbytes());
    if (variable->trainable) {
      trainable += count;
      trainable_bytes += bytes;
    }
  }
  out += str(" Total params: ", thousands(total), " (", readable_bytes(double(total_bytes)), ")\n");
  out += str(" Trainable params: ", thousands(trainable), " (", readable_bytes(double(trainable_bytes)), ")\n");
  out += str(" Non-trainable params: ", thousands(total - trainable), " (",
             readable_bytes(double(total_bytes - trainable_bytes)), ")\n");
  auto active = distribution::distribution();
  if (!active) return out;
  out += str("\nDistribution: ", active->to_string(), " over ", distribution::num_processes(),
             distribution::num_processes() == 1 ? " process\n" : " processes\n");
  std::vector<std::vector<std::string>> variable_rows;
  for (Variable* variable : variables) {
    variable_rows.push_back({variable->path(), layout_text(*variable), shape_text(variable->value.shape()),
                             readable_bytes(double(variable->value.nbytes()))});
  }
  out += table({"Variable", "Layout", "Local shape", "Per process"}, variable_rows, {31, 18, 13, 11},
               {false, false, false, true});
  out += str(" Parameter bytes per process: ", readable_bytes(double(local_bytes)), " of ",
             readable_bytes(double(total_bytes)), " (optimizer state is shaped like the local blocks)\n");
  if (last_step.empty()) {
    out += " Collectives per training step: none recorded yet (they are counted during fit and "
           "train_on_batch)\n";
  } else {
    std::vector<std::vector<std::string>> collective_rows;
    for (const auto& total_row : last_step) {
      collective_rows.push_back({total_row.kind, total_row.group, std::to_string(total_row.count),
                                 readable_bytes(double(total_row.bytes))});
    }
    out += " Collectives in the last training step (this process):\n";
    out += table({"Collective", "Group", "Calls", "Bytes"}, collective_rows, {14, 31, 5, 11},
                 {false, false, true, true});
  }
  for (const std::string& warning : plan_warnings(model)) out += str(" warning: ", warning, "\n");
  return out;
}

}  // namespace keras
