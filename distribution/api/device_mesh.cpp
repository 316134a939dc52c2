// DeviceMesh, TensorLayout, LayoutMap.
#include "distribution/api/device_mesh.h"

#include <algorithm>
#include <set>

#include "distribution/runtime/runtime.h"

namespace keras::distribution {
namespace {

std::string join_names(const std::vector<std::string>& names) {
  std::string text = "[";
  for (std::size_t i = 0; i < names.size(); ++i) text += (i ? ", '" : "'") + names[i] + "'";
  return text + "]";
}

std::string axes_to_string(const std::vector<TensorLayout::Axis>& axes) {
  std::string text = "(";
  for (std::size_t i = 0; i < axes.size(); ++i) {
    if (i) text += ", ";
    text += axes[i] ? "'" + *axes[i] + "'" : "None";
  }
  if (axes.size() == 1) text += ",";
  return text + ")";
}

}  // namespace

DeviceMesh::DeviceMesh(std::vector<std::int64_t> shape, std::vector<std::string> axis_names,
                       std::optional<std::vector<std::string>> devices)
    : shape_(std::move(shape)), axis_names_(std::move(axis_names)) {
  if (shape_.empty() || axis_names_.empty()) {
    throw ValueError(str("DeviceMesh: shape and axis_names cannot be empty; received shape=",
                         shape_to_string(shape_), ", axis_names=", join_names(axis_names_)));
  }
  if (shape_.size() != axis_names_.size()) {
    throw ValueError(str("DeviceMesh: shape and axis_names must have the same length; received ",
                         "shape=", shape_to_string(shape_), ", axis_names=",
                         join_names(axis_names_)));
  }
  for (std::int64_t dim : shape_) {
    if (dim <= 0) {
      throw ValueError(str("DeviceMesh: every mesh dimension must be positive; received shape=",
                           shape_to_string(shape_)));
    }
  }
  std::set<std::string> unique(axis_names_.begin(), axis_names_.end());
  // An empty name is a name, as in Keras; only a repeated one could not be told apart.
  if (unique.size() != axis_names_.size()) {
    throw ValueError(str("DeviceMesh: axis names must be distinct; received ",
                         join_names(axis_names_)));
  }
  devices_ = devices ? std::move(*devices) : list_devices();
  if (static_cast<std::int64_t>(devices_.size()) != shape_size(shape_)) {
    throw ValueError(str("DeviceMesh: shape ", shape_to_string(shape_), " needs ",
                         shape_size(shape_), " devices, but ", devices_.size(),
                         " were given (", join_names(devices_), ")"));
  }
}

int DeviceMesh::axis_index(const std::string& axis_name) const {
  auto found = std::find(axis_names_.begin(), axis_names_.end(), axis_name);
  if (found == axis_names_.end()) {
    throw ValueError(str("'", axis_name, "' is not an axis of the mesh; its axes are ",
                         join_names(axis_names_)));
  }
  return static_cast<int>(found - axis_names_.begin());
}

std::int64_t DeviceMesh::axis_size(const std::string& axis_name) const {
  return shape_[axis_index(axis_name)];
}

std::vector<std::int64_t> DeviceMesh::coordinates(std::int64_t device_index) const {
  if (device_index < 0 || device_index >= size()) {
    throw ValueError(str("device index ", device_index, " is outside the mesh of ", size(),
                         " devices"));
  }
  std::vector<std::int64_t> result(shape_.size());
  for (int d = static_cast<int>(shape_.size()) - 1; d >= 0; --d) {
    result[d] = device_index % shape_[d];
    device_index /= shape_[d];
  }
  return result;
}

std::string DeviceMesh::to_string() const {
  return str("<DeviceMesh shape=", shape_to_string(shape_), ", axis_names=",
             join_names(axis_names_), ">");
}

TensorLayout::TensorLayout(std::vector<Axis> axes, DeviceMeshPtr device_mesh)
    : axes_(std::move(axes)), device_mesh_(std::move(device_mesh)) {
  validate();
}

void TensorLayout::validate() const {
  std::set<std::string> used;
  for (const Axis& axis : axes_) {
    if (!axis) continue;
    if (!used.insert(*axis).second) {
      throw ValueError(str("TensorLayout ", axes_to_string(axes_), " uses mesh axis '", *axis,
                           "' twice; a mesh axis can split at most one tensor dimension"));
    }
    if (device_mesh_) {
      const auto& names = device_mesh_->axis_names();
      if (std::find(names.begin(), names.end(), *axis) == names.end()) {
        throw ValueError(str("Invalid axis names for TensorLayout ", axes_to_string(axes_),
                             ": '", *axis, "' is not an axis of the mesh; valid axis names: ",
                             join_names(names)));
      }
    }
  }
}

void TensorLayout::set_device_mesh(DeviceMeshPtr device_mesh) {
  if (device_mesh_) {
    throw ValueError(str("Cannot override the device mesh of TensorLayout ", axes_to_string(axes_),
                         "; it already has ", device_mesh_->to_string()));
  }
  device_mesh_ = std::move(device_mesh);
  validate();
}

std::string TensorLayout::to_string() const {
  return str("<TensorLayout axes=", axes_to_string(axes_), ", device_mesh=",
             device_mesh_ ? device_mesh_->to_string() : std::string("None"), ">");
}

bool TensorLayout::is_replicated() const {
  return std::none_of(axes_.begin(), axes_.end(), [](const Axis& axis) { return axis.has_value(); });
}

void TensorLayout::check_fits(const Shape& shape, const std::string& what) const {
  if (!device_mesh_) {
    throw ValueError(str(what, ": layout ", axes_to_string(axes_),
                         " has no device mesh; attach one (or put it in a LayoutMap)"));
  }
  if (axes_.size() != shape.size()) {
    throw ValueError(str(what, ": layout ", axes_to_string(axes_), " has ", axes_.size(),
                         " axes but the tensor has shape ", shape_to_string(shape),
                         "; a layout needs one entry (an axis name or None) per dimension"));
  }
  for (std::size_t d = 0; d < shape.size(); ++d) {
    if (!axes_[d]) continue;
    std::int64_t parts = device_mesh_->axis_size(*axes_[d]);
    if (shape[d] % parts != 0) {
      throw ValueError(str(what, ": dimension ", d, " of shape ", shape_to_string(shape),
                           " (size ", shape[d], ") cannot be split evenly over mesh axis '",
                           *axes_[d], "' of size ", parts));
    }
  }
}

std::pair<Shape, Shape> TensorLayout::shard_of(const Shape& shape,
                                               std::int64_t device_index) const {
  check_fits(shape, "TensorLayout::shard_of");
  std::vector<std::int64_t> coordinates = device_mesh_->coordinates(device_index);
  Shape starts(shape.size(), 0), sizes = shape;
  for (std::size_t d = 0; d < shape.size(); ++d) {
    if (!axes_[d]) continue;
    int mesh_axis = device_mesh_->axis_index(*axes_[d]);
    sizes[d] = shape[d] / device_mesh_->shape()[mesh_axis];
    starts[d] = coordinates[mesh_axis] * sizes[d];
  }
  return {starts, sizes};
}

LayoutMap::LayoutMap(DeviceMeshPtr device_mesh) : state_(std::make_shared<State>()) {
  state_->device_mesh = std::move(device_mesh);
}
LayoutMap::LayoutMap(const DeviceMesh& device_mesh)
    : LayoutMap(std::make_shared<DeviceMesh>(device_mesh)) {}

LayoutMap::Slot& LayoutMap::Slot::operator=(TensorLayout layout) {
  map_.insert(key_, std::move(layout));
  return *this;
}

LayoutMap::Slot& LayoutMap::Slot::operator=(const std::vector<TensorLayout::Axis>& axes) {
  map_.insert(key_, TensorLayout(axes));
  return *this;
}

void LayoutMap::insert(const std::string& key, TensorLayout layout) {
  for (const Entry& existing : state_->entries) {
    if (existing.key == key) {
      throw ValueError(str("'", key, "' already exists in the LayoutMap with value ",
                           existing.layout->to_string(), "; keys must be unique"));
    }
  }
  LayoutPattern pattern(key);
  if (!layout.device_mesh() && state_->device_mesh) layout.set_device_mesh(state_->device_mesh);
  state_->entries.push_back({key, std::move(pattern), std::make_shared<TensorLayout>(std::move(layout))});
}

TensorLayoutPtr LayoutMap::get(const std::string& path) const {
  for (const Entry& entry : state_->entries) {
    if (entry.key == path) return entry.layout;
  }
  std::vector<std::string> matches;
  TensorLayoutPtr found;
  for (const Entry& entry : state_->entries) {
    if (entry.pattern.full_match(path)) {
      matches.push_back(entry.key);
      found = entry.layout;
    }
  }
  if (matches.size() > 1) {
    throw ValueError(str("Path '", path, "' matches several LayoutMap keys: ",
                         join_names(matches), "; each path may match at most one key"));
  }
  return found;
}

TensorLayoutPtr LayoutMap::pop(const std::string& key) {
  auto& entries = state_->entries;
  for (auto it = entries.begin(); it != entries.end(); ++it) {
    if (it->key == key) {
      TensorLayoutPtr value = it->layout;
      entries.erase(it);
      return value;
    }
  }
  throw ValueError(str("LayoutMap has no key '", key, "' (pop removes exact keys only)"));
}

std::vector<std::string> LayoutMap::keys() const {
  std::vector<std::string> result;
  for (const Entry& entry : state_->entries) result.push_back(entry.key);
  return result;
}

}  // namespace keras::distribution
