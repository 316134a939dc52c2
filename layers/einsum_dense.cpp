// EinsumDense layer (see the header): the equation checked once at construction, the weights'
// shapes from the first input, the product an einsum whose sharding the contraction rule follows.
#include "layers/einsum_dense.h"

#include "layers/layer_config.h"

#include <algorithm>

#include "engine/errors.h"
#include "engine/ops.h"

namespace keras::layers {
namespace {

bool is_letter(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }
bool contains(const std::string& letters, char c) { return letters.find(c) != std::string::npos; }

}  // namespace

EinsumDense::EinsumDense(std::string equation, Shape output_shape, EinsumDenseOptions options)
    : LayerOf("einsum_dense", options.name),
      equation_(std::move(equation)),
      output_shape_(std::move(output_shape)),
      options_(std::move(options)),
      activation_(activations::get(options_.activation)) {
  std::string compact = equation_;
  compact.erase(std::remove(compact.begin(), compact.end(), ' '), compact.end());
  auto invalid = [&](const std::string& why) {
    return ValueError(str("EinsumDense: invalid einsum equation '", equation_, "': ", why,
                          ". Equations must be in the form [X],[Y]->[Z] or ...[X],[Y]->...[Z]"));
  };
  auto comma = compact.find(','), arrow = compact.find("->");
  if (comma == std::string::npos || arrow == std::string::npos || arrow < comma ||
      compact.find(',', comma + 1) != std::string::npos || compact.find("->", arrow + 2) != std::string::npos) {
    throw invalid("expected one input, one kernel and an output");
  }
  x_term_ = compact.substr(0, comma);
  kernel_term_ = compact.substr(comma + 1, arrow - comma - 1);
  output_term_ = compact.substr(arrow + 2);
  elided_ = x_term_.rfind("...", 0) == 0;
  if (elided_ != (output_term_.rfind("...", 0) == 0)) {
    throw invalid("'...' must lead both the input and the output, or neither");
  }
  if (elided_) {
    x_term_ = x_term_.substr(3);
    output_term_ = output_term_.substr(3);
  }
  for (const std::string* term : {&x_term_, &kernel_term_, &output_term_}) {
    if (term->empty() && term != &output_term_) throw invalid("an operand names no dimension");
    for (char c : *term) {
      if (!is_letter(c)) throw invalid(str("'", std::string(1, c), "' is not a dimension letter"));
      if (std::count(term->begin(), term->end(), c) > 1) {
        throw invalid(str("'", std::string(1, c), "' appears twice in one term"));
      }
    }
  }
  for (char c : output_term_) {
    if (!contains(x_term_, c) && !contains(kernel_term_, c)) {
      throw invalid(str("the output's '", std::string(1, c), "' is in neither the input nor the kernel"));
    }
  }
  for (char c : options_.bias_axes) {
    if (!contains(output_term_, c)) {
      throw ValueError(str("EinsumDense: bias dimension '", std::string(1, c), "' was requested, but is ",
                           "not part of the output spec '", output_term_, "' of '", equation_, "'"));
    }
  }
  if (output_term_.empty()) throw invalid("the output names no dimension (not even the batch's)");
  const std::size_t named_outputs = output_term_.size() - (elided_ ? 0 : 1);
  if (output_shape_.size() != named_outputs) {
    throw ValueError(str("EinsumDense: output_shape ", shape_to_string(output_shape_), " has ",
                         output_shape_.size(), " dimensions, but '", equation_, "' names ", named_outputs,
                         " output dimensions besides the batch", elided_ ? " and '...'" : ""));
  }
  for (std::int64_t dim : output_shape_) {
    if (dim < -1 || dim == 0) {
      throw ValueError(str("EinsumDense: output_shape ", shape_to_string(output_shape_),
                           " must hold positive sizes, or -1 where the input gives the size"));
    }
  }
  if (!options_.kernel_initializer) options_.kernel_initializer = initializers::glorot_uniform();
  if (!options_.bias_initializer) options_.bias_initializer = initializers::zeros();
}

EinsumDense::Terms EinsumDense::terms_for(int rank) const {
  if (!elided_) {
    if (rank != static_cast<int>(x_term_.size())) {
      throw ShapeError(str("EinsumDense '", name(), "': '", equation_, "' expects inputs of rank ",
                           x_term_.size(), ", got rank ", rank));
    }
    return {x_term_, kernel_term_, output_term_};
  }
  const int covered = rank - static_cast<int>(x_term_.size());
  if (covered < 1) {
    throw ShapeError(str("EinsumDense '", name(), "': '", equation_, "' expects inputs of rank >= ",
                         x_term_.size() + 1, " (a batch dimension under '...'), got rank ", rank));
  }
  std::string leading;
  for (char c = 'A'; c <= 'Z' && static_cast<int>(leading.size()) < covered; ++c) {
    if (!contains(x_term_ + kernel_term_ + output_term_, c)) leading += c;
  }
  if (static_cast<int>(leading.size()) < covered) {
    throw NotImplementedError(str("EinsumDense '", name(), "': '...' covers ", covered,
                                  " dimensions, more than the free capital letters"));
  }
  return {leading + x_term_, kernel_term_, leading + output_term_};
}

Shape EinsumDense::compute_output_shape(const Shape& input_shape) const {
  Terms terms = terms_for(static_cast<int>(input_shape.size()));
  const std::size_t leading = terms.output.size() - output_shape_.size();  // batch (and "...")
  Shape shape;
  for (std::size_t d = 0; d < terms.output.size(); ++d) {
    char c = terms.output[d];
    auto in_x = terms.x.find(c);
    std::int64_t given = d < leading ? -1 : output_shape_[d - leading];
    if (in_x != std::string::npos) {
      std::int64_t from_input = input_shape[in_x];
      if (given != -1 && from_input != -1 && given != from_input) {
        throw ValueError(str("EinsumDense '", name(), "': input shape and output shape do not match at ",
                             "shared dimension '", std::string(1, c), "'. Input shape is ", from_input,
                             ", and output shape is ", given));
      }
      shape.push_back(from_input);
    } else {
      if (given == -1) {
        throw ValueError(str("EinsumDense '", name(), "': the output's dimension '", std::string(1, c),
                             "' is not in the input, so output_shape must give its size, got -1 (None)"));
      }
      shape.push_back(given);
    }
  }
  return shape;
}

void EinsumDense::build(const Shape& input_shape) {
  Terms terms = terms_for(static_cast<int>(input_shape.size()));
  Shape output = compute_output_shape(input_shape);
  Shape kernel_shape;
  for (char c : terms.kernel) {
    if (auto at = terms.x.find(c); at != std::string::npos) {
      kernel_shape.push_back(input_shape[at]);
    } else if (auto out_at = terms.output.find(c); out_at != std::string::npos) {
      kernel_shape.push_back(output[out_at]);
    } else {
      throw ValueError(str("EinsumDense '", name(), "': weight dimension '", std::string(1, c),
                           "' did not have a match in either the input spec '", terms.x,
                           "' or the output spec '", terms.output, "' of '", equation_, "'"));
    }
  }
  kernel_shape_ = kernel_shape;
  kernel_ = add_weight("kernel", kernel_shape, options_.kernel_initializer);
  if (!options_.bias_axes.empty()) {
    // Keras' bias: from the first output dimension it names to the last, 1 where it is not named,
    // so that it broadcasts against the trailing dimensions.
    std::size_t first = terms.output.size();
    for (char c : options_.bias_axes) first = std::min(first, terms.output.find(c));
    Shape bias_shape;
    for (std::size_t d = first; d < terms.output.size(); ++d) {
      bias_shape.push_back(contains(options_.bias_axes, terms.output[d]) ? output[d] : 1);
    }
    bias_ = add_weight("bias", bias_shape, options_.bias_initializer);
  }
}

Tensor EinsumDense::call(const Tensor& inputs_in, bool) {
  Tensor inputs = inputs_in.dtype() == compute_dtype() ? inputs_in : ops::cast(inputs_in, compute_dtype());
  const Shape& shape = inputs.shape();  // global: the layer is written once, on whole tensors
  Terms terms = terms_for(static_cast<int>(shape.size()));
  for (std::size_t d = 0; d < terms.x.size(); ++d) {
    auto at = terms.kernel.find(terms.x[d]);
    if (at != std::string::npos && shape[d] != kernel_shape_[at]) {
      throw ShapeError(str("EinsumDense '", name(), "' was built with a kernel of shape ",
                           shape_to_string(kernel_shape_), " ('", terms.kernel, "'), which does not fit "
                           "inputs of shape ", shape_to_string(shape), " ('", terms.x, "')"));
    }
  }
  Tensor outputs = ops::einsum(terms.x + "," + terms.kernel + "->" + terms.output, inputs, kernel_);
  if (bias_.defined()) outputs = outputs + bias_;
  return activation_(outputs);
}


nlohmann::json EinsumDense::get_config() const {
  nlohmann::json config = Layer::get_config();
  nlohmann::json shape = nlohmann::json::array();
  for (std::int64_t dimension : output_shape_) shape.push_back(dimension < 0 ? nlohmann::json() : nlohmann::json(dimension));
  config["output_shape"] = shape;
  config["equation"] = equation_;
  config["activation"] = config_json::activation(options_.activation);
  config["bias_axes"] = options_.bias_axes.empty() ? nlohmann::json() : nlohmann::json(options_.bias_axes);
  config["kernel_initializer"] = config_json::initializer(options_.kernel_initializer, "glorot_uniform");
  config["bias_initializer"] = config_json::initializer(options_.bias_initializer, "zeros");
  for (const char* key : {"kernel_regularizer", "bias_regularizer", "kernel_constraint", "bias_constraint"}) config[key] = nullptr;
  return config;
}

LayerPtr EinsumDense::from_config(LayerConfig& config) {
  EinsumDenseOptions options;
  options.name = config.name();
  std::string equation = config.string("equation");
  Shape output_shape;
  std::optional<nlohmann::json> shape = config.take("output_shape");
  if (!shape) config.malformed("output_shape", "an integer or a list of integers and nulls");
  if (shape->is_number_integer()) {
    output_shape.push_back(shape->get<std::int64_t>());
  } else if (shape->is_array() && shape->size() <= 64) {
    for (const nlohmann::json& dimension : *shape) {
      if (dimension.is_null()) output_shape.push_back(-1);
      else if (dimension.is_number_integer() && dimension.get<std::int64_t>() > 0) output_shape.push_back(dimension.get<std::int64_t>());
      else config.malformed("output_shape", "an integer or a list of positive integers and nulls");
    }
  } else {
    config.malformed("output_shape", "an integer or a list of integers and nulls");
  }
  options.activation = config.activation("activation");
  options.bias_axes = config.string("bias_axes", "");
  options.kernel_initializer = config.initializer("kernel_initializer");
  options.bias_initializer = config.initializer("bias_initializer");
  for (const char* key : {"kernel_regularizer", "bias_regularizer", "kernel_constraint", "bias_constraint", "activity_regularizer", "quantization_config", "lora_rank", "lora_alpha"}) config.only(key);
  return std::make_shared<EinsumDense>(equation, output_shape, options);
}

}  // namespace keras::layers
