// Reading Keras layer configs field by field, and the shared pieces of writing them.
#include "layers/layer_config.h"

#include <algorithm>
#include <cctype>
#include <cstdint>

#include "engine/errors.h"
#include "layers/activations.h"

namespace keras {
namespace {

// Keras' activation names this engine computes (layers/activations.h).
const std::vector<std::string> kActivations = {"linear", "relu", "gelu", "tanh", "sigmoid",
                                               "softmax", "log_softmax", "silu", "swish",
                                               "leaky_relu", "elu", "selu", "softplus"};

std::string type_name(const nlohmann::json& value) { return value.type_name(); }

}  // namespace

LayerConfig::LayerConfig(const nlohmann::json& config, std::string class_name)
    : class_name_(std::move(class_name)) {
  if (!config.is_object()) {
    throw FileFormatError(str("load_model: the config of a ", class_name_, " layer is a JSON ",
                              type_name(config), "; expected an object"));
  }
  config_ = config;
}

std::string LayerConfig::where() const {
  std::string name;
  if (auto found = config_.find("name"); found != config_.end() && found->is_string()) {
    name = found->get<std::string>();
  }
  return name.empty() ? str("load_model: a ", class_name_, " layer")
                      : str("load_model: layer '", name, "' (", class_name_, ")");
}

const nlohmann::json* LayerConfig::find(const char* key) {
  read_.emplace_back(key);
  auto found = config_.find(key);
  if (found == config_.end() || found->is_null()) return nullptr;
  return &*found;
}

void LayerConfig::unsupported(const char* key, const std::string& why) const {
  throw NotImplementedError(str(where(), ": field '", key, "' ", why));
}

void LayerConfig::malformed(const char* key, const std::string& expected) const {
  auto found = config_.find(key);
  std::string got = found == config_.end() ? "nothing" : found->dump();
  if (got.size() > 200) got = got.substr(0, 200) + "...";
  throw FileFormatError(str(where(), ": field '", key, "' is ", got, "; expected ", expected));
}

std::string LayerConfig::name() {
  const nlohmann::json* value = find("name");
  if (value == nullptr) return "";
  if (!value->is_string()) malformed("name", "a string");
  return value->get<std::string>();
}

std::int64_t LayerConfig::integer(const char* key, std::optional<std::int64_t> fallback) {
  const nlohmann::json* value = find(key);
  if (value == nullptr) {
    if (!fallback) malformed(key, "an integer");
    return *fallback;
  }
  if (!value->is_number_integer() ||
      (value->is_number_unsigned() && value->get<std::uint64_t>() > std::uint64_t{INT64_MAX})) {
    malformed(key, "an integer below 2^63");
  }
  return value->get<std::int64_t>();
}

double LayerConfig::number(const char* key, std::optional<double> fallback) {
  const nlohmann::json* value = find(key);
  if (value == nullptr) {
    if (!fallback) malformed(key, "a number");
    return *fallback;
  }
  if (!value->is_number()) malformed(key, "a number");
  return value->get<double>();
}

bool LayerConfig::boolean(const char* key, std::optional<bool> fallback) {
  const nlohmann::json* value = find(key);
  if (value == nullptr) {
    if (!fallback) malformed(key, "true or false");
    return *fallback;
  }
  if (!value->is_boolean()) malformed(key, "true or false");
  return value->get<bool>();
}

std::string LayerConfig::string(const char* key, std::optional<std::string> fallback) {
  const nlohmann::json* value = find(key);
  if (value == nullptr) {
    if (!fallback) malformed(key, "a string");
    return *fallback;
  }
  if (!value->is_string()) malformed(key, "a string");
  return value->get<std::string>();
}

std::vector<std::int64_t> LayerConfig::integers(const char* key,
                                                std::optional<std::vector<std::int64_t>> fallback) {
  const nlohmann::json* value = find(key);
  if (value == nullptr) {
    if (!fallback) malformed(key, "an integer or a list of integers");
    return *fallback;
  }
  if (value->is_number_integer()) return {value->get<std::int64_t>()};
  if (!value->is_array() || value->size() > 64) malformed(key, "an integer or a list of integers");
  std::vector<std::int64_t> result;
  for (const nlohmann::json& item : *value) {
    if (!item.is_number_integer()) malformed(key, "an integer or a list of integers");
    result.push_back(item.get<std::int64_t>());
  }
  return result;
}

std::vector<std::optional<std::int64_t>> LayerConfig::shape(const char* key) {
  const nlohmann::json* value = find(key);
  if (value == nullptr || !value->is_array() || value->size() > 64) {
    malformed(key, "a shape: a list of integers or null");
  }
  std::vector<std::optional<std::int64_t>> result;
  for (const nlohmann::json& item : *value) {
    if (item.is_null()) {
      result.emplace_back();
    } else if (item.is_number_integer() && item.get<std::int64_t>() >= 0) {
      result.emplace_back(item.get<std::int64_t>());
    } else {
      malformed(key, "a shape: a list of integers (0 or more) or null");
    }
  }
  return result;
}

std::optional<nlohmann::json> LayerConfig::take(const char* key) {
  const nlohmann::json* value = find(key);
  if (value == nullptr) return std::nullopt;
  return *value;
}

void LayerConfig::only(const char* key, const std::vector<nlohmann::json>& accepted) {
  const nlohmann::json* value = find(key);
  if (value == nullptr) return;
  if (std::find(accepted.begin(), accepted.end(), *value) != accepted.end()) return;
  std::string text = value->dump();
  if (text.size() > 200) text = text.substr(0, 200) + "...";
  std::string allowed = "null";
  for (const nlohmann::json& item : accepted) allowed += " or " + item.dump();
  unsupported(key, str("= ", text, " is not supported by keras-cpp (it supports ", allowed, ")"));
}

std::string LayerConfig::activation(const char* key) {
  const nlohmann::json* value = find(key);
  if (value == nullptr) return "";
  if (!value->is_string()) {
    unsupported(key, "is not a built-in activation's name; keras-cpp cannot run a serialized function");
  }
  std::string name = value->get<std::string>();
  if (std::find(kActivations.begin(), kActivations.end(), name) == kActivations.end()) {
    unsupported(key, str("= '", name, "' is not an activation keras-cpp has"));
  }
  return name == "linear" ? "" : name;
}

initializers::InitializerPtr LayerConfig::initializer(const char* key) {
  const nlohmann::json* value = find(key);
  if (value == nullptr) return nullptr;
  std::string name;
  nlohmann::json arguments = nlohmann::json::object();
  if (value->is_string()) {
    name = value->get<std::string>();
  } else if (value->is_object() && value->contains("class_name") && (*value)["class_name"].is_string()) {
    name = to_snake_case((*value)["class_name"].get<std::string>());
    if (value->contains("config") && !(*value)["config"].is_null()) arguments = (*value)["config"];
    if (!arguments.is_object()) malformed(key, "an initializer whose config is an object");
  } else {
    malformed(key, "an initializer: a name or {\"class_name\": ..., \"config\": ...}");
  }
  std::optional<std::uint64_t> seed;
  std::vector<std::string> known;
  auto argument = [&](const char* field, double fallback) {
    known.emplace_back(field);
    auto found = arguments.find(field);
    if (found == arguments.end() || found->is_null()) return fallback;
    if (!found->is_number()) malformed(key, str("a number for the initializer's ", field));
    return found->get<double>();
  };
  known.emplace_back("seed");
  if (auto found = arguments.find("seed"); found != arguments.end() && !found->is_null()) {
    if (!found->is_number_unsigned()) malformed(key, "an integer seed (0 or more)");
    seed = found->get<std::uint64_t>();
  }
  // Keras 3.15 writes these of glorot and he initializers, null by default.
  for (const char* unused : {"input_axes", "output_axes"}) {
    known.emplace_back(unused);
    if (auto found = arguments.find(unused); found != arguments.end() && !found->is_null()) {
      unsupported(key, str("has ", unused, " = ", found->dump(), ", which keras-cpp does not support"));
    }
  }
  initializers::InitializerPtr result;
  if (name == "zeros") result = initializers::zeros();
  else if (name == "ones") result = initializers::ones();
  else if (name == "constant") result = std::make_shared<initializers::Constant>(argument("value", 0.0));
  else if (name == "glorot_uniform") result = initializers::glorot_uniform(seed);
  else if (name == "glorot_normal") result = initializers::glorot_normal(seed);
  else if (name == "he_normal") result = initializers::he_normal(seed);
  else if (name == "he_uniform") result = initializers::he_uniform(seed);
  else if (name == "random_normal") {
    double mean = argument("mean", 0.0), stddev = argument("stddev", 0.05);
    result = std::make_shared<initializers::RandomNormal>(mean, stddev, seed);
  } else if (name == "random_uniform") {
    double minval = argument("minval", -0.05), maxval = argument("maxval", 0.05);
    result = std::make_shared<initializers::RandomUniform>(minval, maxval, seed);
  } else {
    unsupported(key, str("is initializer '", name, "', which keras-cpp does not have (it has zeros, ones, ",
                         "constant, glorot_uniform, glorot_normal, he_normal, he_uniform, random_normal, ",
                         "random_uniform)"));
  }
  for (const auto& [field, unused] : arguments.items()) {
    if (std::find(known.begin(), known.end(), field) == known.end()) {
      unsupported(key, str("has the initializer argument '", field, "', which keras-cpp does not know"));
    }
  }
  return result;
}

DTypePolicy LayerConfig::dtype(const char* key) {
  const nlohmann::json* value = find(key);
  if (value == nullptr) return DTypePolicy();
  std::string name;
  if (value->is_string()) {
    name = value->get<std::string>();
  } else if (value->is_object() && value->value("class_name", "") == "DTypePolicy" &&
             value->contains("config") && (*value)["config"].is_object() &&
             (*value)["config"].contains("name") && (*value)["config"]["name"].is_string()) {
    name = (*value)["config"]["name"].get<std::string>();
  } else {
    std::string text = value->dump();
    unsupported(key, str("= ", text.substr(0, 200), " is not a dtype policy (a name or a DTypePolicy object)"));
  }
  try {
    return DTypePolicy(name);
  } catch (const ValueError& error) {
    unsupported(key, error.what());
  }
}

void LayerConfig::finish() const {
  for (const auto& [key, value] : config_.items()) {
    if (std::find(read_.begin(), read_.end(), key) == read_.end()) {
      std::string text = value.dump();
      if (text.size() > 200) text = text.substr(0, 200) + "...";
      throw NotImplementedError(str(where(), ": field '", key, "' (= ", text,
                                    ") is not one keras-cpp knows for ", class_name_));
    }
  }
}

std::string to_snake_case(const std::string& class_name) {
  // Keras: drop non-word characters, then "_" before an upper-case letter that starts a
  // lower-case run ("(.)([A-Z][a-z]+)") and between a lower-case letter and an upper-case one
  // ("([a-z])([A-Z])"), then lower everything.
  std::string word;
  for (char c : class_name) {
    if (std::isalnum(static_cast<unsigned char>(c)) || c == '_') word += c;
  }
  auto upper = [](char c) { return c >= 'A' && c <= 'Z'; };
  auto lower = [](char c) { return c >= 'a' && c <= 'z'; };
  std::string first;
  for (std::size_t i = 0; i < word.size(); ++i) {
    if (i > 0 && upper(word[i]) && i + 1 < word.size() && lower(word[i + 1])) first += '_';
    first += word[i];
  }
  std::string second;
  for (std::size_t i = 0; i < first.size(); ++i) {
    if (i > 0 && lower(first[i - 1]) && upper(first[i])) second += '_';
    second += first[i];
  }
  for (char& c : second) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return second;
}

std::string from_snake_case(const std::string& name) {
  std::string result;
  bool upper = true;
  for (char c : name) {
    if (c == '_') {
      upper = true;
      continue;
    }
    result += upper ? static_cast<char>(std::toupper(static_cast<unsigned char>(c))) : c;
    upper = false;
  }
  return result;
}

namespace config_json {

nlohmann::json serialized(const std::string& module, const std::string& class_name, nlohmann::json config) {
  return {{"module", module}, {"class_name", class_name}, {"config", std::move(config)},
          {"registered_name", nullptr}};
}

nlohmann::json dtype_policy(const DTypePolicy& policy) {
  return serialized("keras", "DTypePolicy", {{"name", policy.name()}});
}

nlohmann::json initializer(const initializers::InitializerPtr& initializer, const std::string& default_name) {
  std::string name = initializer ? initializer->name() : default_name;
  nlohmann::json config = nlohmann::json::object();
  if (auto* constant = dynamic_cast<const initializers::Constant*>(initializer.get())) {
    name = constant->value() == 0.0 ? "zeros" : constant->value() == 1.0 ? "ones" : "constant";
    if (name == "constant") config["value"] = constant->value();
  }
  // The seed stays unwritten (null): the weights come with the file, and our 64-bit seeds
  // (drawn when none was given) are not ones JAX's keys take.
  if (name != "zeros" && name != "ones" && name != "constant") config["seed"] = nullptr;
  if (auto* scaling = dynamic_cast<const initializers::VarianceScaling*>(initializer.get());
      scaling != nullptr && name == "variance_scaling") {
    config["scale"] = scaling->scale();
    config["mode"] = scaling->mode();
    config["distribution"] = scaling->distribution_kind() == "normal" ? "untruncated_normal" : scaling->distribution_kind();
  }
  if (auto* uniform = dynamic_cast<const initializers::RandomUniform*>(initializer.get())) {
    config["minval"] = uniform->minval();
    config["maxval"] = uniform->maxval();
  }
  if (auto* normal = dynamic_cast<const initializers::RandomNormal*>(initializer.get())) {
    config["mean"] = normal->mean();
    config["stddev"] = normal->stddev();
  }
  // Keras' class name: glorot_uniform -> GlorotUniform, he_normal -> HeNormal.
  return serialized("keras.initializers", from_snake_case(name), std::move(config));
}

std::string activation(const std::string& name) { return name.empty() ? "linear" : name; }

}  // namespace config_json
}  // namespace keras
