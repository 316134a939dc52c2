// DeviceMesh, TensorLayout and LayoutMap: Keras 3's description of how tensors are laid out
// over devices (keras.distribution). A mesh is an n-d grid of global devices with named axes
// (row-major: flat device f sits at unravel_index(f, shape)); a layout names, for each tensor
// dimension, the mesh axis it is split over (or none: whole); a LayoutMap maps variable and
// activation paths to layouts by full-match regular expression. Where Keras does not check
// (a mesh axis used twice in one layout, layout rank, divisibility), we check and say so.
#pragma once
#include "distribution/api/layout_pattern.h"
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine/errors.h"
#include "engine/shape.h"

namespace keras::distribution {

class DeviceMesh {
 public:
  // `devices` defaults to list_devices(); its length must equal the product of `shape`.
  DeviceMesh(std::vector<std::int64_t> shape, std::vector<std::string> axis_names,
             std::optional<std::vector<std::string>> devices = std::nullopt);

  const std::vector<std::int64_t>& shape() const { return shape_; }
  const std::vector<std::string>& axis_names() const { return axis_names_; }
  // Flat, row-major.
  const std::vector<std::string>& devices() const { return devices_; }
  std::int64_t size() const { return static_cast<std::int64_t>(devices_.size()); }
  // Index of a named axis; throws ValueError naming the axes when absent.
  int axis_index(const std::string& axis_name) const;
  std::int64_t axis_size(const std::string& axis_name) const;
  // Mesh coordinates of the device with flat index `device_index`.
  std::vector<std::int64_t> coordinates(std::int64_t device_index) const;
  std::string to_string() const;  // <DeviceMesh shape=(2, 4), axis_names=['batch', 'model']>

 private:
  std::vector<std::int64_t> shape_;
  std::vector<std::string> axis_names_;
  std::vector<std::string> devices_;
};
using DeviceMeshPtr = std::shared_ptr<const DeviceMesh>;

class TensorLayout {
 public:
  using Axis = std::optional<std::string>;
  explicit TensorLayout(std::vector<Axis> axes, DeviceMeshPtr device_mesh = nullptr);

  const std::vector<Axis>& axes() const { return axes_; }
  const DeviceMeshPtr& device_mesh() const { return device_mesh_; }
  // Late binding, allowed once (Keras): throws ValueError if a mesh is already set.
  void set_device_mesh(DeviceMeshPtr device_mesh);
  std::string to_string() const;

  // For a tensor of `shape` on this layout's mesh: checks rank and divisibility, and returns the
  // block (starts, sizes) that the device with flat index `device_index` holds.
  void check_fits(const Shape& shape, const std::string& what) const;
  std::pair<Shape, Shape> shard_of(const Shape& shape, std::int64_t device_index) const;
  bool is_replicated() const;

 private:
  void validate() const;
  std::vector<Axis> axes_;
  DeviceMeshPtr device_mesh_;
};
using TensorLayoutPtr = std::shared_ptr<TensorLayout>;

// Like the Python object it ports, a LayoutMap is shared, not copied: copies of a LayoutMap
// (and the ModelParallel built from one) see the same entries, so keys added after the
// distribution was made still apply, as in Keras.
class LayoutMap {
 public:
  explicit LayoutMap(DeviceMeshPtr device_mesh = nullptr);
  explicit LayoutMap(const DeviceMesh& device_mesh);

  // Proxy so that `layout_map["pattern"] = TensorLayout(...)` inserts (duplicates rejected).
  class Slot {
   public:
    Slot(LayoutMap& map, std::string key) : map_(map), key_(std::move(key)) {}
    Slot& operator=(TensorLayout layout);
    Slot& operator=(const std::vector<TensorLayout::Axis>& axes);

   private:
    LayoutMap& map_;
    std::string key_;
  };
  Slot operator[](const std::string& key) { return Slot(*this, key); }

  void insert(const std::string& key, TensorLayout layout);
  // Exact key first, then the unique key whose regex fully matches; nullptr when none does;
  // ValueError when several do.
  TensorLayoutPtr get(const std::string& path) const;
  // Removes an exact key; throws ValueError (Keras: KeyError) when absent.
  TensorLayoutPtr pop(const std::string& key);
  std::size_t size() const { return state_->entries.size(); }
  std::vector<std::string> keys() const;  // insertion order
  const DeviceMeshPtr& device_mesh() const { return state_->device_mesh; }

 private:
  struct Entry {
    std::string key;
    LayoutPattern pattern;  // compiled once, at insertion
    TensorLayoutPtr layout;
  };
  struct State {
    DeviceMeshPtr device_mesh;
    std::vector<Entry> entries;
  };
  std::shared_ptr<State> state_;
};

}  // namespace keras::distribution
