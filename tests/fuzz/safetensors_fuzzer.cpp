// libFuzzer harness for keras::io::load_safetensors: the input is the whole file. A keras::Error
// is the expected outcome for a corrupt file; any other exception escapes and crashes the
// harness. A file that loads must also pass an independent check of its header (nlohmann's SAX
// parser over exactly the header bytes: one JSON object, no NUL, no key twice, one entry per
// tensor, the tensors' bytes filling the rest of the file) and survive save_safetensors and
// load again unchanged.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "engine/errors.h"
#include "fuzz_util.h"
#include "io/safetensors.h"

namespace {

using keras::Tensor;
using Tensors = std::vector<std::pair<std::string, Tensor>>;
using Json = nlohmann::json;

// The keys of the top-level object, every one of them, duplicates included.
class TopLevelKeys : public nlohmann::json_sax<Json> {
 public:
  std::vector<std::string> keys;
  bool top_level_is_object = false;

  bool null() override { return true; }
  bool boolean(bool) override { return true; }
  bool number_integer(number_integer_t) override { return true; }
  bool number_unsigned(number_unsigned_t) override { return true; }
  bool number_float(number_float_t, const string_t&) override { return true; }
  bool string(string_t&) override { return true; }
  bool binary(binary_t&) override { return true; }
  bool start_object(std::size_t) override {
    if (depth_ == 0) top_level_is_object = true;
    return ++depth_ < kMaxDepth;
  }
  bool end_object() override { return --depth_ >= 0; }
  bool start_array(std::size_t) override { return ++depth_ < kMaxDepth; }
  bool end_array() override { return --depth_ >= 0; }
  bool key(string_t& text) override {
    if (depth_ == 1) keys.push_back(text);
    return true;
  }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception&) override {
    return false;
  }

 private:
  // The loader refuses deeper headers; stopping here keeps this check's own work bounded.
  static constexpr int kMaxDepth = 1000;
  int depth_ = 0;
};

// Checks a file that load_safetensors accepted against the format, independently of the loader.
void check_accepted_file(const std::uint8_t* data, std::size_t size, const Tensors& loaded) {
  if (size < 8) keras::fuzz::fail("accepted a file shorter than its header length");
  std::uint64_t header_length = 0;
  for (int i = 0; i < 8; ++i) header_length |= static_cast<std::uint64_t>(data[i]) << (8 * i);
  if (header_length > size - 8) keras::fuzz::fail("accepted a header longer than the file");
  std::string header(reinterpret_cast<const char*>(data) + 8, header_length);
  if (header.find('\0') != std::string::npos) keras::fuzz::fail("accepted a header with a NUL");
  TopLevelKeys sax;
  if (!Json::sax_parse(header, &sax) || !sax.top_level_is_object) {
    keras::fuzz::fail("accepted a header that is not exactly one JSON object");
  }
  std::vector<std::string> names;
  for (const std::string& key : sax.keys) {
    if (key != "__metadata__") names.push_back(key);
  }
  if (std::set<std::string>(sax.keys.begin(), sax.keys.end()).size() != sax.keys.size()) {
    keras::fuzz::fail("accepted a header with a key twice");
  }
  std::vector<std::string> loaded_names;
  std::uint64_t data_bytes = 0;
  for (const auto& [name, tensor] : loaded) {
    loaded_names.push_back(name);
    data_bytes += tensor.nbytes();
  }
  std::sort(names.begin(), names.end());
  std::sort(loaded_names.begin(), loaded_names.end());
  if (names != loaded_names) keras::fuzz::fail("the tensors loaded are not the header's entries");
  if (data_bytes != size - 8 - header_length) {
    keras::fuzz::fail(keras::str("accepted ", size - 8 - header_length, " data bytes for ",
                                 data_bytes, " bytes of tensors"));
  }
}

const keras::fuzz::ScratchFiles& files() {
  static const keras::fuzz::ScratchFiles scratch{
      {keras::fuzz::scratch_path("safetensors", ".safetensors"),
       keras::fuzz::scratch_path("safetensors", "_resaved.safetensors")}};
  return scratch;
}

void check_equal(const Tensors& loaded, const Tensors& reloaded) {
  if (loaded.size() != reloaded.size()) {
    keras::fuzz::fail(keras::str("round trip: ", loaded.size(), " tensors loaded, ",
                                 reloaded.size(), " after save and load"));
  }
  for (std::size_t i = 0; i < loaded.size(); ++i) {
    const auto& [name, tensor] = loaded[i];
    const auto& [name_again, tensor_again] = reloaded[i];
    if (name != name_again || tensor.dtype() != tensor_again.dtype() ||
        tensor.shape() != tensor_again.shape() || tensor.nbytes() != tensor_again.nbytes() ||
        (tensor.nbytes() > 0 &&
         std::memcmp(tensor.raw_data(), tensor_again.raw_data(), tensor.nbytes()) != 0)) {
      keras::fuzz::fail(keras::str("round trip: tensor ", i, " '", name, "' ",
                                   keras::shape_to_string(tensor.shape()), " came back as '",
                                   name_again, "' ", keras::shape_to_string(tensor_again.shape())));
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string& path = files().paths[0];
  const std::string& resaved_path = files().paths[1];
  keras::fuzz::write_file(path, data, size);

  Tensors loaded;
  std::map<std::string, std::string> metadata;
  try {
    loaded = keras::io::load_safetensors(path, &metadata);
  } catch (const keras::Error&) {
    return 0;  // a corrupt file, reported as such
  }
  check_accepted_file(data, size, loaded);

  // A file we accept must be one we can write back and read again to the same tensors. Errors
  // here are not expected: they escape (save) or abort (load) so that libFuzzer reports them.
  keras::io::save_safetensors(resaved_path, loaded, metadata);
  Tensors reloaded;
  std::map<std::string, std::string> metadata_again;
  try {
    reloaded = keras::io::load_safetensors(resaved_path, &metadata_again);
  } catch (const keras::Error& error) {
    keras::fuzz::fail(keras::str("round trip: the re-saved file does not load: ", error.what()));
  }
  check_equal(loaded, reloaded);
  if (metadata != metadata_again) keras::fuzz::fail("round trip: the metadata changed");
  return 0;
}
