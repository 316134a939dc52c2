// HDF5 files through Debian's libhdf5 (its C API): the groups, string attributes and datasets
// that Keras 3's weight files (.weights.h5) are made of, and nothing more. Every failure of the
// library, including a damaged or truncated file, becomes a typed error naming the file and
// the object; HDF5's own printing of its error stack is switched off. A dataset is read only
// after its shape was checked against what the caller expects, and may be read by block (a
// hyperslab), so a file that lies about its sizes never makes this process allocate what the
// file says, and a process of a sharded model reads only its own block.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "engine/tensor.h"

namespace keras::io::hdf5 {

// An HDF5 identifier that closes itself (file, group, dataset, dataspace, type, attribute).
class Handle {
 public:
  Handle() = default;
  explicit Handle(std::int64_t id) : id_(id) {}
  ~Handle();
  Handle(Handle&& other) noexcept : id_(other.id_) { other.id_ = -1; }
  Handle& operator=(Handle&& other) noexcept;
  Handle(const Handle&) = delete;
  Handle& operator=(const Handle&) = delete;
  std::int64_t get() const { return id_; }
  // Hands the identifier over without closing it.
  std::int64_t release() {
    std::int64_t id = id_;
    id_ = -1;
    return id;
  }
  bool valid() const { return id_ >= 0; }

 private:
  std::int64_t id_ = -1;
};

// What a dataset holds, before reading it.
struct DatasetInfo {
  Shape shape;
  bool floating = false;  // IEEE float of any width, or bfloat16; else an integer (other classes are refused)
  bool bfloat16 = false;  // Keras' bfloat16: 2-byte opaque elements, the dataset's attribute dtype="bfloat16"
  std::size_t element_bytes = 0;
};

class Group {
 public:
  // `file_path` and `path` only word errors ("'m.weights.h5': group 'layers/dense'").
  Group(Handle handle, std::string file_path, std::string path);

  const std::string& path() const { return path_; }
  // Whether `name` is a member. A soft or external link is refused (FileFormatError).
  bool has(const std::string& name) const;
  bool has_group(const std::string& name) const;
  bool has_dataset(const std::string& name) const;
  // The object's address in the file: the same for every link to one object, so a walk can
  // tell a group it has seen (a cycle of hard links) from a new one.
  std::uint64_t object_address(const std::string& name) const;
  // The names of this group's members, in HDF5's name order.
  std::vector<std::string> member_names() const;
  // Throws FileFormatError when there is no group `name`.
  Group group(const std::string& name) const;
  Group create_group(const std::string& name);

  // A string attribute as h5py writes one (variable-length UTF-8); reads fixed-length too.
  void set_string_attribute(const std::string& name, const std::string& value);
  std::optional<std::string> string_attribute(const std::string& name) const;

  // Writes `tensor` (float32, float64, float16, bfloat16, int32 or int64; copied to the CPU) as
  // a contiguous dataset of its shape, little-endian, as numpy arrays are written by h5py
  // (bfloat16 as Keras writes it: opaque 2-byte elements and the attribute dtype="bfloat16").
  void write_dataset(const std::string& name, const Tensor& tensor);
  // Throws FileFormatError when there is no dataset `name` or its element class is neither
  // float nor integer (nor Keras' bfloat16), or its rank is over 32.
  DatasetInfo dataset_info(const std::string& name) const;
  // The dataset converted to `dtype` (any of write_dataset's); only the block at `starts`
  // of `sizes` when they are given (checked against the dataset's shape).
  Tensor read_dataset(const std::string& name, DType dtype, const Shape& starts = {},
                      const Shape& sizes = {}) const;

 private:
  std::string describe(const std::string& name) const;
  // Refuses data kept outside the file, chunks larger than the dataset and unknown filters.
  void check_storage(const Handle& dataset, const std::string& name, const DatasetInfo& info, DType dtype) const;
  Handle handle_;
  std::string file_path_;
  std::string path_;
};

class File {
 public:
  // A new file at `path` (truncating one there). Throws Error when it cannot be created.
  static File create(const std::string& path);
  // An existing file, read-only. Throws FileNotFoundError when there is no file at `path`,
  // FileFormatError when it is not an HDF5 file (or is damaged where the superblock lies).
  static File open(const std::string& path);

  Group root() const;
  // Flushes and closes; throws Error when the library cannot write what it still holds.
  void close();
  const std::string& path() const { return path_; }

 private:
  File(Handle handle, std::string path) : handle_(std::move(handle)), path_(std::move(path)) {}
  Handle handle_;
  std::string path_;
};

}  // namespace keras::io::hdf5
