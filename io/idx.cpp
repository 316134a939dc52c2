// IDX reader and the Fashion-MNIST loader. Plain and gzip files are read through one stream
// (IdxReader), which refuses bytes after the gzip data. The header is validated, and the size it promises bounded by
// the file's size, before the tensor is allocated, so a corrupt header yields a clear error
// rather than a multi-gigabyte allocation.
#include "io/idx.h"

#include <zlib.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <bit>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <limits>
#include <memory>
#include <tuple>
#include <utility>

#include "engine/errors.h"
#include "engine/ops.h"
#include "io/file_pointer.h"

namespace keras::io {
namespace {

constexpr std::size_t kMaxRank = 8;
// zlib's documented worst case for deflate is about 1032:1, so a gzip file cannot expand to more
// than this many bytes per stored byte; anything beyond that must be a lie in the header.
constexpr std::uint64_t kMaxGzipExpansion = 1032;
constexpr const char* kFashionMnistHint =
    "install the Debian package dataset-fashion-mnist (apt-get install dataset-fashion-mnist) "
    "or pass the directory that holds the four Fashion-MNIST .gz files";

std::string hex_byte(unsigned value) {
  constexpr const char* digits = "0123456789ABCDEF";
  return str("0x", digits[(value >> 4) & 0xF], digits[value & 0xF]);
}

std::uint32_t big_endian_uint32(const unsigned char* bytes) {
  std::uint32_t value = 0;
  for (int i = 0; i < 4; ++i) value = (value << 8) | bytes[i];
  return value;
}

// Converts `count` big-endian elements of `element_size` bytes to the host's byte order.
void big_endian_to_host(void* data, std::size_t count, std::size_t element_size) {
  if (std::endian::native == std::endian::big || element_size == 1) return;
  auto* bytes = static_cast<unsigned char*>(data);
  for (std::size_t i = 0; i < count; ++i) {
    unsigned char* element = bytes + i * element_size;
    for (std::size_t low = 0, high = element_size - 1; low < high; ++low, --high) {
      std::swap(element[low], element[high]);
    }
  }
}

// Reads a plain or gzip-compressed file as one stream of bytes. zlib's gz* functions would do
// both, but they silently ignore anything after the last gzip member (garbage or zeros), so the
// gzip case runs inflate directly: further gzip members are read on (as gzip -d does), and any
// other byte after the end of a member is an error.
class IdxReader {
 public:
  IdxReader(std::string path, std::uint64_t file_bytes)
      : path_(std::move(path)), file_bytes_(file_bytes) {
    file_.reset(std::fopen(path_.c_str(), "rb"));
    if (!file_) {
      throw FileNotFoundError(str("read_idx: cannot open '", path_, "': ", std::strerror(errno)));
    }
    refill();
    gzip_ = available_ >= 2 && input_[position_] == 0x1F && input_[position_ + 1] == 0x8B;
    if (gzip_) {
      // 16 + MAX_WBITS: a gzip wrapper, whose CRC-32 and length inflate checks at the end.
      if (inflateInit2(&stream_, 16 + MAX_WBITS) != Z_OK) fail("zlib could not start inflating");
      stream_started_ = true;
    }
  }
  ~IdxReader() {
    if (stream_started_) inflateEnd(&stream_);
  }
  IdxReader(const IdxReader&) = delete;
  IdxReader& operator=(const IdxReader&) = delete;

  [[noreturn]] void fail(const std::string& message) const {
    throw FileFormatError(str("read_idx: '", path_, "': ", message));
  }

  // Reads up to `count` bytes and returns how many there were; fewer means the end.
  std::uint64_t read_up_to(void* destination, std::uint64_t count) {
    auto* bytes = static_cast<unsigned char*>(destination);
    std::uint64_t total = 0;
    while (total < count) {
      if (!gzip_) {
        if (available_ == 0 && !refill()) break;
        std::uint64_t chunk = std::min<std::uint64_t>(count - total, available_);
        std::memcpy(bytes + total, input_.data() + position_, chunk);
        position_ += chunk;
        available_ -= chunk;
        total += chunk;
        continue;
      }
      if (finished_) break;
      if (available_ == 0 && !refill()) {
        fail("corrupt gzip stream: the file ends inside a gzip member (truncated?)");
      }
      stream_.next_in = input_.data() + position_;
      stream_.avail_in = static_cast<unsigned>(available_);
      stream_.next_out = bytes + total;
      stream_.avail_out = static_cast<unsigned>(std::min<std::uint64_t>(count - total, 1u << 30));
      unsigned out_before = stream_.avail_out;
      int status = inflate(&stream_, Z_NO_FLUSH);
      total += out_before - stream_.avail_out;
      position_ += available_ - stream_.avail_in;
      available_ = stream_.avail_in;
      if (status == Z_STREAM_END) {
        finish_member();
      } else if (status != Z_OK && status != Z_BUF_ERROR) {
        fail(str("corrupt gzip stream: ", stream_.msg != nullptr ? stream_.msg : zError(status)));
      }
    }
    return total;
  }

  // Counts the bytes left, so a trailing-data error can say how many there are.
  std::uint64_t count_remaining() {
    unsigned char buffer[1 << 16];
    std::uint64_t remaining = 0;
    for (std::uint64_t got; (got = read_up_to(buffer, sizeof buffer)) > 0;) remaining += got;
    return remaining;
  }

  bool is_plain() const { return !gzip_; }

 private:
  // Moves unread input to the front and reads more; false at the end of the file.
  bool refill() {
    if (available_ > 0 && position_ > 0) {
      std::memmove(input_.data(), input_.data() + position_, available_);
    }
    position_ = 0;
    std::size_t got = std::fread(input_.data() + available_, 1, input_.size() - available_,
                                 file_.get());
    if (std::ferror(file_.get())) fail(str("read error: ", std::strerror(errno)));
    read_so_far_ += got;
    available_ += got;
    return got > 0;
  }

  // After a gzip member: the file must end, or another member must begin.
  void finish_member() {
    if (available_ < 2) refill();
    if (available_ == 0) {
      finished_ = true;
      return;
    }
    if (available_ >= 2 && input_[position_] == 0x1F && input_[position_ + 1] == 0x8B) {
      inflateReset(&stream_);
      return;
    }
    std::uint64_t trailing = available_ + (file_bytes_ - std::min(file_bytes_, read_so_far_));
    fail(str(trailing, " bytes after the end of the gzip stream (", quote_input(std::string(
                 reinterpret_cast<const char*>(input_.data() + position_),
                 std::min<std::size_t>(available_, 8))), "...); expected the file to end there"));
  }

  std::string path_;
  std::uint64_t file_bytes_;
  FilePointer file_;
  std::array<unsigned char, 1 << 16> input_{};
  std::size_t position_ = 0;   // first unread byte of input_
  std::size_t available_ = 0;  // unread bytes from position_
  std::uint64_t read_so_far_ = 0;
  bool gzip_ = false;
  z_stream stream_{};
  bool stream_started_ = false;
  bool finished_ = false;
};

}  // namespace

Tensor read_idx(const std::string& path) {
  std::error_code status_error;
  std::filesystem::file_status status = std::filesystem::status(path, status_error);
  if (!std::filesystem::exists(status)) {
    throw FileNotFoundError(str("read_idx: no such file '", path, "'"));
  }
  if (!std::filesystem::is_regular_file(status)) {
    throw FileNotFoundError(str("read_idx: '", path, "' is not a regular file"));
  }
  std::error_code size_error;
  const std::uint64_t file_bytes = std::filesystem::file_size(path, size_error);
  if (size_error) {
    throw FileNotFoundError(
        str("read_idx: cannot read the size of '", path, "': ", size_error.message()));
  }
  IdxReader reader(path, file_bytes);

  unsigned char header[4];
  std::uint64_t got = reader.read_up_to(header, sizeof header);
  if (got < sizeof header) {
    reader.fail(str("the file holds ", got, " bytes, too few for the 4-byte IDX header"));
  }
  if (header[0] != 0 || header[1] != 0) {
    reader.fail(str("not an IDX file: it starts with ", hex_byte(header[0]), " ",
                    hex_byte(header[1]), ", expected 0x00 0x00"));
  }
  DType dtype;
  switch (header[2]) {
    case 0x08: dtype = DType::uint8; break;
    case 0x0C: dtype = DType::int32; break;
    case 0x0D: dtype = DType::float32; break;
    case 0x0E: dtype = DType::float64; break;
    default:
      reader.fail(str("unsupported IDX element type ", hex_byte(header[2]),
                      "; expected 0x08 (uint8), 0x0C (int32), 0x0D (float32) or 0x0E (float64)"));
  }
  const std::size_t rank = header[3];
  if (rank == 0 || rank > kMaxRank) {
    reader.fail(str("the header gives ", rank, " dimensions, expected 1 to ", kMaxRank));
  }

  unsigned char dim_bytes[4 * kMaxRank];
  got = reader.read_up_to(dim_bytes, 4 * rank);
  if (got < 4 * rank) {
    reader.fail(str("truncated header: expected ", 4 * rank, " bytes of dimensions, got ", got));
  }
  Shape shape;
  std::uint64_t element_count = 1;
  for (std::size_t axis = 0; axis < rank; ++axis) {
    std::uint32_t dim = big_endian_uint32(dim_bytes + 4 * axis);
    // Dimensions are below 2^32, so overflow only shows in the product.
    if (__builtin_mul_overflow(element_count, dim, &element_count)) {
      reader.fail("the dimensions describe more elements than fit in 64 bits");
    }
    shape.push_back(static_cast<std::int64_t>(dim));
  }
  // (4294967295, 4294967050, 0) has no elements, yet its strides overflow: the engine's shape
  // rule counts zeros as ones, so such a shape is corrupt here too.
  if (!checked_shape_size(shape)) {
    reader.fail(str("the dimensions ", shape_to_string(shape), " describe more elements than fit ",
                    "in 64 bits (counting zero dimensions as ones)"));
  }
  std::uint64_t data_bytes = 0;
  if (element_count > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()) ||
      __builtin_mul_overflow(element_count, dtype_size(dtype), &data_bytes)) {
    reader.fail(str("shape ", shape_to_string(shape), " has more bytes than fit in 64 bits"));
  }

  // Bound the promised size by what the file can hold before allocating it.
  const std::uint64_t header_bytes = 4 + 4 * rank;
  if (reader.is_plain() && data_bytes > file_bytes - header_bytes) {
    reader.fail(str("truncated data: shape ", shape_to_string(shape), " needs ", data_bytes,
                    " bytes of ", dtype_name(dtype), " data, got ", file_bytes - header_bytes));
  }
  if (!reader.is_plain() && data_bytes / kMaxGzipExpansion > file_bytes) {
    reader.fail(str("truncated data: shape ", shape_to_string(shape), " needs ", data_bytes,
                    " bytes of ", dtype_name(dtype), " data, more than the ", file_bytes,
                    "-byte gzip file can hold"));
  }

  Tensor tensor = Tensor::empty(shape, dtype);
  got = reader.read_up_to(tensor.raw_data(), data_bytes);
  if (got < data_bytes) {
    reader.fail(str("truncated data: shape ", shape_to_string(shape), " needs ", data_bytes,
                    " bytes of ", dtype_name(dtype), " data, got ", got));
  }
  if (std::uint64_t trailing = reader.count_remaining(); trailing > 0) {
    reader.fail(str(trailing, " trailing bytes after the ", data_bytes, " data bytes that shape ",
                    shape_to_string(shape), " needs"));
  }
  big_endian_to_host(tensor.raw_data(), static_cast<std::size_t>(element_count),
                     dtype_size(dtype));
  return tensor;
}

FashionMnist load_fashion_mnist(const std::string& directory) {
  namespace fs = std::filesystem;
  if (!fs::is_directory(directory)) {
    throw FileNotFoundError(str("load_fashion_mnist: no directory '", directory, "'; ",
                                kFashionMnistHint));
  }
  auto read = [&](const char* name) {
    fs::path path = fs::path(directory) / name;
    if (!fs::exists(path)) {
      throw FileNotFoundError(str("load_fashion_mnist: no file '", path.string(), "'; ",
                                  kFashionMnistHint));
    }
    return std::pair{read_idx(path.string()), path.string()};
  };
  auto read_split = [&](const char* images_name, const char* labels_name) {
    auto [images, images_path] = read(images_name);
    auto [labels, labels_path] = read(labels_name);
    if (images.dtype() != DType::uint8 || images.rank() != 3 || images.dim(1) != 28 ||
        images.dim(2) != 28) {
      throw FileFormatError(str("load_fashion_mnist: '", images_path, "' holds a ",
                                dtype_name(images.dtype()), " tensor of shape ",
                                shape_to_string(images.shape()),
                                ", expected uint8 images of shape (N, 28, 28)"));
    }
    if (labels.dtype() != DType::uint8 || labels.rank() != 1) {
      throw FileFormatError(str("load_fashion_mnist: '", labels_path, "' holds a ",
                                dtype_name(labels.dtype()), " tensor of shape ",
                                shape_to_string(labels.shape()),
                                ", expected uint8 labels of shape (N,)"));
    }
    if (images.dim(0) != labels.dim(0)) {
      throw FileFormatError(str("load_fashion_mnist: '", images_path, "' holds ", images.dim(0),
                                " images but '", labels_path, "' holds ", labels.dim(0),
                                " labels; expected one label per image"));
    }
    const std::uint8_t* values = labels.data<std::uint8_t>();
    for (std::int64_t i = 0; i < labels.size(); ++i) {
      if (values[i] >= 10) {
        throw FileFormatError(str("load_fashion_mnist: '", labels_path, "' has label ",
                                  static_cast<int>(values[i]), " at index ", i,
                                  ", expected a class in [0, 10)"));
      }
    }
    return std::pair{images, labels.astype(DType::int64)};
  };
  FashionMnist data;
  std::tie(data.x_train, data.y_train) =
      read_split("train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz");
  std::tie(data.x_test, data.y_test) =
      read_split("t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz");
  return data;
}

Tensor image_features(const Tensor& images) {
  if (images.rank() < 2) {
    throw ShapeError(str("image_features: expected images of shape (N, H, W), got ",
                         shape_to_string(images.shape())));
  }
  return ops::reshape(images.astype(float32), {images.dim(0), -1}) * (1.0 / 255.0);
}

}  // namespace keras::io
