// libFuzzer harness for DeviceMesh, TensorLayout and LayoutMap (distribution/api/device_mesh.h) and
// the Distribution classes built on them (distribution/api/distribution.h). The input is decoded
// into mesh shapes, axis names, device names, layout axes, LayoutMap keys (regular expressions)
// and paths, then a short program of calls on them. A keras::Error is the expected outcome of a
// bad argument; any other exception (std::regex_error included) escapes and crashes the harness.
// Every result is checked against the documented behaviour. No MPI: initialize() is not called,
// so there is one process.
#include <fuzzer/FuzzedDataProvider.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "distribution/api/device_mesh.h"
#include "distribution/api/distribution.h"
#include "engine/errors.h"
#include "fuzz_util.h"

namespace {

namespace kd = keras::distribution;
using keras::fuzz::fail;
using keras::str;

// Regular expressions and paths stay short, and keys have at most two quantifiers or
// alternations, so that what is fuzzed is our code and not the recursion depth or the
// exponential backtracking of std::regex itself. libstdc++'s matcher backtracks without
// memoising: "(a*)*" against 32 characters runs for seconds, and "a**" against 12 took about
// 1 s here under the sanitizers; with two such operators and 8 characters the worst case is
// about 3^8 steps. Keys with a counted repetition ("a{0,99}": 99 optional states to backtrack
// over) are compiled (inserted) but removed again before any lookup matches paths to them.
constexpr std::size_t kMaxKeyBytes = 64;
constexpr std::size_t kMaxPathBytes = 8;
constexpr std::size_t kMaxNameBytes = 8;
constexpr int kMaxRegexOperators = 2;

// KERAS_FUZZ_TRACE=1 prints the LayoutMap calls an input decodes to (for reading a reproducer).
void trace(const std::string& line) {
  static const bool enabled = std::getenv("KERAS_FUZZ_TRACE") != nullptr;
  if (enabled) std::fprintf(stderr, "%s\n", line.c_str());
}

std::string regex_key(FuzzedDataProvider& in) {
  std::string key = in.ConsumeRandomLengthString(kMaxKeyBytes);
  int operators = 0;
  for (char& c : key) {
    bool is_operator = c == '*' || c == '+' || c == '?' || c == '{' || c == '|';
    if (is_operator && ++operators > kMaxRegexOperators) c = 'q';
  }
  return key;
}

std::int64_t dimension(FuzzedDataProvider& in) {
  switch (in.ConsumeIntegralInRange(0, 7)) {
    case 0: return in.ConsumeIntegral<std::int64_t>();
    case 1: return std::int64_t{1} << in.ConsumeIntegralInRange(0, 62);
    case 2: return in.ConsumeIntegralInRange<std::int64_t>(-2, 0);
    default: return in.ConsumeIntegralInRange<std::int64_t>(1, 4);
  }
}

keras::Shape shape(FuzzedDataProvider& in, int max_rank) {
  keras::Shape result(in.ConsumeIntegralInRange(0, max_rank));
  for (std::int64_t& dim : result) dim = dimension(in);
  return result;
}

// An existing name (so that lookups succeed) or a fresh one.
std::string name(FuzzedDataProvider& in, const std::vector<std::string>& known) {
  if (!known.empty() && in.ConsumeBool()) {
    return known[in.ConsumeIntegralInRange<std::size_t>(0, known.size() - 1)];
  }
  return in.ConsumeRandomLengthString(kMaxNameBytes);
}

// A path to look up: an existing key (exact match) when that is short enough, or a fresh one.
std::string path(FuzzedDataProvider& in, const std::vector<std::string>& keys) {
  std::string chosen = name(in, keys);
  return chosen.size() <= kMaxPathBytes ? chosen : in.ConsumeRandomLengthString(kMaxPathBytes);
}

std::vector<kd::TensorLayout::Axis> axes(FuzzedDataProvider& in,
                                         const std::vector<std::string>& mesh_axes) {
  std::vector<kd::TensorLayout::Axis> result(in.ConsumeIntegralInRange(0, 5));
  for (auto& axis : result) {
    if (in.ConsumeBool()) axis = name(in, mesh_axes);
  }
  return result;
}

// The product of `dims`, or nullopt if it overflows or a dimension is not positive.
std::optional<std::int64_t> positive_product(const std::vector<std::int64_t>& dims) {
  std::int64_t product = 1;
  for (std::int64_t dim : dims) {
    if (dim <= 0 || __builtin_mul_overflow(product, dim, &product)) return std::nullopt;
  }
  return product;
}

void check_mesh(const kd::DeviceMesh& mesh, FuzzedDataProvider& in) {
  std::optional<std::int64_t> size = positive_product(mesh.shape());
  if (!size || *size != mesh.size() || mesh.shape().size() != mesh.axis_names().size()) {
    fail(str("DeviceMesh accepted ", mesh.to_string(), " with ", mesh.size(), " devices"));
  }
  for (std::size_t axis = 0; axis < mesh.axis_names().size(); ++axis) {
    if (mesh.axis_index(mesh.axis_names()[axis]) != static_cast<int>(axis) ||
        mesh.axis_size(mesh.axis_names()[axis]) != mesh.shape()[axis]) {
      fail(str("DeviceMesh axis ", axis, " of ", mesh.to_string(), " does not look up"));
    }
  }
  std::int64_t device = in.ConsumeIntegralInRange<std::int64_t>(0, mesh.size() - 1);
  std::vector<std::int64_t> coordinates = mesh.coordinates(device);
  std::int64_t flat = 0;
  for (std::size_t d = 0; d < coordinates.size(); ++d) {
    if (coordinates[d] < 0 || coordinates[d] >= mesh.shape()[d]) fail("coordinate off the mesh");
    flat = flat * mesh.shape()[d] + coordinates[d];
  }
  if (flat != device) fail(str("coordinates of device ", device, " ravel to ", flat));
}

void check_layout(const kd::TensorLayout& layout, FuzzedDataProvider& in) {
  bool replicated = std::none_of(layout.axes().begin(), layout.axes().end(),
                                 [](const auto& axis) { return axis.has_value(); });
  if (layout.is_replicated() != replicated) fail("TensorLayout::is_replicated is wrong");
  (void)layout.to_string();
  if (!layout.device_mesh()) return;
  const kd::DeviceMesh& mesh = *layout.device_mesh();
  keras::Shape tensor_shape = shape(in, 5);
  std::int64_t device = in.ConsumeBool() ? in.ConsumeIntegral<std::int64_t>()
                                         : in.ConsumeIntegralInRange<std::int64_t>(0, mesh.size() - 1);
  auto [starts, sizes] = layout.shard_of(tensor_shape, device);
  if (starts.size() != tensor_shape.size() || sizes.size() != tensor_shape.size()) {
    fail("shard_of returned the wrong rank");
  }
  for (std::size_t d = 0; d < tensor_shape.size(); ++d) {
    if (tensor_shape[d] < 0) continue;  // not a tensor shape; nothing to hold it to
    const auto& axis = layout.axes()[d];
    std::int64_t parts = axis ? mesh.axis_size(*axis) : 1;
    if (sizes[d] * parts != tensor_shape[d] || starts[d] < 0 ||
        starts[d] + sizes[d] > tensor_shape[d]) {
      fail(str("shard_of(", keras::shape_to_string(tensor_shape), ", ", device, ") of ",
               layout.to_string(), " gave starts ", keras::shape_to_string(starts), " sizes ",
               keras::shape_to_string(sizes)));
    }
  }
}

void use_distribution(const kd::Distribution& distribution, FuzzedDataProvider& in,
                      const std::vector<std::string>& keys) {
  (void)distribution.to_string();
  std::int64_t replicas = distribution.num_model_replicas();
  std::int64_t shards = distribution.num_data_shards();
  std::int64_t shard = distribution.data_shard_id();
  if (replicas < 1 || shards < 1 || shard < 0 || shard >= shards) {
    fail(str(distribution.to_string(), ": replicas ", replicas, ", shards ", shards, ", shard ",
             shard));
  }
  keras::Shape data_shape = shape(in, 4);
  try {
    kd::TensorLayoutPtr layout = distribution.get_data_layout(data_shape);
    if (!layout || layout->axes().size() != data_shape.size()) fail("bad data layout");
  } catch (const keras::Error&) {
  }
  kd::VariableInfo variable{path(in, keys), shape(in, 4), nullptr};
  kd::TensorLayoutPtr variable_layout = distribution.get_variable_layout(variable);
  if (!variable_layout) fail("get_variable_layout returned null");
  (void)distribution.get_tensor_layout(path(in, keys));
}

void run(FuzzedDataProvider& in) {
  // The mesh: shape, axis names (usually as many as dimensions) and devices.
  std::vector<std::int64_t> mesh_shape = shape(in, 4);
  std::vector<std::string> axis_names(in.ConsumeIntegralInRange(0, 7) == 0
                                          ? in.ConsumeIntegralInRange<std::size_t>(0, 5)
                                          : mesh_shape.size());
  for (std::string& axis : axis_names) axis = name(in, axis_names);
  std::optional<std::vector<std::string>> devices;
  switch (in.ConsumeIntegralInRange(0, 3)) {
    case 0: break;  // list_devices(): one device, this process
    case 1: {
      std::optional<std::int64_t> count = positive_product(mesh_shape);
      devices.emplace();
      for (std::int64_t i = 0; count && *count <= 64 && i < *count; ++i) {
        devices->push_back("cpu:" + std::to_string(i));
      }
      break;
    }
    default:
      devices.emplace(in.ConsumeIntegralInRange<std::size_t>(0, 16));
      for (std::string& device : *devices) device = in.ConsumeRandomLengthString(kMaxNameBytes);
  }
  kd::DeviceMeshPtr mesh;
  try {
    mesh = std::make_shared<kd::DeviceMesh>(mesh_shape, axis_names, devices);
  } catch (const keras::Error&) {
  }
  std::vector<std::string> mesh_axes = mesh ? mesh->axis_names() : axis_names;
  if (mesh) {
    check_mesh(*mesh, in);
    try {
      (void)mesh->axis_index(name(in, mesh_axes));
    } catch (const keras::Error&) {
    }
    try {
      (void)mesh->coordinates(in.ConsumeIntegral<std::int64_t>());
    } catch (const keras::Error&) {
    }
  }

  auto layout_map = std::make_shared<kd::LayoutMap>(in.ConsumeBool() ? mesh : nullptr);
  std::vector<std::string> keys;  // what the map should hold, in insertion order
  for (int step = 0; step < 12 && in.remaining_bytes() > 0; ++step) {
    try {
      switch (in.ConsumeIntegralInRange(0, 8)) {
        case 0: {  // a layout on its own
          kd::TensorLayout layout(axes(in, mesh_axes), in.ConsumeBool() ? mesh : nullptr);
          if (mesh && in.ConsumeBool()) layout.set_device_mesh(mesh);
          check_layout(layout, in);
          break;
        }
        case 1:
        case 2: {  // insert, through operator[] or insert()
          std::string key = regex_key(in);
          trace(str("insert ", keras::quote_input(key)));
          bool duplicate = std::find(keys.begin(), keys.end(), key) != keys.end();
          std::vector<kd::TensorLayout::Axis> layout_axes = axes(in, mesh_axes);
          if (in.ConsumeBool()) {
            (*layout_map)[key] = layout_axes;
          } else {
            layout_map->insert(key, kd::TensorLayout(layout_axes, in.ConsumeBool() ? mesh : nullptr));
          }
          if (duplicate) fail(str("LayoutMap accepted the key '", key, "' twice"));
          if (key.find('{') != std::string::npos) {  // compiled; too costly to match against
            if (!layout_map->pop(key)) fail(str("LayoutMap::pop('", key, "') returned null"));
            break;
          }
          keys.push_back(key);
          break;
        }
        case 3:
        case 4: {  // lookup
          std::string looked_up = path(in, keys);
          trace(str("get ", keras::quote_input(looked_up)));
          kd::TensorLayoutPtr layout = layout_map->get(looked_up);
          if (std::find(keys.begin(), keys.end(), looked_up) != keys.end()) {
            if (!layout) fail(str("LayoutMap::get('", looked_up, "') missed an exact key"));
          }
          if (layout) check_layout(*layout, in);
          break;
        }
        case 5: {  // pop
          std::string key = name(in, keys);
          auto found = std::find(keys.begin(), keys.end(), key);
          kd::TensorLayoutPtr layout;
          try {
            layout = layout_map->pop(key);
          } catch (const keras::Error&) {
            if (found != keys.end()) fail(str("LayoutMap::pop('", key, "') missed a key"));
            throw;
          }
          if (found == keys.end() || !layout) fail(str("LayoutMap::pop('", key, "') found a ghost"));
          keys.erase(found);
          break;
        }
        case 6: {  // ModelParallel over the map
          std::string batch = in.ConsumeBool() ? std::string() : name(in, mesh_axes);
          kd::ModelParallel distribution(layout_map, batch);
          use_distribution(distribution, in, keys);
          break;
        }
        case 7: {  // DataParallel, over the mesh (1-D: a 2-D one only adds a warning) or devices
          if (mesh && mesh->shape().size() == 1 && in.ConsumeBool()) {
            kd::DataParallel distribution(mesh);
            use_distribution(distribution, in, keys);
          } else {
            std::vector<std::string> names(in.ConsumeIntegralInRange<std::size_t>(0, 8));
            for (std::string& device : names) device = in.ConsumeRandomLengthString(kMaxNameBytes);
            kd::DataParallel distribution(names);
            use_distribution(distribution, in, keys);
          }
          break;
        }
        default: {  // which shard a process reads, over the domain the constructors allow
          int processes = in.ConsumeIntegralInRange(1, 1 << 20);
          std::int64_t replicas = in.ConsumeIntegralInRange<std::int64_t>(1, 1 << 20);
          if (processes > replicas && processes % replicas != 0) break;
          int process = in.ConsumeIntegralInRange(0, processes - 1);
          std::int64_t shard = kd::data_shard_id_for(replicas, processes, process);
          if (shard < 0 || shard >= std::min<std::int64_t>(replicas, processes)) {
            fail(str("data_shard_id_for(", replicas, ", ", processes, ", ", process, ") = ", shard));
          }
        }
      }
    } catch (const keras::Error&) {
      // A bad argument, reported as such.
    }
    if (layout_map->keys() != keys || layout_map->size() != keys.size()) {
      fail("LayoutMap keys() differ from the keys inserted");
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  FuzzedDataProvider in(data, size);
  run(in);
  return 0;
}
