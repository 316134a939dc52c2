// Distribution, DataParallel, ModelParallel, the global distribution and distribute_tensor.
#include "distribution/api/distribution.h"

#include <cstdio>
#include <map>
#include <mutex>

#include "distribution/runtime/runtime.h"
#include "engine/ops.h"

namespace keras::distribution {
namespace {

std::mutex global_mutex;
std::shared_ptr<Distribution> global_distribution;

DeviceMeshPtr check_mesh(DeviceMeshPtr mesh, const char* what) {
  if (!mesh) throw ValueError(str(what, ": the device mesh is null"));
  return mesh;
}

TensorLayoutPtr replicated(const Shape& shape, const DeviceMeshPtr& mesh) {
  return std::make_shared<TensorLayout>(std::vector<TensorLayout::Axis>(shape.size()), mesh);
}

}  // namespace

Distribution::Distribution(DeviceMeshPtr device_mesh, std::string batch_dim_name,
                           bool auto_shard_dataset)
    : device_mesh_(check_mesh(std::move(device_mesh), "Distribution")),
      batch_dim_name_(batch_dim_name.empty() ? device_mesh_->axis_names()[0]
                                             : std::move(batch_dim_name)),
      auto_shard_dataset_(auto_shard_dataset), num_processes_(distribution::num_processes()),
      process_id_(distribution::process_id()) {
  device_mesh_->axis_index(batch_dim_name_);  // the batch axis must be a mesh axis
  note_distribution_created();
}

std::int64_t Distribution::num_model_replicas() const {
  throw NotImplementedError(str(class_name(), " does not define num_model_replicas(); ",
                                "subclasses must"));
}

std::int64_t Distribution::num_data_shards() const {
  return std::min<std::int64_t>(num_model_replicas(), num_processes_);
}

std::int64_t data_shard_id_for(std::int64_t replicas, int processes, int process_id) {
  if (replicas < 1 || processes < 1 || process_id < 0 || process_id >= processes) {
    throw ValueError(str("data_shard_id_for: got ", replicas, " replicas, ", processes,
                         " processes and process id ", process_id, "; expected at least one of ",
                         "each and an id in [0, processes)"));
  }
  if (replicas >= processes) return process_id;
  // Several processes hold one replica: contiguous groups read the same shard (Keras >= 3.15).
  return process_id / (processes / replicas);
}

std::int64_t Distribution::data_shard_id() const {
  return data_shard_id_for(num_model_replicas(), num_processes_, process_id_);
}

TensorLayoutPtr Distribution::get_data_layout(const Shape& data_shape) const {
  if (data_shape.empty()) {
    throw ValueError(str(class_name(), ": data needs a batch dimension, got a scalar"));
  }
  std::vector<TensorLayout::Axis> axes(data_shape.size());
  axes[0] = batch_dim_name_;
  return std::make_shared<TensorLayout>(axes, device_mesh_);
}

TensorLayoutPtr Distribution::get_variable_layout(const VariableInfo& variable) const {
  if (variable.layout) return variable.layout;
  return replicated(variable.shape, device_mesh_);
}

TensorLayoutPtr Distribution::get_tensor_layout(const std::string&) const { return nullptr; }

std::string Distribution::to_string() const {
  return str("<", class_name(), " device_mesh=", device_mesh_->to_string(), ">");
}

Distribution::ScopeGuard Distribution::scope() {
  std::shared_ptr<Distribution> previous = distribution();
  set_distribution(shared_from_this());
  return ScopeGuard(std::move(previous));
}

Distribution::ScopeGuard::~ScopeGuard() { set_distribution(previous_); }

namespace {
DeviceMeshPtr mesh_of_devices(const std::vector<std::string>& devices) {
  if (devices.empty()) {
    return std::make_shared<DeviceMesh>(std::vector<std::int64_t>{get_device_count()},
                                        std::vector<std::string>{kDefaultBatchDimName});
  }
  return std::make_shared<DeviceMesh>(std::vector<std::int64_t>{std::int64_t(devices.size())},
                                      std::vector<std::string>{kDefaultBatchDimName}, devices);
}
}  // namespace

DataParallel::DataParallel() : DataParallel(std::vector<std::string>{}) {}

DataParallel::DataParallel(const DeviceMesh& device_mesh, bool auto_shard_dataset)
    : DataParallel(std::make_shared<DeviceMesh>(device_mesh), auto_shard_dataset) {}

DataParallel::DataParallel(DeviceMeshPtr device_mesh, bool auto_shard_dataset)
    : Distribution(check_mesh(std::move(device_mesh), "DataParallel"), "", auto_shard_dataset) {
  if (this->device_mesh()->shape().size() != 1) {
    std::fprintf(stderr,
                 "warning: DataParallel expects a 1-D mesh, got %s; every device is used as a "
                 "data-parallel replica and the first axis ('%s') names the batch axis\n",
                 this->device_mesh()->to_string().c_str(), batch_dim_name().c_str());
  }
}

DataParallel::DataParallel(const std::vector<std::string>& devices, bool auto_shard_dataset)
    : Distribution(mesh_of_devices(devices), kDefaultBatchDimName, auto_shard_dataset) {}

std::int64_t DataParallel::num_model_replicas() const { return device_mesh()->size(); }

TensorLayoutPtr DataParallel::get_variable_layout(const VariableInfo& variable) const {
  if (variable.layout) return variable.layout;
  return replicated(variable.shape, device_mesh());
}

TensorLayoutPtr DataParallel::get_tensor_layout(const std::string&) const { return nullptr; }

namespace {
std::shared_ptr<LayoutMap> check_layout_map(std::shared_ptr<LayoutMap> layout_map) {
  if (!layout_map) throw ValueError("ModelParallel: you must give a layout_map");
  if (!layout_map->device_mesh()) {
    throw ValueError("ModelParallel: the layout_map has no device mesh; construct it as "
                     "LayoutMap(mesh)");
  }
  return layout_map;
}
}  // namespace

ModelParallel::ModelParallel(const LayoutMap& layout_map, std::string batch_dim_name,
                             bool auto_shard_dataset)
    // A LayoutMap copy shares its entries (device_mesh.h): keys added later are seen, as in Keras.
    : ModelParallel(std::make_shared<LayoutMap>(layout_map), std::move(batch_dim_name),
                    auto_shard_dataset) {}

ModelParallel::ModelParallel(std::shared_ptr<LayoutMap> layout_map, std::string batch_dim_name,
                             bool auto_shard_dataset)
    : Distribution(check_layout_map(layout_map)->device_mesh(), std::move(batch_dim_name),
                   auto_shard_dataset),
      layout_map_(std::move(layout_map)) {
  std::int64_t replicas = num_model_replicas();
  if (num_processes() > replicas && num_processes() % replicas != 0) {
    throw ValueError(str("ModelParallel: with more processes than model replicas, num_processes ",
                         "must be divisible by num_model_replicas; got num_processes=",
                         num_processes(), ", num_model_replicas=", replicas));
  }
}

std::int64_t ModelParallel::num_model_replicas() const {
  return device_mesh()->axis_size(batch_dim_name());
}

TensorLayoutPtr ModelParallel::get_variable_layout(const VariableInfo& variable) const {
  if (variable.layout) return variable.layout;
  if (TensorLayoutPtr layout = layout_map_->get(variable.path)) return layout;
  return std::make_shared<TensorLayout>(std::vector<TensorLayout::Axis>(variable.shape.size()),
                                        device_mesh());
}

TensorLayoutPtr ModelParallel::get_tensor_layout(const std::string& path) const {
  return layout_map_->get(path);
}

void set_distribution(std::shared_ptr<Distribution> value) {
  std::lock_guard lock(global_mutex);
  global_distribution = std::move(value);
}

std::shared_ptr<Distribution> distribution() {
  std::lock_guard lock(global_mutex);
  return global_distribution;
}

namespace {
// Groups are created once per (mesh, axis) and kept: creating one is a collective split, which
// every layer and every step would otherwise repeat. Every process creates them in the same
// order (the calls are collective), so the caches agree across processes.
std::mutex group_cache_mutex;
struct AxisGroups {
  std::shared_ptr<Communicator> host;
  std::shared_ptr<Communicator> gpus;  // host's device twin, when there is a gpu_world()
};
std::map<std::string, AxisGroups> group_cache;

std::string group_key(const DeviceMesh& mesh, const std::string& axis_name) {
  std::string key = shape_to_string(mesh.shape());
  for (const std::string& name : mesh.axis_names()) key += "|" + name;
  for (const std::string& device : mesh.devices()) key += "|" + device;
  return key + "|axis=" + axis_name;
}
}  // namespace

void clear_mesh_axis_groups() {
  std::lock_guard lock(group_cache_mutex);
  group_cache.clear();
}

std::shared_ptr<Communicator> mesh_axis_group(const DeviceMesh& mesh,
                                              const std::string& axis_name) {
  int axis = mesh.axis_index(axis_name);
  if (mesh.size() != num_processes()) {
    throw ValueError(str("mesh_axis_group: ", mesh.to_string(), " has ", mesh.size(),
                         " devices but there are ", num_processes(), " processes; the mesh must "
                         "have one device per process"));
  }
  std::shared_ptr<Communicator> gpus = gpu_world();
  std::lock_guard lock(group_cache_mutex);
  std::string key = group_key(mesh, axis_name);
  if (auto found = group_cache.find(key); found != group_cache.end()) return found->second.host;
  std::vector<std::int64_t> coordinates = process_coordinates(mesh);
  int rank_in_group = static_cast<int>(coordinates[axis]);
  coordinates[axis] = 0;
  std::int64_t color = 0;  // row-major index of the coordinates with the axis removed
  for (std::size_t d = 0; d < coordinates.size(); ++d) color = color * mesh.shape()[d] + coordinates[d];
  std::string name = str("mesh axis '", axis_name, "' (group ", color, ")");
  AxisGroups groups;
  groups.host = world().split(static_cast<int>(color), rank_in_group, name);
  // The same processes' GPUs: sharded layers and gradient buckets on a GPU use it (a
  // collective split too, made by every process at the same point as the host one).
  if (gpus) {
    groups.gpus = gpus->split(static_cast<int>(color), rank_in_group, name);
    groups.host->set_device_twin(groups.gpus);
  }
  group_cache.emplace(key, groups);
  return groups.host;
}

std::int64_t process_device_index(const DeviceMesh& mesh) {
  const std::vector<std::string>& devices = mesh.devices();
  std::string suffix = str(":", process_id());
  for (std::size_t i = 0; i < devices.size(); ++i) {
    const std::string& device = devices[i];
    if (device.size() > suffix.size() &&
        device.compare(device.size() - suffix.size(), suffix.size(), suffix) == 0) {
      return static_cast<std::int64_t>(i);
    }
  }
  throw ValueError(str(mesh.to_string(), " does not hold this process's device (index ",
                       process_id(), " of ", num_processes(), " processes); a mesh used across ",
                       "processes must list the global devices, one per process"));
}

std::vector<std::int64_t> process_coordinates(const DeviceMesh& mesh) {
  return mesh.coordinates(process_device_index(mesh));
}

Tensor distribute_tensor(const Tensor& tensor, const TensorLayoutPtr& layout) {
  if (!layout) return tensor;
  // Checked even when the layout replicates everything: Keras raises on a layout without a
  // mesh and on one whose rank differs from the tensor's (its replicated fast path did not).
  if (!tensor.defined()) throw ValueError("distribute_tensor: the tensor is undefined");
  layout->check_fits(tensor.shape(), "distribute_tensor");
  if (layout->is_replicated()) return tensor;
  auto [starts, sizes] = layout->shard_of(tensor.shape(), process_device_index(*layout->device_mesh()));
  return ops::slice(tensor, starts, sizes);
}

}  // namespace keras::distribution
