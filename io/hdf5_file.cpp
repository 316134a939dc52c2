// HDF5 groups, string attributes and datasets over libhdf5's C API, with typed errors.
#include "io/hdf5_file.h"

#include <hdf5.h>

#include <filesystem>
#include <limits>
#include <utility>

#include "engine/errors.h"
#include "engine/ops.h"

namespace keras::io::hdf5 {
namespace {

static_assert(std::is_same_v<hid_t, std::int64_t>, "HDF5 1.10+ identifiers are 64-bit");

// HDF5 prints its error stack on stderr by default; our errors say what failed instead.
// Plugins stay unloaded: a file naming an unknown filter must not make HDF5 dlopen a library.
void silence_library() {
  static const bool silenced = [] {
    H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
    H5PLset_loading_state(0);
    return true;
  }();
  (void)silenced;
}

// HDF5's largest rank; a file claiming more is damaged.
constexpr int kMaxRank = 32;

herr_t close_any(hid_t id) {
  switch (H5Iget_type(id)) {
    case H5I_FILE: return H5Fclose(id);
    case H5I_GROUP: return H5Gclose(id);
    case H5I_DATASET: return H5Dclose(id);
    case H5I_DATASPACE: return H5Sclose(id);
    case H5I_DATATYPE: return H5Tclose(id);
    case H5I_ATTR: return H5Aclose(id);
    case H5I_GENPROP_LST: return H5Pclose(id);
    default: return -1;
  }
}

Handle checked(hid_t id, const std::string& what) {
  if (id < 0) throw FileFormatError(what);
  return Handle(id);
}

// The 16-bit types as h5py writes them: float16 is an IEEE half (sign bit 15, exponent bits
// 10-14 biased by 15, mantissa bits 0-9); bfloat16, which HDF5 and numpy lack, is a 2-byte
// opaque type whose dataset carries the attribute dtype="bfloat16" (Keras' saving_lib). Made
// once; the library frees them when it closes.
hid_t half_float_type() {
  static const hid_t type = [] {
    hid_t made = H5Tcopy(H5T_IEEE_F32LE);
    if (made < 0 || H5Tset_fields(made, 15, 10, 5, 0, 10) < 0 || H5Tset_size(made, 2) < 0 ||
        H5Tset_ebias(made, 15) < 0 || H5Tlock(made) < 0) {
      return hid_t{-1};
    }
    return made;
  }();
  if (type < 0) throw Error("HDF5 could not make its float16 type (H5Tcopy/H5Tset_fields failed)");
  return type;
}

hid_t bfloat16_opaque_type() {
  static const hid_t type = [] {
    hid_t made = H5Tcreate(H5T_OPAQUE, 2);
    return made < 0 || H5Tlock(made) < 0 ? hid_t{-1} : made;
  }();
  if (type < 0) throw Error("HDF5 could not make the 2-byte opaque type of bfloat16 (H5Tcreate failed)");
  return type;
}

hid_t memory_type_of(DType dtype) {
  switch (dtype) {
    case float32: return H5T_NATIVE_FLOAT;
    case float64: return H5T_NATIVE_DOUBLE;
    case int32: return H5T_NATIVE_INT32;
    case int64: return H5T_NATIVE_INT64;
    case float16: return half_float_type();
    case bfloat16: return bfloat16_opaque_type();
    default:
      throw DTypeError(str("HDF5 datasets hold float32, float64, float16, bfloat16, int32 or int64 here, got ",
                           dtype_name(dtype)));
  }
}

hid_t file_type_of(DType dtype) {
  switch (dtype) {
    case float32: return H5T_IEEE_F32LE;
    case float64: return H5T_IEEE_F64LE;
    case int32: return H5T_STD_I32LE;
    case int64: return H5T_STD_I64LE;
    default: return memory_type_of(dtype);  // the 16-bit types, or throws
  }
}

// A string attribute of any object (group or dataset), as h5py writes one.
void write_string_attribute(hid_t object, const std::string& name, const std::string& value, const std::string& where) {
  Handle type(H5Tcopy(H5T_C_S1));
  H5Tset_size(type.get(), H5T_VARIABLE);
  H5Tset_cset(type.get(), H5T_CSET_UTF8);
  Handle space(H5Screate(H5S_SCALAR));
  Handle attribute(H5Acreate2(object, name.c_str(), type.get(), space.get(), H5P_DEFAULT, H5P_DEFAULT));
  const char* text = value.c_str();
  if (!attribute.valid() || H5Awrite(attribute.get(), type.get(), &text) < 0) {
    throw Error(str(where, ": its attribute '", name, "' cannot be written"));
  }
}

std::optional<std::string> read_string_attribute(hid_t object, const std::string& name) {
  if (H5Aexists(object, name.c_str()) <= 0) return std::nullopt;
  Handle attribute(H5Aopen(object, name.c_str(), H5P_DEFAULT));
  Handle type(H5Aget_type(attribute.get()));
  Handle space(H5Aget_space(attribute.get()));
  if (!attribute.valid() || !type.valid() || H5Tget_class(type.get()) != H5T_STRING ||
      H5Sget_simple_extent_npoints(space.get()) != 1) {
    return std::nullopt;
  }
  if (H5Tis_variable_str(type.get()) > 0) {
    Handle memory(H5Tcopy(H5T_C_S1));
    H5Tset_size(memory.get(), H5T_VARIABLE);
    H5Tset_cset(memory.get(), H5Tget_cset(type.get()));
    char* text = nullptr;
    if (H5Aread(attribute.get(), memory.get(), &text) < 0 || text == nullptr) return std::nullopt;
    std::string value(text);
    H5free_memory(text);
    return value;
  }
  std::size_t size = H5Tget_size(type.get());
  if (size == 0 || size > (1u << 20)) return std::nullopt;
  std::string value(size, '\0');
  if (H5Aread(attribute.get(), type.get(), value.data()) < 0) return std::nullopt;
  value.resize(value.find('\0') == std::string::npos ? size : value.find('\0'));
  return value;
}

}  // namespace

Handle::~Handle() {
  if (id_ >= 0) close_any(id_);
}

Handle& Handle::operator=(Handle&& other) noexcept {
  if (this != &other) {
    if (id_ >= 0) close_any(id_);
    id_ = other.id_;
    other.id_ = -1;
  }
  return *this;
}

Group::Group(Handle handle, std::string file_path, std::string path)
    : handle_(std::move(handle)), file_path_(std::move(file_path)), path_(std::move(path)) {}

std::string Group::describe(const std::string& name) const {
  std::string full = path_.empty() ? name : name.empty() ? path_ : path_ + "/" + name;
  return str("'", file_path_, "': '", full.empty() ? "/" : full, "'");
}

bool Group::has(const std::string& name) const {
  // H5Lexists takes one link name here (no '/'), so no intermediate group can be missing.
  if (name.empty() || name.find('/') != std::string::npos) return false;
  if (H5Lexists(handle_.get(), name.c_str(), H5P_DEFAULT) <= 0) return false;
  // Only hard links: a soft or external one could lead to another file (or a FIFO).
  H5L_info_t link;
  if (H5Lget_info(handle_.get(), name.c_str(), &link, H5P_DEFAULT) < 0 || link.type != H5L_TYPE_HARD) {
    throw FileFormatError(str(describe(name), " is a soft or external link; weight files hold only their own "
                              "groups and datasets"));
  }
  return true;
}

std::uint64_t Group::object_address(const std::string& name) const {
  H5O_info_t info;
  if (!has(name) || H5Oget_info_by_name(handle_.get(), name.c_str(), &info, H5P_DEFAULT) < 0) {
    throw FileFormatError(str(describe(name), " cannot be read (damaged file?)"));
  }
  return static_cast<std::uint64_t>(info.addr);
}

namespace {
H5O_type_t object_type(hid_t group, const std::string& name) {
  H5O_info_t info;
  if (H5Oget_info_by_name(group, name.c_str(), &info, H5P_DEFAULT) < 0) return H5O_TYPE_UNKNOWN;
  return info.type;
}
}  // namespace

bool Group::has_group(const std::string& name) const {
  return has(name) && object_type(handle_.get(), name) == H5O_TYPE_GROUP;
}

bool Group::has_dataset(const std::string& name) const {
  return has(name) && object_type(handle_.get(), name) == H5O_TYPE_DATASET;
}

std::vector<std::string> Group::member_names() const {
  std::vector<std::string> names;
  // No exception may cross libhdf5's C frames: a failure stops the iteration instead.
  auto collect = [](hid_t, const char* name, const H5L_info_t*, void* data) -> herr_t {
    try {
      static_cast<std::vector<std::string>*>(data)->emplace_back(name);
      return 0;
    } catch (...) {
      return -1;
    }
  };
  hsize_t index = 0;
  if (H5Literate(handle_.get(), H5_INDEX_NAME, H5_ITER_INC, &index, collect, &names) < 0) {
    throw FileFormatError(str(describe(""), " cannot be listed (damaged file?)"));
  }
  return names;
}

Group Group::group(const std::string& name) const {
  if (!has_group(name)) throw FileFormatError(str(describe(name), " is not a group in the file"));
  return Group(checked(H5Gopen2(handle_.get(), name.c_str(), H5P_DEFAULT),
                       str(describe(name), " cannot be opened")),
               file_path_, path_.empty() ? name : path_ + "/" + name);
}

Group Group::create_group(const std::string& name) {
  Handle created(H5Gcreate2(handle_.get(), name.c_str(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT));
  if (!created.valid()) throw Error(str(describe(name), ": the group cannot be created"));
  return Group(std::move(created), file_path_, path_.empty() ? name : path_ + "/" + name);
}

void Group::set_string_attribute(const std::string& name, const std::string& value) {
  write_string_attribute(handle_.get(), name, value, describe(""));
}

std::optional<std::string> Group::string_attribute(const std::string& name) const {
  return read_string_attribute(handle_.get(), name);
}

void Group::write_dataset(const std::string& name, const Tensor& tensor) {
  Tensor host = tensor.device().is_cpu() ? tensor : tensor.to(Device::cpu());
  if (host.impl() == tensor.impl()) host = tensor.clone();  // contiguous, and ours to read
  std::vector<hsize_t> dims(host.shape().begin(), host.shape().end());
  Handle space(dims.empty() ? H5Screate(H5S_SCALAR)
                            : H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr));
  Handle dataset(H5Dcreate2(handle_.get(), name.c_str(), file_type_of(host.dtype()), space.get(),
                            H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT));
  if (!dataset.valid() || H5Dwrite(dataset.get(), memory_type_of(host.dtype()), H5S_ALL, H5S_ALL,
                                   H5P_DEFAULT, host.raw_data()) < 0) {
    throw Error(str(describe(name), ": the dataset cannot be written"));
  }
  if (host.dtype() == bfloat16) write_string_attribute(dataset.get(), "dtype", "bfloat16", describe(name));
}

DatasetInfo Group::dataset_info(const std::string& name) const {
  if (!has_dataset(name)) throw FileFormatError(str(describe(name), " is not a dataset in the file"));
  Handle dataset = checked(H5Dopen2(handle_.get(), name.c_str(), H5P_DEFAULT),
                           str(describe(name), " cannot be opened"));
  Handle type = checked(H5Dget_type(dataset.get()), str(describe(name), " has no readable type"));
  Handle space = checked(H5Dget_space(dataset.get()), str(describe(name), " has no readable shape"));
  DatasetInfo info;
  H5T_class_t element_class = H5Tget_class(type.get());
  info.bfloat16 = element_class == H5T_OPAQUE && H5Tget_size(type.get()) == 2 &&
                  read_string_attribute(dataset.get(), "dtype") == std::optional<std::string>("bfloat16");
  if (element_class != H5T_FLOAT && element_class != H5T_INTEGER && !info.bfloat16) {
    throw FileFormatError(str(describe(name), " holds neither floats nor integers (nor Keras' bfloat16)"));
  }
  info.floating = element_class == H5T_FLOAT || info.bfloat16;
  info.element_bytes = H5Tget_size(type.get());
  int rank = H5Sget_simple_extent_ndims(space.get());
  if (rank < 0 || rank > kMaxRank) {
    throw FileFormatError(str(describe(name), " has rank ", rank, "; expected 0 to ", kMaxRank));
  }
  std::vector<hsize_t> dims(static_cast<std::size_t>(rank));
  H5Sget_simple_extent_dims(space.get(), dims.data(), nullptr);
  for (hsize_t dim : dims) {
    if (dim > static_cast<hsize_t>(std::numeric_limits<std::int64_t>::max() / 2)) {
      throw FileFormatError(str(describe(name), " claims a dimension of ", dim));
    }
    info.shape.push_back(static_cast<std::int64_t>(dim));
  }
  return info;
}

void Group::check_storage(const Handle& dataset, const std::string& name, const DatasetInfo& info, DType dtype) const {
  // The data must lie in this file, in a layout HDF5 reads without surprises: not in other
  // files (external storage, virtual datasets), and in chunks no larger than the dataset
  // (HDF5 reads a whole chunk to give any part of it), compressed by deflate at most.
  Handle properties = checked(H5Dget_create_plist(dataset.get()), str(describe(name), " has no storage properties"));
  H5D_layout_t layout = H5Pget_layout(properties.get());
  if (layout == H5D_VIRTUAL || H5Pget_external_count(properties.get()) != 0) {
    throw FileFormatError(str(describe(name), " keeps its data outside the file (external or virtual storage)"));
  }
  if (layout != H5D_CHUNKED) return;
  int rank = H5Pget_chunk(properties.get(), kMaxRank, nullptr);
  std::vector<hsize_t> chunk(static_cast<std::size_t>(std::max(rank, 0)));
  if (rank < 0 || H5Pget_chunk(properties.get(), rank, chunk.data()) < 0) {
    throw FileFormatError(str(describe(name), " has an unreadable chunk shape"));
  }
  double chunk_elements = 1, elements = 1;
  for (hsize_t dimension : chunk) chunk_elements *= static_cast<double>(dimension);
  for (std::int64_t dimension : info.shape) elements *= static_cast<double>(dimension);
  if (chunk_elements > 2 * elements + 65536) {
    throw FileFormatError(str(describe(name), " is stored in chunks of ", chunk_elements, " elements, more than its ",
                              elements));
  }
  int filters = H5Pget_nfilters(properties.get());
  for (int index = 0; index < filters; ++index) {
    unsigned flags = 0;
    std::size_t count = 0;
    H5Z_filter_t filter = H5Pget_filter2(properties.get(), static_cast<unsigned>(index), &flags, &count, nullptr, 0,
                                         nullptr, nullptr);
    if (filter != H5Z_FILTER_DEFLATE && filter != H5Z_FILTER_SHUFFLE && filter != H5Z_FILTER_FLETCHER32) {
      throw FileFormatError(str(describe(name), " is compressed by filter ", filter,
                                "; weight files here may use deflate, shuffle and fletcher32 only"));
    }
  }
  (void)dtype;
}

Tensor Group::read_dataset(const std::string& name, DType dtype, const Shape& starts,
                           const Shape& sizes) const {
  DatasetInfo info = dataset_info(name);
  Shape block = sizes.empty() ? info.shape : sizes;
  if (block.size() != info.shape.size() || (!starts.empty() && starts.size() != block.size())) {
    throw ShapeError(str(describe(name), ": a block of rank ", block.size(), " asked of a dataset of shape ",
                         shape_to_string(info.shape)));
  }
  for (std::size_t axis = 0; axis < block.size(); ++axis) {
    std::int64_t start = starts.empty() ? 0 : starts[axis];
    if (start < 0 || block[axis] < 0 || start + block[axis] > info.shape[axis]) {
      throw ShapeError(str(describe(name), ": block ", shape_to_string(starts), " + ",
                           shape_to_string(block), " lies outside its shape ",
                           shape_to_string(info.shape)));
    }
  }
  // 16-bit data and tensors: Keras' bfloat16 datasets are read as they are stored and converted
  // here (HDF5 converts no opaque type); a 16-bit tensor from any other dataset but a float16
  // one is read as float32 (exact for 16- and 32-bit data; float64 data rounds twice, through
  // float32, as a cast from float64 does here) and rounded to nearest even here, not by HDF5.
  if (info.bfloat16 && dtype != bfloat16) {
    return ops::cast(read_dataset(name, bfloat16, starts, sizes), dtype);
  }
  const bool stored_float16 = info.floating && !info.bfloat16 && info.element_bytes == 2;
  if ((dtype == bfloat16 && !info.bfloat16) || (dtype == float16 && !stored_float16)) {
    return ops::cast(read_dataset(name, float32, starts, sizes), dtype);
  }
  Tensor result = Tensor::empty(block, dtype);
  if (result.size() == 0) return result;
  Handle dataset = checked(H5Dopen2(handle_.get(), name.c_str(), H5P_DEFAULT),
                           str(describe(name), " cannot be opened"));
  check_storage(dataset, name, info, dtype);
  Handle file_space = checked(H5Dget_space(dataset.get()), str(describe(name), " has no shape"));
  Handle memory_space;
  if (!block.empty()) {
    std::vector<hsize_t> offsets(block.size()), counts(block.size());
    for (std::size_t axis = 0; axis < block.size(); ++axis) {
      offsets[axis] = static_cast<hsize_t>(starts.empty() ? 0 : starts[axis]);
      counts[axis] = static_cast<hsize_t>(block[axis]);
    }
    if (H5Sselect_hyperslab(file_space.get(), H5S_SELECT_SET, offsets.data(), nullptr,
                            counts.data(), nullptr) < 0) {
      throw FileFormatError(str(describe(name), ": its block cannot be selected"));
    }
    memory_space = Handle(H5Screate_simple(static_cast<int>(counts.size()), counts.data(), nullptr));
  } else {
    memory_space = Handle(H5Screate(H5S_SCALAR));
  }
  // Opaque elements are read as the file's own type (HDF5 converts opaque types only between
  // equal tags), which for Keras' bfloat16 is the raw 16 bits.
  Handle stored_type;
  if (info.bfloat16) stored_type = checked(H5Dget_type(dataset.get()), str(describe(name), " has no readable type"));
  if (H5Dread(dataset.get(), info.bfloat16 ? stored_type.get() : memory_type_of(dtype), memory_space.get(),
              file_space.get(), H5P_DEFAULT, result.raw_data()) < 0) {
    throw FileFormatError(str(describe(name), " cannot be read (truncated or damaged file?)"));
  }
  return result;
}

File File::create(const std::string& path) {
  silence_library();
  hid_t id = H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  if (id < 0) throw Error(str("'", path, "' cannot be created as an HDF5 file"));
  return File(Handle(id), path);
}

File File::open(const std::string& path) {
  silence_library();
  std::error_code error;
  if (!std::filesystem::exists(path, error)) throw FileNotFoundError(str("'", path, "': no such file"));
  if (!std::filesystem::is_regular_file(path, error)) {
    throw FileFormatError(str("'", path, "' is not a regular file (a directory, a FIFO, a device?)"));
  }
  if (H5Fis_hdf5(path.c_str()) <= 0) {
    throw FileFormatError(str("'", path, "' is not an HDF5 file"));
  }
  hid_t id = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  if (id < 0) throw FileFormatError(str("'", path, "' cannot be opened as an HDF5 file (damaged?)"));
  return File(Handle(id), path);
}

Group File::root() const {
  return Group(checked(H5Gopen2(handle_.get(), "/", H5P_DEFAULT),
                       str("'", path_, "': its root group cannot be opened")),
               path_, "");
}

void File::close() {
  if (!handle_.valid()) return;
  hid_t id = handle_.get();
  bool flushed = H5Fflush(id, H5F_SCOPE_GLOBAL) >= 0;
  // Closed here, its result checked: the last writes may happen in the close itself.
  bool closed = H5Fclose(handle_.release()) >= 0;
  if (!flushed || !closed) throw Error(str("'", path_, "': HDF5 could not write what it holds"));
}

}  // namespace keras::io::hdf5
