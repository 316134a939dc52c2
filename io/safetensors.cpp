// safetensors reader and writer. The writer goes through an AtomicFile (io/atomic_file.h), so
// readers see the old file or the complete new one. The reader treats the file as untrusted:
// the JSON nesting depth is bounded while parsing (a header of 100,000 nested arrays overflowed
// the stack), duplicate keys and bytes after the JSON are refused as the reference
// implementation refuses them, every header field is type-checked, messages quote at most a
// few dozen bytes of the file, and the byte ranges must tile the data section exactly before
// any tensor is allocated from them.
#include "io/safetensors.h"

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <limits>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>

#include "engine/errors.h"
#include "io/atomic_file.h"
#include "io/file_pointer.h"

namespace keras::io {
namespace {

using Json = nlohmann::json;

// The safetensors reference implementation refuses larger headers; so do we, so that a corrupt
// length cannot make us allocate gigabytes before we have seen a single byte of JSON.
constexpr std::uint64_t kMaxHeaderBytes = 100'000'000;
constexpr std::size_t kHeaderLengthBytes = 8;
// A valid header nests three deep (the object, an entry, its shape); the reference
// implementation's JSON parser stops at 128. Deeper input is refused while parsing.
constexpr int kMaxHeaderDepth = 64;

// Tensor bytes are copied to and from the file as they lie in memory; the format is
// little-endian, so a big-endian host would need byte swapping that nobody has asked for yet.
static_assert(std::endian::native == std::endian::little,
              "safetensors I/O assumes a little-endian host");

std::string_view safetensors_dtype_name(DType dtype) {
  switch (dtype) {
    case DType::float32: return "F32";
    case DType::float64: return "F64";
    case DType::int32: return "I32";
    case DType::int64: return "I64";
    case DType::uint8: return "U8";
    case DType::bool_: return "BOOL";
    case DType::bfloat16: return "BF16";
    case DType::float16: return "F16";
  }
  throw DTypeError(str("save_safetensors: unknown dtype ", static_cast<int>(dtype)));
}

std::optional<DType> dtype_from_safetensors_name(std::string_view name) {
  for (DType dtype : {DType::float32, DType::float64, DType::int32, DType::int64, DType::uint8,
                      DType::bool_, DType::bfloat16, DType::float16}) {
    if (safetensors_dtype_name(dtype) == name) return dtype;
  }
  return std::nullopt;
}

// A JSON value in a few words: scalars as they appear in the file (strings quoted and cut
// short), containers by their kind and size, never recursing into them, so that no field of
// any size or depth can flood a message or take unbounded time (or stack) to describe.
std::string describe(const Json& value) {
  if (value.is_array()) return str("an array of ", value.size(), " elements");
  if (value.is_object()) return str("an object of ", value.size(), " keys");
  if (value.is_string()) return quote_input(value.get_ref<const std::string&>(), 60);
  return value.dump();
}

// SAX handler of the header's validation pass: nesting depth and keys that appear twice in one
// object. It stops the parse (returns false) at the first problem, which it keeps.
struct HeaderShapeCheck {
  using number_integer_t = Json::number_integer_t;
  using number_unsigned_t = Json::number_unsigned_t;
  using number_float_t = Json::number_float_t;
  using string_t = Json::string_t;
  using binary_t = Json::binary_t;

  std::vector<std::set<std::string>> keys_of_open_objects;
  int depth = 0;
  std::string problem;

  bool open() {
    if (++depth > kMaxHeaderDepth) {
      problem = str("the header nests deeper than ", kMaxHeaderDepth, " levels");
      return false;
    }
    return true;
  }
  bool null() { return true; }
  bool boolean(bool) { return true; }
  bool number_integer(number_integer_t) { return true; }
  bool number_unsigned(number_unsigned_t) { return true; }
  bool number_float(number_float_t, const string_t&) { return true; }
  bool string(string_t&) { return true; }
  bool binary(binary_t&) { return true; }
  bool start_object(std::size_t) {
    keys_of_open_objects.emplace_back();
    return open();
  }
  bool key(string_t& key) {
    if (!keys_of_open_objects.back().insert(key).second) {
      problem = str("the key ", quote_input(key), " appears twice in one object of the header");
      return false;
    }
    return true;
  }
  bool end_object() {
    keys_of_open_objects.pop_back();
    --depth;
    return true;
  }
  bool start_array(std::size_t) { return open(); }
  bool end_array() {
    --depth;
    return true;
  }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception& error) {
    std::string message = error.what();
    if (message.size() > 200) message = message.substr(0, 200) + "...";
    problem = str("the header is not valid JSON: ", message);
    return false;
  }
};

// One tensor's header entry after validation.
struct Entry {
  std::string name;
  DType dtype;
  Shape shape;
  std::uint64_t begin;
  std::uint64_t end;
};

class HeaderReader {
 public:
  explicit HeaderReader(std::string path) : path_(std::move(path)) {}

  [[noreturn]] void fail(const std::string& message) const {
    throw FileFormatError(
        str("load_safetensors: '", path_, "' is not a valid safetensors file: ", message));
  }

  // The header as JSON, refusing what the reference implementation refuses: anything but an
  // object first (it must start with '{'; only spaces may pad it), a NUL byte (nlohmann's
  // lexer takes it for the end of the input, so "{...}\0garbage" would pass), nesting deeper
  // than kMaxHeaderDepth, and a key that appears twice in one object (nlohmann keeps the last).
  Json parse_header(const std::string& text) const {
    if (text.empty() || text.front() != '{') {
      fail(str("the header must be a JSON object starting with '{' (expected an object); it ",
               "starts with ",
               quote_input(text.substr(0, 16))));
    }
    if (std::size_t nul = text.find('\0'); nul != std::string::npos) {
      fail(str("the header holds a NUL byte at offset ", nul, "; JSON text cannot contain one"));
    }
    // First a linear SAX pass that checks depth and keys and builds nothing (nlohmann's parse
    // with a callback rescans an object's siblings at every closing brace: quadratic on a
    // header of millions of small objects), then the plain parse, which is then known shallow.
    HeaderShapeCheck shape_check;
    try {
      bool valid = Json::sax_parse(text, &shape_check);
      if (!shape_check.problem.empty()) fail(shape_check.problem);
      if (!valid) fail("the header is not valid JSON");
      return Json::parse(text);
    } catch (const Json::exception& error) {
      // nlohmann quotes the last token it read, which can be any size: keep the start.
      std::string message = error.what();
      if (message.size() > 200) message = message.substr(0, 200) + "...";
      fail(str("the header is not valid JSON: ", message));
    }
  }

  std::uint64_t non_negative_integer(const Json& value, const std::string& what) const {
    // nlohmann stores every non-negative integer literal as unsigned and negatives as signed.
    if (value.is_number_unsigned()) return value.get<std::uint64_t>();
    fail(str(what, " is ", describe(value), ", expected a non-negative integer"));
  }

  Entry entry(const std::string& name, const Json& value, std::uint64_t data_bytes) const {
    const std::string where = str("entry ", quote_input(name));
    if (!value.is_object()) {
      fail(str(where, " is ", describe(value), ", expected a JSON object with dtype, shape and "
                                               "data_offsets"));
    }
    for (const char* key : {"dtype", "shape", "data_offsets"}) {
      if (!value.contains(key)) fail(str(where, " has no \"", key, "\" field"));
    }
    const Json& dtype_field = value["dtype"];
    if (!dtype_field.is_string()) {
      fail(str(where, " has dtype ", describe(dtype_field), ", expected a string"));
    }
    std::optional<DType> dtype = dtype_from_safetensors_name(dtype_field.get<std::string>());
    if (!dtype) {
      fail(str(where, " has unsupported dtype ", describe(dtype_field),
               ", expected one of F32, F64, I32, I64, U8, BOOL, BF16, F16"));
    }

    const Json& shape_field = value["shape"];
    if (!shape_field.is_array()) {
      fail(str(where, " has shape ", describe(shape_field), ", expected an array of integers"));
    }
    Shape shape;
    std::uint64_t element_count = 1;
    for (const Json& dim_field : shape_field) {
      std::uint64_t dim = non_negative_integer(dim_field, str(where, ": a shape dimension"));
      if (dim > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()) ||
          __builtin_mul_overflow(element_count, dim, &element_count)) {
        fail(str(where, " has shape ", describe(shape_field), ", whose size overflows 64 bits"));
      }
      shape.push_back(static_cast<std::int64_t>(dim));
    }
    if (!checked_shape_size(shape)) {
      fail(str(where, " has shape ", shape_to_string(shape), ", which has more elements than fit ",
               "in 64 bits (counting zero dimensions as ones)"));
    }
    std::uint64_t expected_bytes = 0;
    if (__builtin_mul_overflow(element_count, dtype_size(*dtype), &expected_bytes)) {
      fail(str(where, " has shape ", describe(shape_field), ", whose byte size overflows 64 bits"));
    }

    const Json& offsets_field = value["data_offsets"];
    if (!offsets_field.is_array() || offsets_field.size() != 2) {
      fail(str(where, " has data_offsets ", describe(offsets_field),
               ", expected an array of two integers [begin, end]"));
    }
    std::uint64_t begin = non_negative_integer(offsets_field[0], str(where, ": data_offsets[0]"));
    std::uint64_t end = non_negative_integer(offsets_field[1], str(where, ": data_offsets[1]"));
    if (end < begin) {
      fail(str(where, " has data_offsets [", begin, ", ", end, "], expected begin <= end"));
    }
    if (end > data_bytes) {
      fail(str(where, " has data_offsets [", begin, ", ", end, "], beyond the end of the ",
               data_bytes, "-byte data section"));
    }
    if (end - begin != expected_bytes) {
      fail(str(where, " spans ", end - begin, " bytes, but dtype ", dtype_field.get<std::string>(),
               " and shape ", shape_to_string(shape), " need ", expected_bytes, " bytes"));
    }
    return Entry{name, *dtype, std::move(shape), begin, end};
  }

 private:
  std::string path_;
};

}  // namespace

void save_safetensors(const std::string& path,
                      const std::vector<std::pair<std::string, Tensor>>& tensors,
                      const std::map<std::string, std::string>& metadata) {
  Json header = Json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::set<std::string> seen_names;
  std::uint64_t offset = 0;
  for (const auto& [name, tensor] : tensors) {
    if (name.empty()) {
      throw ValueError(str("save_safetensors: a tensor for '", path, "' has an empty name; "
                           "every tensor needs a unique non-empty name"));
    }
    if (name == "__metadata__") {
      throw ValueError(str("save_safetensors: the name '__metadata__' is reserved for the "
                           "metadata of '", path, "'; rename that tensor"));
    }
    if (!seen_names.insert(name).second) {
      throw ValueError(str("save_safetensors: the name '", name, "' appears twice in the tensors "
                           "for '", path, "'; names must be unique"));
    }
    if (!tensor.defined()) {
      throw ValueError(str("save_safetensors: tensor '", name, "' for '", path,
                           "' is undefined; expected a tensor with data"));
    }
    std::uint64_t end = offset + tensor.nbytes();
    header[name] = {{"dtype", safetensors_dtype_name(tensor.dtype())},
                    {"shape", tensor.shape()},
                    {"data_offsets", {offset, end}}};
    offset = end;
  }

  std::string header_text;
  try {
    header_text = header.dump();
  } catch (const Json::exception& error) {
    // dump() rejects strings that are not valid UTF-8, which JSON cannot carry.
    throw ValueError(str("save_safetensors: a tensor name or metadata string for '", path,
                         "' is not valid UTF-8: ", error.what()));
  }
  // Padding the header with spaces (valid JSON whitespace) aligns the data section to 8 bytes,
  // so a reader that maps the file can use the float64/int64 data in place.
  header_text.append((kHeaderLengthBytes - header_text.size() % kHeaderLengthBytes) %
                         kHeaderLengthBytes,
                     ' ');
  unsigned char length_bytes[kHeaderLengthBytes];
  std::uint64_t header_length = header_text.size();
  for (std::size_t i = 0; i < kHeaderLengthBytes; ++i) {
    length_bytes[i] = static_cast<unsigned char>(header_length >> (8 * i));
  }

  AtomicFile file(path, "save_safetensors");
  file.write(length_bytes, sizeof length_bytes);
  file.write(header_text.data(), header_text.size());
  for (const auto& [name, tensor] : tensors) {
    Tensor host = tensor.to(Device::cpu());
    file.write(host.raw_data(), host.nbytes());
  }
  file.commit();
}

std::vector<std::pair<std::string, Tensor>> load_safetensors(
    const std::string& path, std::map<std::string, std::string>* metadata) {
  std::error_code status_error;
  std::filesystem::file_status status = std::filesystem::status(path, status_error);
  if (!std::filesystem::exists(status)) {
    throw FileNotFoundError(str("load_safetensors: no such file '", path, "'"));
  }
  if (!std::filesystem::is_regular_file(status)) {
    throw FileNotFoundError(str("load_safetensors: '", path, "' is not a regular file"));
  }
  FilePointer file(std::fopen(path.c_str(), "rb"));
  if (!file) {
    throw FileNotFoundError(str("load_safetensors: cannot open '", path, "': ", std::strerror(errno)));
  }
  HeaderReader reader(path);
  std::error_code size_error;
  std::uint64_t file_bytes = std::filesystem::file_size(path, size_error);
  if (size_error) {
    throw FileNotFoundError(
        str("load_safetensors: cannot read the size of '", path, "': ", size_error.message()));
  }
  if (file_bytes < kHeaderLengthBytes) {
    reader.fail(str("the file is ", file_bytes, " bytes long, shorter than the 8-byte header "
                    "length every safetensors file starts with"));
  }
  auto read_exactly = [&](void* destination, std::size_t count, const char* what) {
    if (count > 0 && std::fread(destination, 1, count, file.get()) != count) {
      reader.fail(str("could not read ", count, " bytes of ", what, " (the file is ", file_bytes,
                      " bytes long; was it truncated while being read?)"));
    }
  };

  unsigned char length_bytes[kHeaderLengthBytes];
  read_exactly(length_bytes, sizeof length_bytes, "the header length");
  std::uint64_t header_length = 0;
  for (std::size_t i = 0; i < kHeaderLengthBytes; ++i) {
    header_length |= static_cast<std::uint64_t>(length_bytes[i]) << (8 * i);
  }
  if (header_length > kMaxHeaderBytes) {
    reader.fail(str("the header length is ", header_length, " bytes, more than the ",
                    kMaxHeaderBytes, "-byte limit"));
  }
  if (header_length > file_bytes - kHeaderLengthBytes) {
    reader.fail(str("the header length is ", header_length, " bytes, but only ",
                    file_bytes - kHeaderLengthBytes, " bytes follow it"));
  }
  std::string header_text(header_length, '\0');
  read_exactly(header_text.data(), header_text.size(), "the JSON header");
  Json header = reader.parse_header(header_text);
  if (!header.is_object()) {
    reader.fail(str("the header is a JSON ", header.type_name(), ", expected an object"));
  }

  const std::uint64_t data_bytes = file_bytes - kHeaderLengthBytes - header_length;
  std::vector<Entry> entries;
  std::map<std::string, std::string> header_metadata;
  for (const auto& [key, value] : header.items()) {
    if (key == "__metadata__") {
      if (!value.is_object()) {
        reader.fail(str("__metadata__ is ", describe(value), ", expected an object of strings"));
      }
      for (const auto& [metadata_key, metadata_value] : value.items()) {
        if (!metadata_value.is_string()) {
          reader.fail(str("__metadata__ entry ", quote_input(metadata_key), " is ", describe(metadata_value),
                          ", expected a string"));
        }
        header_metadata[metadata_key] = metadata_value.get<std::string>();
      }
      continue;
    }
    entries.push_back(reader.entry(key, value, data_bytes));
  }

  // The format requires the byte ranges to tile the data section: no overlap (two tensors
  // aliasing the same bytes), no gap and no trailing bytes (data that belongs to nothing).
  std::stable_sort(entries.begin(), entries.end(), [](const Entry& left, const Entry& right) {
    return left.begin != right.begin ? left.begin < right.begin : left.end < right.end;
  });
  std::uint64_t covered = 0;
  for (std::size_t i = 0; i < entries.size(); ++i) {
    const Entry& entry = entries[i];
    if (entry.begin < covered) {
      reader.fail(str("entry ", quote_input(entry.name), " (bytes [", entry.begin, ", ", entry.end,
                      ")) overlaps entry ", quote_input(entries[i - 1].name), ", which ends at byte ",
                      covered));
    }
    if (entry.begin > covered) {
      reader.fail(str("bytes [", covered, ", ", entry.begin, ") of the data section belong to no "
                      "tensor; entry ", quote_input(entry.name), " should start at byte ", covered));
    }
    covered = entry.end;
  }
  if (covered != data_bytes) {
    reader.fail(str("the data section is ", data_bytes, " bytes, but the tensors cover only ",
                    covered, " bytes"));
  }

  std::vector<std::pair<std::string, Tensor>> tensors;
  tensors.reserve(entries.size());
  for (Entry& entry : entries) {
    Tensor tensor = Tensor::empty(entry.shape, entry.dtype);
    read_exactly(tensor.raw_data(), tensor.nbytes(), str("tensor ", quote_input(entry.name)).c_str());
    if (entry.dtype == DType::bool_) {
      // Any byte other than 0 or 1 in a C++ bool is undefined behaviour downstream.
      const auto* bytes = static_cast<const unsigned char*>(tensor.raw_data());
      for (std::size_t i = 0; i < tensor.nbytes(); ++i) {
        if (bytes[i] > 1) {
          reader.fail(str("BOOL tensor ", quote_input(entry.name), " holds the byte ",
                          static_cast<int>(bytes[i]), " at element ", i, ", expected 0 or 1"));
        }
      }
    }
    tensors.emplace_back(std::move(entry.name), std::move(tensor));
  }
  if (metadata != nullptr) *metadata = std::move(header_metadata);
  return tensors;
}

}  // namespace keras::io
