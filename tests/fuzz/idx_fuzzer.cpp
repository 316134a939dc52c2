// libFuzzer harness for keras::io::read_idx: the input is the whole file (plain or gzip). A
// keras::Error is the expected outcome for a corrupt file; any other exception escapes and
// crashes the harness. Every input is also decoded by a small reference reader written from the
// format's description (one-shot inflate of every gzip member, nothing after them; the header
// rules of io/idx.h); read_idx must accept exactly what the reference accepts, with the same
// dtype, shape and values.
#include <zlib.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>

#include "engine/errors.h"
#include "engine/shape.h"
#include "fuzz_util.h"
#include "io/idx.h"

namespace {

using keras::fuzz::fail;
using keras::str;

const keras::fuzz::ScratchFiles& files() {
  static const keras::fuzz::ScratchFiles scratch{{keras::fuzz::scratch_path("idx", ".idx"), ""}};
  return scratch;
}

bool is_gzip(const std::uint8_t* data, std::size_t size) {
  return size >= 2 && data[0] == 0x1F && data[1] == 0x8B;
}

// Every gzip member inflated and concatenated (as gzip -d does), or nullopt when a member is
// corrupt or cut short, or anything but another member follows one.
std::optional<std::string> gunzip(const std::uint8_t* data, std::size_t size) {
  std::string out;
  std::size_t position = 0;
  do {
    if (!is_gzip(data + position, size - position)) return std::nullopt;
    z_stream stream{};
    if (inflateInit2(&stream, 16 + MAX_WBITS) != Z_OK) fail("inflateInit2 failed");
    stream.next_in = const_cast<Bytef*>(data + position);
    stream.avail_in = static_cast<uInt>(size - position);
    int status = Z_OK;
    while (status == Z_OK) {
      unsigned char buffer[1 << 16];
      stream.next_out = buffer;
      stream.avail_out = sizeof buffer;
      status = inflate(&stream, Z_NO_FLUSH);
      out.append(reinterpret_cast<const char*>(buffer), sizeof buffer - stream.avail_out);
    }
    position = size - stream.avail_in;
    inflateEnd(&stream);
    if (status != Z_STREAM_END) return std::nullopt;
  } while (position < size);
  return out;
}

struct Reference {
  keras::DType dtype;
  keras::Shape shape;
  std::string big_endian_data;
};

// The header rules of io/idx.h: 0x00 0x00, a supported type, 1 to 8 dimensions whose element
// count (zeros counted as ones, the engine's rule) and byte count fit, then exactly the data.
std::optional<Reference> parse(const std::string& bytes) {
  if (bytes.size() < 4 || bytes[0] != 0 || bytes[1] != 0) return std::nullopt;
  Reference result{};
  switch (static_cast<unsigned char>(bytes[2])) {
    case 0x08: result.dtype = keras::DType::uint8; break;
    case 0x0C: result.dtype = keras::DType::int32; break;
    case 0x0D: result.dtype = keras::DType::float32; break;
    case 0x0E: result.dtype = keras::DType::float64; break;
    default: return std::nullopt;
  }
  std::size_t rank = static_cast<unsigned char>(bytes[3]);
  if (rank < 1 || rank > 8 || bytes.size() < 4 + 4 * rank) return std::nullopt;
  for (std::size_t axis = 0; axis < rank; ++axis) {
    std::uint32_t dim = 0;
    for (int i = 0; i < 4; ++i) dim = (dim << 8) | static_cast<unsigned char>(bytes[4 + 4 * axis + i]);
    result.shape.push_back(dim);
  }
  std::optional<std::int64_t> count = keras::checked_shape_size(result.shape);
  std::uint64_t data_bytes = 0;
  if (!count || __builtin_mul_overflow(static_cast<std::uint64_t>(*count),
                                       keras::dtype_size(result.dtype), &data_bytes)) {
    return std::nullopt;
  }
  if (bytes.size() - (4 + 4 * rank) != data_bytes) return std::nullopt;
  result.big_endian_data = bytes.substr(4 + 4 * rank);
  return result;
}

std::string to_big_endian(const keras::Tensor& tensor) {
  std::string bytes(static_cast<const char*>(tensor.raw_data()), tensor.nbytes());
  std::size_t element = keras::dtype_size(tensor.dtype());
  for (std::size_t i = 0; element > 1 && i < bytes.size(); i += element) {
    for (std::size_t low = i, high = i + element - 1; low < high; ++low, --high) {
      std::swap(bytes[low], bytes[high]);
    }
  }
  return bytes;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string& path = files().paths[0];
  keras::fuzz::write_file(path, data, size);

  std::optional<Reference> expected;
  if (is_gzip(data, size)) {
    if (std::optional<std::string> plain = gunzip(data, size)) expected = parse(*plain);
  } else {
    expected = parse(std::string(reinterpret_cast<const char*>(data), size));
  }

  keras::Tensor tensor;
  try {
    tensor = keras::io::read_idx(path);
  } catch (const keras::Error& error) {
    if (expected) {
      fail(str("read_idx refused a valid ", is_gzip(data, size) ? "gzip" : "plain", " file of ",
               keras::shape_to_string(expected->shape), ": ", error.what()));
    }
    return 0;  // a corrupt file, reported as such
  }
  if (!expected) {
    fail(str("read_idx accepted a corrupt ", is_gzip(data, size) ? "gzip" : "plain", " file of ",
             size, " bytes as ", keras::dtype_name(tensor.dtype()), " ",
             keras::shape_to_string(tensor.shape())));
  }
  if (tensor.dtype() != expected->dtype || tensor.shape() != expected->shape ||
      to_big_endian(tensor) != expected->big_endian_data) {
    fail(str("read_idx read ", keras::dtype_name(tensor.dtype()), " ",
             keras::shape_to_string(tensor.shape()), ", the reference ",
             keras::dtype_name(expected->dtype), " ", keras::shape_to_string(expected->shape),
             " (or different values)"));
  }
  return 0;
}
