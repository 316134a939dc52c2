// .keras archives through libzip: writing the three entries, and reading them with limits.
#include "saving/keras_archive.h"

#include <unistd.h>
#include <zip.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cmath>
#include <cstring>
#include <ctime>
#include <exception>
#include <filesystem>
#include <limits>
#include <map>
#include <optional>

#include "distribution/runtime/runtime.h"
#include "distribution/runtime/shared_outcome.h"
#include "engine/allocator.h"
#include "engine/errors.h"
#include "engine/losses.h"
#include "engine/optimizers.h"
#include "engine/version.h"
#include "layers/layer_config.h"
#include "saving/keras_weights_file.h"
#include "saving/model_config.h"
#include "training/model.h"

namespace keras {
namespace saving {
namespace {

// Keras' own archives hold these three; metadata.json is small.
constexpr const char* kConfigEntry = "config.json";
constexpr const char* kMetadataEntry = "metadata.json";
constexpr const char* kWeightsEntry = "model.weights.h5";
constexpr std::size_t kMaxMetadataBytes = 1u << 20;
// A zip bomb's tell: deflate reaches about 1000:1 at best on real data, so an entry that
// claims to expand more than that is refused before it is read.
constexpr std::uint64_t kMaxExpansion = 1000;

// The format of Keras' archives this writes (what Keras 3.15's metadata.json says).
constexpr const char* kKerasFormatVersion = "3.15.1";

std::string zip_error_text(int code) {
  zip_error_t error;
  zip_error_init_with_code(&error, code);
  std::string text = zip_error_strerror(&error);
  zip_error_fini(&error);
  return text;
}

class ZipReader {
 public:
  explicit ZipReader(const std::string& path) : path_(path) {
    int code = 0;
    archive_ = zip_open(path.c_str(), ZIP_RDONLY | ZIP_CHECKCONS, &code);
    if (archive_ == nullptr) {
      if (code == ZIP_ER_NOENT || code == ZIP_ER_OPEN) {
        throw FileNotFoundError(str("load_model: '", path, "' cannot be opened: ", zip_error_text(code)));
      }
      throw FileFormatError(str("load_model: '", path, "' is not a .keras archive (a zip file): ",
                                zip_error_text(code)));
    }
  }
  ~ZipReader() { zip_discard(archive_); }
  ZipReader(const ZipReader&) = delete;
  ZipReader& operator=(const ZipReader&) = delete;

  bool has(const char* name) const { return zip_name_locate(archive_, name, 0) >= 0; }

  // The size an entry declares (its uncompressed bytes); 0 when it has none.
  std::uint64_t declared_size(const char* name) const {
    zip_int64_t index = zip_name_locate(archive_, name, 0);
    zip_stat_t stat;
    zip_stat_init(&stat);
    if (index < 0 || zip_stat_index(archive_, static_cast<zip_uint64_t>(index), 0, &stat) != 0 ||
        !(stat.valid & ZIP_STAT_SIZE) || !(stat.valid & ZIP_STAT_COMP_SIZE)) {
      return 0;
    }
    // Never more than its compressed bytes could expand to (reading it checks the rest).
    return std::min<std::uint64_t>(stat.size, std::max<std::uint64_t>(stat.comp_size, 4096) * kMaxExpansion);
  }

  // The entry's text, at most `limit` bytes however large it claims or turns out to be.
  std::string read(const char* name, std::size_t limit) const {
    std::string text;
    stream(name, limit, [&](const char* bytes, std::size_t count) { text.append(bytes, count); });
    return text;
  }

  // The entry copied to `destination`, a chunk at a time.
  void extract(const char* name, const std::string& destination) const {
    std::FILE* file = std::fopen(destination.c_str(), "wb");
    if (file == nullptr) {
      throw Error(str("load_model: cannot write '", destination, "': ", std::strerror(errno)));
    }
    try {
      stream(name, std::numeric_limits<std::size_t>::max(), [&](const char* bytes, std::size_t count) {
        if (std::fwrite(bytes, 1, count, file) != count) {
          throw Error(str("load_model: cannot write '", destination, "': ", std::strerror(errno)));
        }
      });
    } catch (...) {
      std::fclose(file);
      throw;
    }
    if (std::fclose(file) != 0) throw Error(str("load_model: cannot write '", destination, "'"));
  }

 private:
  template <typename Sink>
  void stream(const char* name, std::size_t limit, Sink&& sink) const {
    zip_int64_t index = zip_name_locate(archive_, name, 0);
    if (index < 0) throw FileFormatError(str("load_model: '", path_, "' has no ", name, " (not a .keras archive?)"));
    zip_stat_t stat;
    zip_stat_init(&stat);
    if (zip_stat_index(archive_, static_cast<zip_uint64_t>(index), 0, &stat) != 0 ||
        !(stat.valid & ZIP_STAT_SIZE) || !(stat.valid & ZIP_STAT_COMP_SIZE)) {
      throw FileFormatError(str("load_model: the size of ", name, " in '", path_, "' cannot be read"));
    }
    if (stat.size > limit) {
      throw FileFormatError(str("load_model: ", name, " in '", path_, "' is ", stat.size,
                                " bytes; at most ", limit, " are read"));
    }
    if (stat.size > 4096 && stat.size / std::max<zip_uint64_t>(stat.comp_size, 1) > kMaxExpansion) {
      throw FileFormatError(str("load_model: ", name, " in '", path_, "' claims to expand ", stat.comp_size,
                                " bytes to ", stat.size, " (over ", kMaxExpansion, " times): refused as a zip bomb"));
    }
    zip_file_t* file = zip_fopen_index(archive_, static_cast<zip_uint64_t>(index), 0);
    if (file == nullptr) {
      throw FileFormatError(str("load_model: ", name, " in '", path_, "' cannot be opened: ", zip_strerror(archive_)));
    }
    std::vector<char> buffer(1u << 20);
    zip_uint64_t total = 0;
    try {
      for (;;) {
        zip_int64_t count = zip_fread(file, buffer.data(), buffer.size());
        if (count < 0) {
          throw FileFormatError(str("load_model: ", name, " in '", path_, "' cannot be read (damaged archive?): ",
                                    zip_file_strerror(file)));
        }
        if (count == 0) break;
        total += static_cast<zip_uint64_t>(count);
        if (total > stat.size) {
          throw FileFormatError(str("load_model: ", name, " in '", path_, "' expands past the ", stat.size,
                                    " bytes it declares: refused"));
        }
        sink(buffer.data(), static_cast<std::size_t>(count));
      }
    } catch (...) {
      zip_fclose(file);
      throw;
    }
    zip_fclose(file);
    if (total != stat.size) {
      throw FileFormatError(str("load_model: ", name, " in '", path_, "' holds ", total, " bytes of the ",
                                stat.size, " it declares (truncated archive?)"));
    }
  }

  std::string path_;
  zip_t* archive_ = nullptr;
};

// A file of a unique name in the temporary directory, removed when done.
class TemporaryFile {
 public:
  TemporaryFile(const std::string& stem, const char* caller) {
    std::string pattern = (std::filesystem::temp_directory_path() / (stem + "-XXXXXX")).string();
    int descriptor = ::mkstemp(pattern.data());
    if (descriptor < 0) {
      throw Error(str(caller, ": cannot create a temporary file ", pattern, ": ", std::strerror(errno)));
    }
    ::close(descriptor);
    path_ = pattern;
  }
  ~TemporaryFile() { std::remove(path_.c_str()); }
  TemporaryFile(const TemporaryFile&) = delete;
  TemporaryFile& operator=(const TemporaryFile&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

std::string date_saved() {
  std::time_t now = std::time(nullptr);
  std::tm local{};
  localtime_r(&now, &local);
  char text[32];
  std::strftime(text, sizeof text, "%Y-%m-%d@%H:%M:%S", &local);
  return text;
}

void write_archive(const std::string& path, const std::string& config, const std::string& metadata,
                   const std::string& weights_path) {
  int code = 0;
  zip_t* archive = zip_open(path.c_str(), ZIP_CREATE | ZIP_TRUNCATE, &code);
  if (archive == nullptr) throw Error(str("save: cannot create '", path, "': ", zip_error_text(code)));
  auto add = [&](const char* name, zip_source_t* source) {
    if (source == nullptr) {
      std::string why = zip_strerror(archive);
      zip_discard(archive);
      throw Error(str("save: cannot add ", name, " to '", path, "': ", why));
    }
    zip_int64_t index = zip_file_add(archive, name, source, ZIP_FL_OVERWRITE | ZIP_FL_ENC_UTF_8);
    if (index < 0 || zip_set_file_compression(archive, static_cast<zip_uint64_t>(index), ZIP_CM_STORE, 0) != 0) {
      if (index < 0) zip_source_free(source);
      std::string why = zip_strerror(archive);
      zip_discard(archive);
      throw Error(str("save: cannot add ", name, " to '", path, "': ", why));
    }
  };
  // Keras' order: metadata, config, weights.
  add(kMetadataEntry, zip_source_buffer(archive, metadata.data(), metadata.size(), 0));
  add(kConfigEntry, zip_source_buffer(archive, config.data(), config.size(), 0));
  add(kWeightsEntry, zip_source_file(archive, weights_path.c_str(), 0, -1));
  // libzip writes a temporary beside `path` and renames it into place when complete.
  if (zip_close(archive) != 0) {
    std::string why = zip_strerror(archive);
    zip_discard(archive);
    throw Error(str("save: cannot write '", path, "': ", why));
  }
}

// The optimizer a compile_config serializes, when keras-cpp has it (Adam, AdamW, SGD, RMSprop,
// Adagrad, with a constant learning rate; LossScaleOptimizer around one of them). Returns why
// not otherwise.
std::optional<std::string> optimizer_from_config(const nlohmann::json& optimizer_json,
                                                 std::shared_ptr<optimizers::Optimizer>& optimizer,
                                                 bool inside_loss_scaling = false) {
  std::string class_name;
  nlohmann::json fields = nlohmann::json::object();
  if (optimizer_json.is_string()) {
    class_name = optimizer_json.get<std::string>();
  } else if (optimizer_json.is_object() && optimizer_json.value("class_name", nlohmann::json()).is_string()) {
    class_name = optimizer_json["class_name"].get<std::string>();
    fields = optimizer_json.value("config", nlohmann::json::object());
    if (!fields.is_object()) return "its optimizer's config is not an object";
  } else {
    return "its optimizer is not a name or a serialized optimizer";
  }
  auto number = [&](const char* key, double fallback) -> std::optional<double> {
    auto found = fields.find(key);
    if (found == fields.end() || found->is_null()) return fallback;
    if (!found->is_number()) return std::nullopt;
    return found->get<double>();
  };
  auto whole = [](std::optional<double> value, double most) {
    return value && *value >= 0 && *value <= most && *value == std::floor(*value);
  };
  if (class_name == "LossScaleOptimizer") {
    // Keras' LossScaleOptimizer(inner_optimizer, initial_scale, dynamic_growth_steps), which
    // takes no other argument but its name.
    if (inside_loss_scaling) return "its LossScaleOptimizer wraps another LossScaleOptimizer";
    // Earlier Keras versions wrote the base optimizer's arguments too (non-functional); Keras
    // 3.15 still takes them at their defaults, and `dynamic` when true.
    const std::map<std::string, nlohmann::json> earlier_defaults = {
        {"weight_decay", nullptr}, {"clipnorm", nullptr},        {"global_clipnorm", nullptr},
        {"clipvalue", nullptr},    {"use_ema", false},           {"ema_momentum", 0.99},
        {"ema_overwrite_frequency", nullptr}, {"loss_scale_factor", nullptr},
        {"gradient_accumulation_steps", nullptr}, {"dynamic", true}};
    for (const auto& [key, value] : fields.items()) {
      if (key == "name" || key == "inner_optimizer" || key == "initial_scale" || key == "dynamic_growth_steps") continue;
      auto earlier = earlier_defaults.find(key);
      if (earlier == earlier_defaults.end()) {
        return str("its LossScaleOptimizer sets ", key, ", which LossScaleOptimizer does not take");
      }
      if (value != earlier->second) {
        return str("its LossScaleOptimizer sets ", key, " = ", value.dump().substr(0, 80), ", which it takes only as ",
                   earlier->second.dump(), " (set it on the inner optimizer)");
      }
    }
    if (!fields.contains("inner_optimizer")) return "its LossScaleOptimizer names no inner_optimizer";
    if (auto why = optimizer_from_config(fields["inner_optimizer"], optimizer, true)) return why;
    std::optional<double> initial_scale = number("initial_scale", 32768.0);
    std::optional<double> growth_steps = number("dynamic_growth_steps", 2000.0);
    if (!initial_scale) return "its LossScaleOptimizer's initial_scale is not a number";
    if (!whole(growth_steps, 1e9)) return "its LossScaleOptimizer's dynamic_growth_steps is not a whole number up to 10^9";
    try {
      optimizer->enable_loss_scaling(*initial_scale, static_cast<int>(*growth_steps));
    } catch (const Error& error) {
      return str("its LossScaleOptimizer's arguments are refused: ", error.what());
    }
    return std::nullopt;
  }
  if (fields.contains("loss_scale_factor") && !fields["loss_scale_factor"].is_null()) {
    return "its optimizer sets loss_scale_factor, which keras-cpp does not have";
  }
  if (fields.value("amsgrad", false) != false) return "its optimizer uses amsgrad, which keras-cpp does not have";
  std::optional<double> rate = number("learning_rate", 0.001);
  if (!rate) return "its learning rate is a schedule, which loading does not carry over yet";
  double weight_decay = number("weight_decay", 0.0).value_or(0.0);
  std::string name = to_snake_case(class_name);
  try {
    if (name == "adam") {
      optimizer = std::make_shared<optimizers::Adam>(*rate, number("beta_1", 0.9).value_or(0.9),
                                                     number("beta_2", 0.999).value_or(0.999),
                                                     number("epsilon", 1e-7).value_or(1e-7), weight_decay);
    } else if (name == "adam_w" || name == "adamw") {
      optimizer = std::make_shared<optimizers::AdamW>(*rate, number("weight_decay", 0.004).value_or(0.004),
                                                      number("beta_1", 0.9).value_or(0.9),
                                                      number("beta_2", 0.999).value_or(0.999),
                                                      number("epsilon", 1e-7).value_or(1e-7));
    } else if (name == "sgd") {
      optimizer = std::make_shared<optimizers::SGD>(*rate, number("momentum", 0.0).value_or(0.0),
                                                    fields.value("nesterov", false), weight_decay);
    } else if (name == "rm_sprop" || name == "rmsprop") {
      optimizer = std::make_shared<optimizers::RMSprop>(*rate, number("rho", 0.9).value_or(0.9),
                                                        number("momentum", 0.0).value_or(0.0),
                                                        number("epsilon", 1e-7).value_or(1e-7),
                                                        fields.value("centered", false), weight_decay);
    } else if (name == "adagrad") {
      optimizer = std::make_shared<optimizers::Adagrad>(*rate, number("initial_accumulator_value", 0.1).value_or(0.1),
                                                        number("epsilon", 1e-7).value_or(1e-7), weight_decay);
    } else {
      return str("its optimizer is '", class_name, "', which keras-cpp does not have");
    }
  } catch (const Error& error) {
    return str("its optimizer's arguments are refused: ", error.what());
  }
  // The base optimizer's options, as Keras' base Optimizer takes them.
  try {
    for (const char* key : {"clipnorm", "global_clipnorm", "clipvalue"}) {
      std::optional<double> value = number(key, 0.0);
      if (!value) return str("its optimizer's ", key, " is not a number");
      if (*value > 0) {
        if (std::string(key) == "clipnorm") optimizer->set_clipnorm(*value);
        else if (std::string(key) == "global_clipnorm") optimizer->set_global_clipnorm(*value);
        else optimizer->set_clipvalue(*value);
      }
    }
    std::optional<double> steps = number("gradient_accumulation_steps", 0.0);
    if (!whole(steps, 1e6)) return "its optimizer's gradient_accumulation_steps is not a whole number up to 10^6";
    if (*steps > 1) optimizer->set_gradient_accumulation_steps(static_cast<int>(*steps));
    if (fields.value("use_ema", false) == true) {
      std::optional<double> momentum = number("ema_momentum", 0.99), frequency = number("ema_overwrite_frequency", 0.0);
      if (!momentum || !whole(frequency, 1e9)) return "its optimizer's moving-average options are not numbers (a whole frequency)";
      optimizer->set_ema(true, *momentum, static_cast<int>(*frequency));
    }
  } catch (const Error& error) {
    return error.what();
  }
  return std::nullopt;
}

// Keras' compile_config, when keras-cpp has what it names: the optimizer (above) and losses
// and metrics by name. Returns why not otherwise.
std::optional<std::string> compile_from_config(Model& model, const nlohmann::json& compile) {
  if (!compile.is_object()) return "compile_config is not an object";
  std::shared_ptr<optimizers::Optimizer> optimizer;
  if (auto why = optimizer_from_config(compile.value("optimizer", nlohmann::json()), optimizer)) return why;
  const nlohmann::json loss = compile.value("loss", nlohmann::json());
  std::string loss_name;
  if (loss.is_string()) {
    loss_name = loss.get<std::string>();
  } else if (loss.is_object() && loss.value("class_name", nlohmann::json()).is_string()) {
    loss_name = to_snake_case(loss["class_name"].get<std::string>());
    // Made by name here, so only a loss at Keras' defaults is taken as it is.
    const nlohmann::json loss_config = loss.value("config", nlohmann::json::object());
    if (!loss_config.is_object()) return "its loss's config is not an object";
    for (const auto& [key, value] : loss_config.items()) {
      bool at_default = key == "name" || key == "dtype" || (key == "reduction" && value == "sum_over_batch_size") ||
                        ((key == "from_logits" || key == "ignore_class" || key == "axis") && (value == false || value.is_null() || value == -1)) ||
                        (key == "label_smoothing" && value == 0);
      if (!at_default) return str("its loss sets ", key, " = ", value.dump().substr(0, 80), ", which loading does not carry over yet");
    }
  } else {
    return "its loss is not one loss by name (several or a function)";
  }
  for (const char* key : {"loss_weights", "weighted_metrics"}) {
    if (compile.contains(key) && !compile[key].is_null()) return str("it sets ", key);
  }
  std::vector<MetricSpec> metrics;
  if (compile.contains("metrics") && !compile["metrics"].is_null()) {
    if (!compile["metrics"].is_array()) return "its metrics are not a list";
    for (const nlohmann::json& metric : compile["metrics"]) {
      if (!metric.is_string()) return "a metric is not given by name";
      metrics.emplace_back(metric.get<std::string>());
    }
  }
  try {
    model.compile(optimizer, LossSpec(loss_name), metrics);
  } catch (const Error& error) {
    return error.what();
  }
  return std::nullopt;
}

}  // namespace

nlohmann::json parse_config_text(const std::string& text, const char* entry) {
  if (text.size() > kMaxConfigBytes) {
    throw FileFormatError(str("load_model: ", entry, " is ", text.size(), " bytes; at most ", kMaxConfigBytes));
  }
  auto depth_limit = [entry](int depth, nlohmann::json::parse_event_t, nlohmann::json&) {
    if (depth > kMaxConfigDepth) {
      throw FileFormatError(str("load_model: ", entry, " nests deeper than ", kMaxConfigDepth, " levels"));
    }
    return true;
  };
  try {
    return nlohmann::json::parse(text, depth_limit);
  } catch (const nlohmann::json::exception& error) {
    throw FileFormatError(str("load_model: ", entry, " is not valid JSON: ", error.what()));
  }
}

void save_model(Model& model, const std::string& path) {
  if (!path.ends_with(".keras")) {
    throw ValueError(str("save: the file name must end in '.keras' (Keras' archive), got '", path,
                         "'; for weights alone use save_weights(\"....weights.h5\")"));
  }
  std::string config = model_config(model).dump();
  nlohmann::json metadata = {{"keras_version", kKerasFormatVersion}, {"date_saved", date_saved()},
                             {"keras_cpp_version", version()}};
  // A temporary of a unique name per process and save (processes of a replicated model each
  // write their own copy).
  TemporaryFile weights_file("keras-save-model", "save");
  const std::string& weights_path = weights_file.path();
  // Every process takes part in the weights' gathers; the one that wrote them zips them.
  WeightsWritten weights = save_keras_weights(model, weights_path);
  std::exception_ptr failure;
  if (weights.here) {
    try {
      write_archive(path, config, metadata.dump(), weights_path);
    } catch (...) {
      failure = std::current_exception();
    }
  }
  if (!weights.collective) {
    if (failure) std::rethrow_exception(failure);
    return;
  }
  distribution::agree_on_failure(failure, str("save: writing '", path, "' (process 0 writes it)"));
}

}  // namespace saving

std::shared_ptr<Model> load_model(const std::string& path, bool compile) {
  if (!path.ends_with(".keras")) {
    throw ValueError(str("load_model: the file name must end in '.keras' (Keras' archive), got '", path, "'"));
  }
  std::error_code error;
  if (!std::filesystem::exists(path, error)) throw FileNotFoundError(str("load_model: '", path, "': no such file"));
  if (!std::filesystem::is_regular_file(path, error)) {
    throw FileFormatError(str("load_model: '", path, "' is not a regular file (a directory, a FIFO, a device?)"));
  }
  saving::ZipReader archive(path);
  if (archive.has(saving::kMetadataEntry)) {
    saving::parse_config_text(archive.read(saving::kMetadataEntry, saving::kMaxMetadataBytes), saving::kMetadataEntry);
  }
  nlohmann::json config = saving::parse_config_text(archive.read(saving::kConfigEntry, saving::kMaxConfigBytes));
  // The model is built before its weights can be checked against it: what it may hold is
  // bounded by what the weights entry could fill (four times its bytes, and 256 MiB for a
  // call's activations), so a config that lies about sizes is refused, not allocated.
  std::uint64_t weights_bytes = archive.declared_size(saving::kWeightsEntry);
  AllocationBudget budget(static_cast<std::size_t>(std::min<std::uint64_t>(weights_bytes, std::uint64_t{1} << 50) * 4 +
                                                   (std::uint64_t{256} << 20)),
                          str("load_model: building the model of '", path, "'"));
  std::shared_ptr<Model> model = saving::model_from_config(config);
  if (compile && config.contains("compile_config") && !config["compile_config"].is_null()) {
    std::optional<std::string> why;
    try {
      why = saving::compile_from_config(*model, config["compile_config"]);
    } catch (const nlohmann::json::exception& type_error) {
      why = str("its compile_config has a field of an unexpected type (", type_error.what(), ")");
    }
    if (why) {
      if (distribution::process_id() == 0) {
        std::fprintf(stderr, "load_model: '%s' is returned uncompiled, as it was saved compiled but %s\n",
                     path.c_str(), why->c_str());
      }
    }
  }
  // Each process reads its own blocks from its own copy of the weights.
  saving::TemporaryFile weights("keras-load-model", "load_model");
  archive.extract(saving::kWeightsEntry, weights.path());
  saving::load_keras_weights(*model, weights.path());
  return model;
}

}  // namespace keras
