// Tests of io/: safetensors round trips and atomic saving, IDX reading (plain and gzip), the
// Fashion-MNIST loader, and one test per kind of corrupt file, each checking both the exception
// type and that its message names the problem. Corrupt files are written byte by byte here.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <chrono>
#include <array>
#include <atomic>
#include <bit>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <thread>
#include <nlohmann/json.hpp>

#include "io/idx.h"
#include "io/safetensors.h"

namespace keras::io {
namespace {

namespace fs = std::filesystem;

// Checks the exception type with EXPECT_THROW and, inside it, that what() contains `phrase`.
#define EXPECT_THROW_WITH(statement, ExceptionType, phrase)                                 \
  EXPECT_THROW(                                                                             \
      {                                                                                     \
        try {                                                                               \
          statement;                                                                        \
        } catch (const ExceptionType& error) {                                              \
          EXPECT_NE(std::string(error.what()).find(phrase), std::string::npos)              \
              << "message: " << error.what() << "\nexpected it to contain: " << (phrase);   \
          throw;                                                                            \
        }                                                                                   \
      },                                                                                    \
      ExceptionType)

class IoTest : public ::testing::Test {
 protected:
  void SetUp() override {
    static std::atomic<int> counter{0};
    directory_ = fs::temp_directory_path() /
                 ("keras_io_test_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
    fs::create_directories(directory_);
  }
  void TearDown() override { fs::remove_all(directory_); }

  std::string path(const std::string& name) const { return (directory_ / name).string(); }
  std::vector<std::string> directory_listing() const {
    std::vector<std::string> names;
    for (const auto& entry : fs::directory_iterator(directory_)) {
      names.push_back(entry.path().filename().string());
    }
    return names;
  }

  fs::path directory_;
};

void write_file(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  ASSERT_TRUE(out.good()) << path;
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

void write_gzip(const std::string& path, const std::string& bytes) {
  gzFile file = gzopen(path.c_str(), "wb");
  ASSERT_NE(file, nullptr) << path;
  ASSERT_EQ(gzwrite(file, bytes.data(), static_cast<unsigned>(bytes.size())),
            static_cast<int>(bytes.size()));
  ASSERT_EQ(gzclose(file), Z_OK);
}

void expect_same_tensor(const Tensor& actual, const Tensor& expected) {
  ASSERT_EQ(actual.dtype(), expected.dtype());
  ASSERT_EQ(actual.shape(), expected.shape());
  ASSERT_EQ(actual.nbytes(), expected.nbytes());
  if (expected.nbytes() > 0) {
    EXPECT_EQ(std::memcmp(actual.raw_data(), expected.raw_data(), expected.nbytes()), 0);
  }
}

// ---- safetensors -------------------------------------------------------------------------

// A safetensors file from a header written by hand and `data_bytes` bytes of data.
std::string safetensors_bytes(const std::string& header, const std::string& data) {
  std::string bytes(8, '\0');
  for (int i = 0; i < 8; ++i) bytes[i] = static_cast<char>((header.size() >> (8 * i)) & 0xFF);
  return bytes + header + data;
}

TEST_F(IoTest, SafetensorsRoundTripsEveryDtypeAndMetadata) {
  Tensor bools = Tensor::empty({3}, bool_);
  bools.data<bool>()[0] = true;
  bools.data<bool>()[1] = false;
  bools.data<bool>()[2] = true;
  std::vector<std::pair<std::string, Tensor>> tensors = {
      {"dense/kernel", Tensor::from_vector<float>({1.5f, -2, 3, 4, 5, 6}, {2, 3})},
      {"dense/bias", Tensor::from_vector<double>({0.25, -1e300, 7}, {3})},
      {"counts", Tensor::from_vector<std::int32_t>({-1, 2, -3, 2147483647}, {2, 2})},
      {"step", Tensor::from_vector<std::int64_t>({-9000000000000LL}, {})},
      {"pixels", Tensor::from_vector<std::uint8_t>({0, 127, 255}, {3})},
      {"empty", Tensor::empty({0, 3}, float32)},
      {"mask", bools},
  };
  std::map<std::string, std::string> metadata = {{"format", "keras"}, {"epoch", "3"}};
  save_safetensors(path("model.safetensors"), tensors, metadata);

  std::map<std::string, std::string> loaded_metadata;
  auto loaded = load_safetensors(path("model.safetensors"), &loaded_metadata);
  EXPECT_EQ(loaded_metadata, metadata);
  ASSERT_EQ(loaded.size(), tensors.size());
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    SCOPED_TRACE(tensors[i].first);
    EXPECT_EQ(loaded[i].first, tensors[i].first);  // saved contiguously, so same order back
    expect_same_tensor(loaded[i].second, tensors[i].second);
  }
}

TEST_F(IoTest, SafetensorsHeaderIsAlignedAndOffsetsFollowTheGivenOrder) {
  save_safetensors(path("a.safetensors"),
                   {{"z", Tensor::from_vector<float>({1, 2, 3}, {3})},
                    {"a", Tensor::from_vector<std::uint8_t>({1}, {1})},
                    {"m", Tensor::from_vector<double>({1, 2}, {2})}});
  std::string bytes = read_file(path("a.safetensors"));
  ASSERT_GE(bytes.size(), 8u);
  std::uint64_t header_length = 0;
  for (int i = 0; i < 8; ++i) {
    header_length |= static_cast<std::uint64_t>(static_cast<unsigned char>(bytes[i])) << (8 * i);
  }
  EXPECT_EQ((8 + header_length) % 8, 0u);
  EXPECT_EQ(bytes.size(), 8 + header_length + 12 + 1 + 16);
  auto header = nlohmann::json::parse(bytes.substr(8, header_length));
  EXPECT_FALSE(header.contains("__metadata__"));  // written only when there is metadata
  EXPECT_EQ(header["z"]["data_offsets"], nlohmann::json({0, 12}));
  EXPECT_EQ(header["a"]["data_offsets"], nlohmann::json({12, 13}));
  EXPECT_EQ(header["m"]["data_offsets"], nlohmann::json({13, 29}));
  EXPECT_EQ(header["m"]["dtype"], "F64");
  auto loaded = load_safetensors(path("a.safetensors"));
  ASSERT_EQ(loaded.size(), 3u);
  EXPECT_EQ(loaded[0].first, "z");
  EXPECT_EQ(loaded[1].first, "a");
  EXPECT_EQ(loaded[2].first, "m");
}

TEST_F(IoTest, SafetensorsSaveLeavesNoTemporaryFileAndOverwrites) {
  save_safetensors(path("w.safetensors"), {{"x", Tensor::from_vector<float>({1}, {1})}});
  save_safetensors(path("w.safetensors"), {{"y", Tensor::from_vector<float>({2, 3}, {2})}});
  EXPECT_EQ(directory_listing(), std::vector<std::string>{"w.safetensors"});
  auto loaded = load_safetensors(path("w.safetensors"));
  ASSERT_EQ(loaded.size(), 1u);
  EXPECT_EQ(loaded[0].first, "y");
  EXPECT_EQ(loaded[0].second.to_vector<float>(), (std::vector<float>{2, 3}));
}

TEST_F(IoTest, SafetensorsSaveIntoMissingDirectoryThrowsAndLeavesNothing) {
  std::string target = path("missing/w.safetensors");
  EXPECT_THROW_WITH(save_safetensors(target, {{"x", Tensor::from_vector<float>({1}, {1})}}),
                    Error, target);
  EXPECT_TRUE(directory_listing().empty());
}

TEST_F(IoTest, SafetensorsRejectsBadNamesBeforeWriting) {
  Tensor x = Tensor::from_vector<float>({1}, {1});
  EXPECT_THROW_WITH(save_safetensors(path("n.safetensors"), {{"x", x}, {"x", x}}), ValueError,
                    "appears twice");
  EXPECT_THROW_WITH(save_safetensors(path("n.safetensors"), {{"", x}}), ValueError, "empty name");
  EXPECT_THROW_WITH(save_safetensors(path("n.safetensors"), {{"__metadata__", x}}), ValueError,
                    "reserved");
  EXPECT_THROW_WITH(save_safetensors(path("n.safetensors"), {{"u", Tensor()}}), ValueError,
                    "undefined");
  EXPECT_TRUE(directory_listing().empty());
}

TEST_F(IoTest, SafetensorsMissingFileIsFileNotFound) {
  EXPECT_THROW_WITH(load_safetensors(path("absent.safetensors")), FileNotFoundError,
                    "absent.safetensors");
}

TEST_F(IoTest, SafetensorsCorruptFilesAreFileFormatErrors) {
  const std::string four_floats(16, '\0');
  struct Case {
    const char* what;
    std::string bytes;
    const char* phrase;
  };
  std::string too_long_header(8, '\0');
  too_long_header[0] = static_cast<char>(0xE8);  // 1000 bytes promised, 2 follow
  too_long_header[1] = 0x03;
  std::string huge_header(8, '\0');
  huge_header[3] = 0x10;  // 268435456 bytes, over the 100 MB limit
  const std::vector<Case> cases = {
      {"truncated file", std::string("\x02\x00\x00", 3), "shorter than the 8-byte"},
      {"header length beyond file", too_long_header + "{}", "only 2 bytes follow"},
      {"header length over limit", huge_header + "{}", "limit"},
      {"invalid JSON", safetensors_bytes("{\"x\": ", ""), "not valid JSON"},
      {"header not an object", safetensors_bytes("[1, 2]", ""), "expected an object"},
      {"entry not an object", safetensors_bytes(R"({"x": 3})", ""), "expected a JSON object"},
      {"missing dtype", safetensors_bytes(R"({"x": {"shape": [1], "data_offsets": [0, 4]}})",
                                          std::string(4, '\0')),
       "no \"dtype\" field"},
      {"shape of wrong type",
       safetensors_bytes(R"({"x": {"dtype": "F32", "shape": "4", "data_offsets": [0, 16]}})",
                         four_floats),
       "expected an array"},
      {"unknown dtype",
       safetensors_bytes(R"({"x": {"dtype": "F8_E4M3", "shape": [16], "data_offsets": [0, 16]}})",
                         four_floats),
       "unsupported dtype 'F8_E4M3'"},
      {"negative dim",
       safetensors_bytes(R"({"x": {"dtype": "F32", "shape": [-4], "data_offsets": [0, 16]}})",
                         four_floats),
       "non-negative integer"},
      {"one offset",
       safetensors_bytes(R"({"x": {"dtype": "F32", "shape": [4], "data_offsets": [16]}})",
                         four_floats),
       "two integers"},
      {"decreasing offsets",
       safetensors_bytes(R"({"x": {"dtype": "F32", "shape": [4], "data_offsets": [16, 0]}})",
                         four_floats),
       "begin <= end"},
      {"offsets beyond data",
       safetensors_bytes(R"({"x": {"dtype": "F32", "shape": [8], "data_offsets": [0, 32]}})",
                         four_floats),
       "beyond the end"},
      {"byte length mismatch",
       safetensors_bytes(R"({"x": {"dtype": "F32", "shape": [3], "data_offsets": [0, 16]}})",
                         four_floats),
       "need 12 bytes"},
      {"overlapping entries",
       safetensors_bytes(R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
                             "b": {"dtype": "F32", "shape": [3], "data_offsets": [4, 16]}})",
                         four_floats),
       "overlaps"},
      {"gap between entries",
       safetensors_bytes(R"({"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]},
                             "b": {"dtype": "F32", "shape": [2], "data_offsets": [8, 16]}})",
                         four_floats),
       "belong to no tensor"},
      {"trailing data",
       safetensors_bytes(R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}})",
                         four_floats),
       "cover only 8 bytes"},
      {"bool byte not 0 or 1",
       safetensors_bytes(R"({"m": {"dtype": "BOOL", "shape": [2], "data_offsets": [0, 2]}})",
                         std::string("\x01\x02", 2)),
       "expected 0 or 1"},
      {"metadata not strings", safetensors_bytes(R"({"__metadata__": {"epoch": 3}})", ""),
       "__metadata__ entry 'epoch'"},
  };
  for (const Case& test_case : cases) {
    SCOPED_TRACE(test_case.what);
    write_file(path("bad.safetensors"), test_case.bytes);
    EXPECT_THROW_WITH(load_safetensors(path("bad.safetensors")), FileFormatError,
                      test_case.phrase);
  }
}

// Issue 6: hostile headers. Each of these crashed, or was accepted, before.
TEST_F(IoTest, SafetensorsHostileHeadersAreRefusedWithShortMessages) {
  // 100,000 nested arrays (200 KB): formatting the error recursed once per level and
  // overflowed the stack.
  std::string deep = "{\"x\": {\"dtype\": \"F32\", \"shape\": " + std::string(100000, '[') +
                     std::string(100000, ']') + ", \"data_offsets\": [0, 0]}}";
  write_file(path("deep.safetensors"), safetensors_bytes(deep, ""));
  EXPECT_THROW_WITH(load_safetensors(path("deep.safetensors")), FileFormatError,
                    "nests deeper than 64 levels");
  // A NUL after the JSON: nlohmann's lexer stopped there and accepted the file.
  std::string valid = R"({"x": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}})";
  write_file(path("nul.safetensors"),
             safetensors_bytes(valid + std::string("\0garbage", 8), std::string(4, '\0')));
  EXPECT_THROW_WITH(load_safetensors(path("nul.safetensors")), FileFormatError,
                    "NUL byte at offset");
  // The same entry twice: nlohmann kept the last one silently.
  std::string twice = R"({"x": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]},)"
                      R"( "x": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}})";
  write_file(path("twice.safetensors"), safetensors_bytes(twice, std::string(4, '\0')));
  EXPECT_THROW_WITH(load_safetensors(path("twice.safetensors")), FileFormatError,
                    "the key 'x' appears twice");
  // A 1 MB name and a 1 MB dtype string: the messages quote a few dozen bytes of each.
  std::string long_name(1 << 20, 'n');
  std::string named = "{\"" + long_name + "\": {\"dtype\": \"" + long_name +
                      "\", \"shape\": [1], \"data_offsets\": [0, 4]}}";
  write_file(path("long.safetensors"), safetensors_bytes(named, std::string(4, '\0')));
  try {
    load_safetensors(path("long.safetensors"));
    ADD_FAILURE() << "accepted a 1 MB dtype";
  } catch (const FileFormatError& error) {
    EXPECT_LT(std::string(error.what()).size(), 600u) << std::string(error.what()).substr(0, 600);
    EXPECT_NE(std::string(error.what()).find("(1048576 bytes in all)"), std::string::npos);
  }
  // Millions of small objects: the validation pass is linear (a parse callback was quadratic).
  std::string many = "{\"__metadata__\": {\"a\": \"b\"}, \"list\": [";
  for (int i = 0; i < 300000; ++i) many += i ? ",{}" : "{}";
  many += "]}";
  write_file(path("many.safetensors"), safetensors_bytes(many, ""));
  EXPECT_THROW_WITH(load_safetensors(path("many.safetensors")), FileFormatError,
                    "entry 'list' is an array of 300000 elements");
  // No elements, but strides that overflow: a corrupt file, not a ShapeError from the engine.
  write_file(path("strides.safetensors"),
             safetensors_bytes(R"({"x": {"dtype": "U8", "shape": [0, 4611686018427387904, 4611686018427387904], "data_offsets": [0, 0]}})", ""));
  EXPECT_THROW_WITH(load_safetensors(path("strides.safetensors")), FileFormatError,
                    "more elements than fit in 64 bits");
  // Valid files still load, trailing space padding included.
  write_file(path("padded.safetensors"), safetensors_bytes(valid + "   ", std::string(4, '\0')));
  EXPECT_EQ(load_safetensors(path("padded.safetensors")).size(), 1u);
}

TEST_F(IoTest, SafetensorsOverlappingSavesToOnePathNeverMixFiles) {
  // Two saves at once used the same temporary name "path.tmp-PID": 17 of 240 loads saw a
  // truncated or mixed file. Each save now has its own temporary.
  const std::string target = path("shared.safetensors");
  auto contents = [](float value) {
    return std::vector<std::pair<std::string, Tensor>>{
        {"w", Tensor::full({64, 64}, value)}, {"b", Tensor::full({64}, value)}};
  };
  save_safetensors(target, contents(1));
  std::atomic<bool> stop{false};
  std::atomic<int> bad_loads{0}, loads{0};
  std::thread reader([&] {
    while (!stop) {
      try {
        auto loaded = load_safetensors(target);
        float first = loaded.at(0).second.to_vector<float>().at(0);
        for (const auto& [name, tensor] : loaded) {
          for (float v : tensor.to_vector<float>()) {
            if (v != first) bad_loads++;
          }
        }
      } catch (const Error&) {
        bad_loads++;
      }
      loads++;
    }
  });
  std::vector<std::thread> writers;
  for (int w = 0; w < 2; ++w) {
    writers.emplace_back([&, w] {
      for (int i = 0; i < 60; ++i) save_safetensors(target, contents(float(w + 1)));
    });
  }
  for (auto& writer : writers) writer.join();
  stop = true;
  reader.join();
  EXPECT_GT(loads.load(), 0);
  EXPECT_EQ(bad_loads.load(), 0) << "of " << loads.load() << " loads";
  EXPECT_EQ(directory_listing(), std::vector<std::string>{"shared.safetensors"});
}

TEST_F(IoTest, SafetensorsTemporariesOfKilledSavesAreRemoved) {
  // A process that dies while saving leaves its temporary; the next save removes it.
  pid_t child = ::fork();
  if (child == 0) ::_exit(0);
  ASSERT_GT(child, 0);
  ::waitpid(child, nullptr, 0);  // now a pid of no process
  char host[256] = {};
  ASSERT_EQ(::gethostname(host, sizeof host - 1), 0);
  const std::string target = path("w.safetensors");
  std::string dead = str(target, ".tmp.", child, ".", host, ".keras-a1b2c3");
  std::string alive = str(target, ".tmp.", ::getpid(), ".", host, ".keras-d4e5f6");  // a save in progress
  std::string other_host = str(target, ".tmp.", child, ".some-other-host.keras-g7h8i9");
  std::string recent = str(target, ".tmp.", child, ".", host, ".keras-j0k1l2");  // another container's?
  std::string not_ours = str(target, ".tmp.", child, ".", host, ".backup");  // a user's file
  auto an_hour_ago = fs::file_time_type::clock::now() - std::chrono::hours(1);
  for (const std::string& name : {dead, alive, other_host, recent, not_ours}) {
    write_file(name, "partial");
    if (name != recent) fs::last_write_time(name, an_hour_ago);
  }
  save_safetensors(target, {{"x", Tensor::ones({2})}});
  EXPECT_FALSE(fs::exists(dead));
  EXPECT_TRUE(fs::exists(alive));
  EXPECT_TRUE(fs::exists(other_host));
  EXPECT_TRUE(fs::exists(recent));
  EXPECT_TRUE(fs::exists(not_ours));
  // The saved file gets the usual permissions (mkstemp creates 0600).
  auto permissions = fs::status(target).permissions();
  EXPECT_NE(permissions & fs::perms::owner_read, fs::perms::none);
  EXPECT_NE(permissions & fs::perms::others_read, fs::perms::none) << "umask 022 assumed";
}

// ---- IDX ---------------------------------------------------------------------------------

std::string idx_header(unsigned char type, const std::vector<std::uint32_t>& dims) {
  std::string bytes = {0, 0, static_cast<char>(type), static_cast<char>(dims.size())};
  for (std::uint32_t dim : dims) {
    for (int shift = 24; shift >= 0; shift -= 8) bytes += static_cast<char>((dim >> shift) & 0xFF);
  }
  return bytes;
}

template <typename T>
std::string big_endian(const std::vector<T>& values) {
  std::string bytes;
  for (T value : values) {
    auto bits = std::bit_cast<std::array<unsigned char, sizeof(T)>>(value);
    if constexpr (std::endian::native == std::endian::little) {
      std::reverse(bits.begin(), bits.end());
    }
    bytes.append(reinterpret_cast<const char*>(bits.data()), bits.size());
  }
  return bytes;
}

TEST_F(IoTest, IdxReadsPlainAndGzipFiles) {
  write_file(path("u8.idx"), idx_header(0x08, {2, 3}) + std::string{0, 1, 2, 3, 4, '\xFF'});
  Tensor bytes = read_idx(path("u8.idx"));
  EXPECT_EQ(bytes.dtype(), uint8);
  EXPECT_EQ(bytes.shape(), (Shape{2, 3}));
  EXPECT_EQ(bytes.to_vector<std::uint8_t>(), (std::vector<std::uint8_t>{0, 1, 2, 3, 4, 255}));

  std::vector<std::int32_t> ints = {-1, 0, 65536, -2147483647 - 1};
  write_gzip(path("i32.idx.gz"), idx_header(0x0C, {4}) + big_endian(ints));
  Tensor int_tensor = read_idx(path("i32.idx.gz"));
  EXPECT_EQ(int_tensor.dtype(), int32);
  EXPECT_EQ(int_tensor.to_vector<std::int32_t>(), ints);

  std::vector<float> floats = {1.5f, -0.0f, 3e38f, 1e-40f};
  write_gzip(path("f32.gz"), idx_header(0x0D, {2, 1, 2}) + big_endian(floats));
  Tensor float_tensor = read_idx(path("f32.gz"));
  EXPECT_EQ(float_tensor.shape(), (Shape{2, 1, 2}));
  EXPECT_EQ(float_tensor.to_vector<float>(), floats);

  std::vector<double> doubles = {3.141592653589793, -1e300};
  write_file(path("f64.idx"), idx_header(0x0E, {2}) + big_endian(doubles));
  EXPECT_EQ(read_idx(path("f64.idx")).to_vector<double>(), doubles);

  write_file(path("empty.idx"), idx_header(0x08, {0, 28, 28}));
  Tensor empty = read_idx(path("empty.idx"));
  EXPECT_EQ(empty.shape(), (Shape{0, 28, 28}));
}

TEST_F(IoTest, IdxCorruptFilesAreFileFormatErrors) {
  struct Case {
    const char* what;
    std::string bytes;
    const char* phrase;
  };
  const std::vector<Case> cases = {
      {"short header", std::string("\0\0\x08", 3), "too few for the 4-byte IDX header"},
      {"bad magic", "PK\x03\x04 and more", "not an IDX file"},
      {"unsupported type", idx_header(0x09, {2}) + "ab", "unsupported IDX element type 0x09"},
      {"no dims", idx_header(0x08, {}), "0 dimensions"},
      {"too many dims", idx_header(0x08, {1, 1, 1, 1, 1, 1, 1, 1, 1}) + "a", "9 dimensions"},
      {"truncated dims", idx_header(0x08, {2, 3}).substr(0, 9), "truncated header"},
      {"truncated data", idx_header(0x08, {10}) + "12345", "needs 10 bytes of uint8 data, got 5"},
      {"huge promise", idx_header(0x0E, {1u << 30, 1u << 10}) + "abc", "truncated data"},
      {"size overflow", idx_header(0x08, std::vector<std::uint32_t>(8, 0xFFFFFFFF)), "64 bits"},
      {"trailing bytes", idx_header(0x08, {2}) + "abc", "1 trailing bytes"},
      // No elements, but (4294967295 * 4294967050) overflowed the engine's shape size.
      {"zero-size overflow", idx_header(0x08, {4294967295u, 4294967050u, 0}),
       "describe more elements than fit in 64 bits"},
  };
  for (const Case& test_case : cases) {
    SCOPED_TRACE(test_case.what);
    write_file(path("bad.idx"), test_case.bytes);
    EXPECT_THROW_WITH(read_idx(path("bad.idx")), FileFormatError, test_case.phrase);
    write_gzip(path("bad.idx.gz"), test_case.bytes);
    EXPECT_THROW_WITH(read_idx(path("bad.idx.gz")), FileFormatError, test_case.phrase);
  }
}

TEST_F(IoTest, IdxCorruptGzipStreamIsFileFormatError) {
  std::string data;
  for (int i = 0; i < 4096; ++i) data += static_cast<char>((i * 7919) % 251);
  write_gzip(path("good.gz"), idx_header(0x08, {4096}) + data);
  std::string compressed = read_file(path("good.gz"));
  ASSERT_EQ(read_idx(path("good.gz")).size(), 4096);

  write_file(path("cut.gz"), compressed.substr(0, compressed.size() - 6));
  EXPECT_THROW_WITH(read_idx(path("cut.gz")), FileFormatError, "corrupt gzip stream");
  std::string flipped = compressed;
  flipped[compressed.size() - 8] = static_cast<char>(flipped[compressed.size() - 8] ^ 0x5A);
  write_file(path("flipped.gz"), flipped);  // damages the CRC-32 the trailer stores
  EXPECT_THROW_WITH(read_idx(path("flipped.gz")), FileFormatError, "corrupt gzip stream");
}

TEST_F(IoTest, IdxBytesAfterTheGzipStreamAreRefused) {
  // zlib's gzread ignored whatever followed the gzip member: garbage and zeros were accepted.
  std::string file = idx_header(0x08, {3}) + std::string("abc");
  write_gzip(path("good.gz"), file);
  std::string compressed = read_file(path("good.gz"));
  for (const std::string& tail : {std::string("garbage"), std::string(512, '\0'), std::string("\x1f")}) {
    write_file(path("tail.gz"), compressed + tail);
    EXPECT_THROW_WITH(read_idx(path("tail.gz")), FileFormatError,
                      str(tail.size(), " bytes after the end of the gzip stream"));
  }
  // A second gzip member is more of the same stream, as gzip -d reads it.
  write_gzip(path("first.gz"), file.substr(0, 6));
  write_gzip(path("second.gz"), file.substr(6));
  write_file(path("two.gz"), read_file(path("first.gz")) + read_file(path("second.gz")));
  EXPECT_EQ(read_idx(path("two.gz")).to_vector<std::uint8_t>(),
            (std::vector<std::uint8_t>{'a', 'b', 'c'}));
}

TEST_F(IoTest, IdxGzipMembersAndTrailingBytesAcrossTheReadBuffer) {
  // The reader takes the file in 64 KiB pieces: put a member boundary and trailing bytes past
  // the first piece (random bytes do not compress, so the members are about 100 KB each).
  std::string payload;
  std::uint32_t state = 12345;
  for (int i = 0; i < 200000; ++i) {
    state = state * 1664525u + 1013904223u;
    payload += static_cast<char>(state >> 24);
  }
  std::string file = idx_header(0x08, {200000}) + payload;
  write_gzip(path("a.gz"), file.substr(0, 100003));
  write_gzip(path("b.gz"), file.substr(100003));
  std::string two = read_file(path("a.gz")) + read_file(path("b.gz"));
  ASSERT_GT(read_file(path("a.gz")).size(), 65536u);
  write_file(path("two.gz"), two);
  Tensor read = read_idx(path("two.gz"));
  ASSERT_EQ(read.size(), 200000);
  EXPECT_EQ(std::memcmp(read.raw_data(), payload.data(), payload.size()), 0);
  write_file(path("tail.gz"), two + std::string(70000, 'x'));
  EXPECT_THROW_WITH(read_idx(path("tail.gz")), FileFormatError,
                    "70000 bytes after the end of the gzip stream");
}

TEST_F(IoTest, IdxMissingFileIsFileNotFound) {
  EXPECT_THROW_WITH(read_idx(path("absent.idx")), FileNotFoundError, "absent.idx");
  EXPECT_THROW_WITH(read_idx(directory_.string()), FileNotFoundError, "not a regular file");
}

// ---- Fashion-MNIST -----------------------------------------------------------------------

TEST_F(IoTest, FashionMnistMissingDataSaysHowToInstallIt) {
  EXPECT_THROW_WITH(load_fashion_mnist(path("nowhere")), FileNotFoundError,
                    "apt-get install dataset-fashion-mnist");
  EXPECT_THROW_WITH(load_fashion_mnist(directory_.string()), FileNotFoundError,
                    "train-images-idx3-ubyte.gz");
}

TEST_F(IoTest, FashionMnistLoadsSmallFilesAndChecksCounts) {
  auto write_split = [&](const std::string& prefix, std::uint32_t images, std::uint32_t labels) {
    write_gzip(path(prefix + "-images-idx3-ubyte.gz"),
               idx_header(0x08, {images, 28, 28}) + std::string(images * 28 * 28, '\x07'));
    std::string label_bytes;
    for (std::uint32_t i = 0; i < labels; ++i) label_bytes += static_cast<char>(i % 10);
    write_gzip(path(prefix + "-labels-idx1-ubyte.gz"), idx_header(0x08, {labels}) + label_bytes);
  };
  write_split("train", 12, 12);
  write_split("t10k", 3, 3);
  FashionMnist data = load_fashion_mnist(directory_.string());
  EXPECT_EQ(data.x_train.shape(), (Shape{12, 28, 28}));
  EXPECT_EQ(data.x_train.dtype(), uint8);
  EXPECT_EQ(data.y_train.dtype(), int64);
  EXPECT_EQ(data.y_train.to_vector<std::int64_t>()[11], 1);
  EXPECT_EQ(data.x_test.shape(), (Shape{3, 28, 28}));
  EXPECT_EQ(data.y_test.shape(), (Shape{3}));

  write_split("t10k", 3, 4);
  EXPECT_THROW_WITH(load_fashion_mnist(directory_.string()), FileFormatError,
                    "expected one label per image");
}

TEST(FashionMnistData, InstalledDataHasTheDocumentedShapes) {
  const std::string directory = "/usr/share/datasets/fashion-mnist";
  if (!fs::is_directory(directory)) {
    GTEST_SKIP() << directory << " is missing; apt-get install dataset-fashion-mnist";
  }
  FashionMnist data = load_fashion_mnist(directory);
  EXPECT_EQ(data.x_train.shape(), (Shape{60000, 28, 28}));
  EXPECT_EQ(data.y_train.shape(), (Shape{60000}));
  EXPECT_EQ(data.x_test.shape(), (Shape{10000, 28, 28}));
  EXPECT_EQ(data.y_test.shape(), (Shape{10000}));
  for (const Tensor& labels : {data.y_train, data.y_test}) {
    for (std::int64_t label : labels.to_vector<std::int64_t>()) {
      ASSERT_GE(label, 0);
      ASSERT_LT(label, 10);
    }
  }
}

}  // namespace
}  // namespace keras::io
