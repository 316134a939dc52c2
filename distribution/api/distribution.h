// Distribution: the global strategy that layers and the trainer consult (Keras 3's
// keras.distribution). DataParallel replicates every variable and splits each global batch
// across processes; ModelParallel takes variable and activation layouts from a LayoutMap (the
// layers honour them in the model-parallel issue). set_distribution / distribution() hold one
// process-wide value (Keras keeps it per thread; our worker threads never consult it), and
// Distribution::scope() sets it for a block and restores the previous one.
#pragma once
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "distribution/runtime/communicator.h"
#include "distribution/api/device_mesh.h"
#include "engine/tensor.h"

namespace keras::distribution {

inline const std::string kDefaultBatchDimName = "batch";

// What get_variable_layout sees of a variable.
struct VariableInfo {
  std::string path;
  Shape shape;
  TensorLayoutPtr layout;  // an explicit layout given at creation, or null
};

class Distribution : public std::enable_shared_from_this<Distribution> {
 public:
  explicit Distribution(DeviceMeshPtr device_mesh, std::string batch_dim_name = "",
                        bool auto_shard_dataset = true);
  virtual ~Distribution() = default;

  const DeviceMeshPtr& device_mesh() const { return device_mesh_; }
  const std::string& batch_dim_name() const { return batch_dim_name_; }
  bool auto_shard_dataset() const { return auto_shard_dataset_; }
  void set_auto_shard_dataset(bool value) { auto_shard_dataset_ = value; }
  int num_processes() const { return num_processes_; }
  int process_id() const { return process_id_; }
  bool is_multi_process() const { return num_processes_ > 1; }

  // How many copies of the model see different data. Subclasses define it.
  virtual std::int64_t num_model_replicas() const;
  std::int64_t num_data_shards() const;
  // Which contiguous slice of every global batch this process reads.
  std::int64_t data_shard_id() const;

  virtual TensorLayoutPtr get_data_layout(const Shape& data_shape) const;
  virtual TensorLayoutPtr get_variable_layout(const VariableInfo& variable) const;
  // Layout for an activation path ("sequential/dense/output"); null for none.
  virtual TensorLayoutPtr get_tensor_layout(const std::string& path) const;
  virtual std::string class_name() const { return "Distribution"; }
  std::string to_string() const;

  // Sets this distribution until the returned guard is destroyed, then restores the previous one.
  class ScopeGuard {
   public:
    explicit ScopeGuard(std::shared_ptr<Distribution> previous) : previous_(std::move(previous)) {}
    ~ScopeGuard();
    ScopeGuard(const ScopeGuard&) = delete;
    ScopeGuard& operator=(const ScopeGuard&) = delete;

   private:
    std::shared_ptr<Distribution> previous_;
  };
  [[nodiscard]] ScopeGuard scope();

 private:
  DeviceMeshPtr device_mesh_;
  std::string batch_dim_name_;
  bool auto_shard_dataset_;
  int num_processes_;
  int process_id_;
};

class DataParallel : public Distribution {
 public:
  // All devices (list_devices()) on one axis named "batch".
  DataParallel();
  // A mesh: its first axis is the batch axis; a mesh of rank > 1 is accepted with a warning
  // (every device is a replica; Keras means to warn here too).
  explicit DataParallel(const DeviceMesh& device_mesh, bool auto_shard_dataset = true);
  explicit DataParallel(DeviceMeshPtr device_mesh, bool auto_shard_dataset = true);
  // Devices on one axis named "batch".
  explicit DataParallel(const std::vector<std::string>& devices, bool auto_shard_dataset = true);

  std::int64_t num_model_replicas() const override;
  TensorLayoutPtr get_variable_layout(const VariableInfo& variable) const override;
  TensorLayoutPtr get_tensor_layout(const std::string& path) const override;
  std::string class_name() const override { return "DataParallel"; }
};

class ModelParallel : public Distribution {
 public:
  // The mesh comes from the LayoutMap; the batch axis defaults to the mesh's first axis.
  explicit ModelParallel(std::shared_ptr<LayoutMap> layout_map, std::string batch_dim_name = "",
                         bool auto_shard_dataset = true);
  explicit ModelParallel(const LayoutMap& layout_map, std::string batch_dim_name = "",
                         bool auto_shard_dataset = true);

  std::int64_t num_model_replicas() const override;
  TensorLayoutPtr get_variable_layout(const VariableInfo& variable) const override;
  TensorLayoutPtr get_tensor_layout(const std::string& path) const override;
  const LayoutMap& layout_map() const { return *layout_map_; }
  std::string class_name() const override { return "ModelParallel"; }

 private:
  std::shared_ptr<LayoutMap> layout_map_;
};

// data_shard_id's formula: contiguous groups of processes share a replica's shard.
std::int64_t data_shard_id_for(std::int64_t num_model_replicas, int num_processes, int process_id);

void set_distribution(std::shared_ptr<Distribution> value);
std::shared_ptr<Distribution> distribution();

// The processes that differ only in their coordinate along `axis_name` of `mesh` (one device
// per process, coordinates from process_coordinates): the group a collective over that axis
// runs on.
// Collective the first time for a (mesh, axis): every process must call it, with the same mesh
// and axis; the group is cached and later calls return it without communicating.
std::shared_ptr<Communicator> mesh_axis_group(const DeviceMesh& mesh, const std::string& axis_name);
// Drops the cached mesh-axis groups (finalize() does, before MPI ends).
void clear_mesh_axis_groups();

// The position in `mesh.devices()` of this process's device ("cpu:<process id>" or
// "gpu:<process id>"), and its mesh coordinates: a permuted device list is honoured, so a
// process's coordinate is where its device sits, not its process id. ValueError when the mesh
// does not hold this process's device.
std::int64_t process_device_index(const DeviceMesh& mesh);
std::vector<std::int64_t> process_coordinates(const DeviceMesh& mesh);

// This process's shard of a full tensor under `layout` (its block at its device's position in
// the mesh); the tensor itself when the layout is null or replicates it. The layout is checked
// either way (it needs a mesh and one entry per tensor dimension).
Tensor distribute_tensor(const Tensor& tensor, const TensorLayoutPtr& layout);

}  // namespace keras::distribution
