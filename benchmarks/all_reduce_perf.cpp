// all_reduce_perf: the all-reduce bandwidth of our MPI Communicator beside raw MPI_Allreduce on
// the same MPI communicator, printed in the table format of nccl-tests' all_reduce_perf so both
// can be read (and parsed) the same way. Communicator::all_reduce only works in place, so our
// "out-of-place" column copies the send buffer into the receive buffer and then reduces the
// receive buffer in place (the copy is timed: a caller who needs its input intact pays it); raw
// MPI's out-of-place column passes separate buffers and its in-place column MPI_IN_PLACE. For
// mean, raw MPI sums and then divides, as our Communicator does. Time is the average per
// iteration on the slowest rank; algbw = bytes / time, busbw = algbw * 2(n-1)/n. Signature
// checks stay on (what users get) unless --no-signature-checks.
// With --csv FILE, rank 0 also writes every measurement as one CSV row (the columns of
// kCsvHeader), which scripts/plot_all_reduce.py draws.
// Run: mpirun -np 2 all_reduce_perf -b 8 -e 64M -f 2 [--csv all_reduce.csv]
#include <mpi.h>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <initializer_list>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "benchmarks/nccl_all_reduce_perf.h"
#include "distribution/transports/mpi/mpi_communicator.h"
#include "distribution/runtime/runtime.h"

namespace {

using keras::distribution::MpiCommunicator;
using keras::distribution::ReduceOperation;

constexpr const char* kUsage =
    "usage: mpirun -np N all_reduce_perf [-b min_bytes] [-e max_bytes] [-f factor]\n"
    "       [-n iterations] [-w warmup_iterations] [-c 0|1] [-d float|double|int32|int64]\n"
    "       [-o sum|max|min|mean] [--no-signature-checks] [--csv FILE]\n"
    "       [--backend mpi|nccl] [-g 1]   (nccl: each process's GPU, device buffers)\n"
    "       (sizes accept a K, M or G suffix: 64M = 64 * 2^20 bytes)\n";

// A bad command line: main prints it with the usage and exits 2.
struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct Options {
  std::int64_t minimum_bytes = 8;
  std::int64_t maximum_bytes = std::int64_t{64} << 20;
  std::int64_t factor = 2;
  std::int64_t iterations = 20;
  std::int64_t warmup_iterations = 5;
  std::int64_t check = 1;
  std::string type_name = "float";
  std::string operation_name = "sum";
  bool signature_checks = true;
  std::string csv_path;  // empty: no CSV
  std::string backend = "mpi";
};

// One row per (implementation, size, placement); the same columns as gloo_all_reduce_perf's.
constexpr const char* kCsvHeader =
    "backend,implementation,processes,size_bytes,count,dtype,operation,placement,time_us,"
    "algbw_gbps,busbw_gbps,wrong\n";

std::int64_t parse_number(char flag, std::string_view text, bool allow_size_suffix) {
  std::int64_t value = 0;
  const char* end = text.data() + text.size();
  auto [stop, error] = std::from_chars(text.data(), end, value);
  std::string_view rest(stop, static_cast<std::size_t>(end - stop));
  int shift = 0;  // binary suffixes, as nccl-tests reads them
  if (allow_size_suffix && rest.size() == 1) {
    char suffix = static_cast<char>(rest[0] & ~0x20);  // upper case
    shift = suffix == 'K' ? 10 : suffix == 'M' ? 20 : suffix == 'G' ? 30 : 0;
    if (shift > 0) rest = {};
  }
  if (error != std::errc{} || !rest.empty() || value < 0 || value > (INT64_MAX >> shift)) {
    throw UsageError(
        std::string("-") + flag + ": '" + std::string(text) + "' is not a " +
        (allow_size_suffix ? "byte count (digits, optional K/M/G)" : "non-negative integer"));
  }
  return value << shift;
}

Options parse_options(int argument_count, char** arguments) {
  Options options;
  for (int index = 1; index < argument_count; ++index) {
    std::string_view argument = arguments[index];
    if (argument == "-h" || argument == "--help") throw UsageError("help");
    if (argument == "--no-signature-checks") {
      options.signature_checks = false;
      continue;
    }
    if (argument == "--backend") {
      if (++index >= argument_count) throw UsageError("--backend needs mpi or nccl");
      options.backend = arguments[index];
      if (options.backend != "mpi" && options.backend != "nccl") {
        throw UsageError("--backend: expected mpi or nccl, got '" + options.backend + "'");
      }
      continue;
    }
    if (argument == "--csv") {
      if (++index >= argument_count) throw UsageError("--csv needs a file name");
      options.csv_path = arguments[index];
      continue;
    }
    if (argument.size() < 2 || argument[0] != '-' ||
        std::string_view("befnwcdog").find(argument[1]) == std::string_view::npos) {
      throw UsageError("unknown flag '" + std::string(argument) + "'");
    }
    char flag = argument[1];
    std::string_view value = argument.substr(2);  // "-b8" as well as "-b 8", like getopt
    if (value.empty()) {
      if (++index >= argument_count) throw UsageError(std::string("-") + flag + " needs a value");
      value = arguments[index];
    }
    switch (flag) {
      case 'b': options.minimum_bytes = parse_number(flag, value, true); break;
      case 'e': options.maximum_bytes = parse_number(flag, value, true); break;
      case 'f': options.factor = parse_number(flag, value, false); break;
      case 'n': options.iterations = parse_number(flag, value, false); break;
      case 'w': options.warmup_iterations = parse_number(flag, value, false); break;
      case 'c': options.check = parse_number(flag, value, false); break;
      case 'd': options.type_name = value; break;
      case 'g':  // nccl-tests' GPUs per thread: one process drives one GPU here
        if (parse_number(flag, value, false) != 1) {
          throw UsageError("-g: each process drives one GPU (start one process per GPU)");
        }
        break;
      default: options.operation_name = value; break;  // 'o'
    }
  }
  auto require = [](bool condition, const std::string& message) {
    if (!condition) throw UsageError(message);
  };
  // Sizes grow by multiplication, so a zero start would never grow.
  require(options.minimum_bytes >= 1, "-b: the minimum size must be at least 1 byte");
  require(options.minimum_bytes <= options.maximum_bytes,
          "-b " + std::to_string(options.minimum_bytes) + " is larger than -e " +
              std::to_string(options.maximum_bytes));
  require(options.factor >= 2, "-f: the multiplication factor must be at least 2, got " +
                                   std::to_string(options.factor));
  require(options.iterations >= 1, "-n: at least 1 iteration is needed");
  require(options.check == 0 || options.check == 1, "-c: expected 0 or 1");
  auto one_of = [](const std::string& value, std::initializer_list<std::string_view> names) {
    return std::find(names.begin(), names.end(), value) != names.end();
  };
  require(one_of(options.type_name, {"float", "double", "int32", "int64"}),
          "-d: unknown type '" + options.type_name + "'; expected float, double, int32 or int64");
  require(one_of(options.operation_name, {"sum", "max", "min", "mean"}),
          "-o: unknown operation '" + options.operation_name + "'; expected sum, max, min or mean");
  return options;
}

ReduceOperation reduce_operation(const std::string& name) {
  if (name == "max") return ReduceOperation::max;
  if (name == "min") return ReduceOperation::min;
  if (name == "mean") return ReduceOperation::mean;
  return ReduceOperation::sum;
}

template <typename T>
MPI_Datatype mpi_datatype() {
  if constexpr (std::is_same_v<T, float>) return MPI_FLOAT;
  if constexpr (std::is_same_v<T, double>) return MPI_DOUBLE;
  if constexpr (std::is_same_v<T, std::int32_t>) return MPI_INT32_T;
  return MPI_INT64_T;
}

void check_mpi(int status, const char* what) {
  if (status == MPI_SUCCESS) return;
  char message[MPI_MAX_ERROR_STRING];
  int length = 0;
  MPI_Error_string(status, message, &length);
  throw std::runtime_error(std::string(what) +
                           " failed: " + std::string(message, static_cast<std::size_t>(length)));
}

// Rank r holds (r + 1) * (i % 7 + 1) at element i, so every result is a small exact integer.
template <typename T>
T expected_value(ReduceOperation operation, int size, std::int64_t index) {
  std::int64_t base = index % 7 + 1;
  std::int64_t sum = base * size * (size + 1) / 2;
  switch (operation) {
    case ReduceOperation::sum: return static_cast<T>(sum);
    // The same division in T as the Communicator's (integer mean truncates).
    case ReduceOperation::mean: return static_cast<T>(static_cast<T>(sum) / static_cast<T>(size));
    case ReduceOperation::max: return static_cast<T>(base * size);
    case ReduceOperation::min: return static_cast<T>(base);
  }
  return T{};
}

template <typename T>
std::int64_t count_wrong(const T* values, std::int64_t count, ReduceOperation operation, int size) {
  std::int64_t wrong = 0;
  for (std::int64_t index = 0; index < count; ++index) {
    T expected = expected_value<T>(operation, size, index);
    if constexpr (std::is_floating_point_v<T>) {
      double difference =
          std::abs(static_cast<double>(values[index]) - static_cast<double>(expected));
      wrong += !(difference <= 1e-5 * std::abs(static_cast<double>(expected)));  // NaN is wrong
    } else {
      wrong += values[index] != expected;
    }
  }
  return wrong;
}

struct Measurement {
  double microseconds = 0;
  std::int64_t wrong = 0;
};

// The four measured ways of reducing, in the order they run for each size.
enum Variant { keras_out_of_place, keras_in_place, raw_out_of_place, raw_in_place, variant_count };
bool is_in_place(int variant) { return variant == keras_in_place || variant == raw_in_place; }

// Warmup, then the timed loop (average per iteration, the slowest rank's: a collective is only
// done when its last rank is), then, with -c 1, one run on fresh inputs (the timed in-place runs
// compounded the sums) whose wrong elements are summed over ranks.
template <typename T, typename Step>
Measurement measure(int variant, const Step& step, std::int64_t count, const Options& options,
                    MPI_Comm communicator, const std::vector<T>& send, std::vector<T>& receive,
                    ReduceOperation operation, int size) {
  for (std::int64_t iteration = 0; iteration < options.warmup_iterations; ++iteration) {
    step(variant, count);
  }
  check_mpi(MPI_Barrier(communicator), "MPI_Barrier");
  auto start = std::chrono::steady_clock::now();
  for (std::int64_t iteration = 0; iteration < options.iterations; ++iteration)
    step(variant, count);
  double local =
      std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count() /
      static_cast<double>(options.iterations);
  Measurement result;
  check_mpi(MPI_Allreduce(&local, &result.microseconds, 1, MPI_DOUBLE, MPI_MAX, communicator),
            "MPI_Allreduce");
  if (options.check == 0) return result;
  std::fill(receive.begin(), receive.begin() + count, T{});  // 0 is never an expected value
  if (is_in_place(variant)) std::copy(send.begin(), send.begin() + count, receive.begin());
  step(variant, count);
  std::int64_t wrong = count_wrong(receive.data(), count, operation, size);
  check_mpi(MPI_Allreduce(&wrong, &result.wrong, 1, MPI_INT64_T, MPI_SUM, communicator),
            "MPI_Allreduce");
  return result;
}

struct Row {
  std::int64_t bytes, count;
  Measurement measurements[variant_count];
};

// GB/s (1e9 bytes per second) from bytes and microseconds.
double algorithm_bandwidth(std::int64_t bytes, double microseconds) {
  return microseconds > 0 ? static_cast<double>(bytes) / microseconds / 1e3 : 0;
}

// Prints one nccl-tests table, its wrong-element total and its average busbw.
void print_table(const char* title, const std::vector<Row>& rows, bool keras_columns,
                 const Options& options, int size) {
  std::printf("#\n# %s\n", title);
  std::printf(
      "#                                                       out-of-place                       "
      "in-place\n");
  std::printf("# %10s  %12s  %8s  %6s  %6s", "size", "count", "type", "redop", "root");
  std::printf("  %7s  %6s  %6s %6s  %7s  %6s  %6s %6s\n", "time", "algbw", "busbw", "#wrong",
              "time", "algbw", "busbw", "#wrong");
  std::printf("# %10s  %12s  %8s  %6s  %6s", "(B)", "(elements)", "", "", "");
  std::printf("  %7s  %6s  %6s %6s  %7s  %6s  %6s\n", "(us)", "(GB/s)", "(GB/s)", "", "(us)",
              "(GB/s)", "(GB/s)");
  double bandwidth_total = 0;
  std::int64_t wrong_total = 0;
  for (const Row& row : rows) {
    std::printf("%12lld  %12lld  %8s  %6s  %6d", static_cast<long long>(row.bytes),
                static_cast<long long>(row.count), options.type_name.c_str(),
                options.operation_name.c_str(), -1);
    for (int variant : keras_columns ? std::vector{keras_out_of_place, keras_in_place}
                                     : std::vector{raw_out_of_place, raw_in_place}) {
      const Measurement& measurement = row.measurements[variant];
      double microseconds = measurement.microseconds;
      int decimals = microseconds >= 10000 ? 0 : microseconds >= 100 ? 1 : 2;  // nccl-tests' widths
      double algorithm = algorithm_bandwidth(row.bytes, microseconds);
      // Each rank sends and receives 2(n-1)/n of the buffer in a ring, nccl-tests' bus factor.
      double bus = algorithm * 2.0 * (size - 1) / size;
      std::printf("  %7.*f  %6.2f  %6.2f", decimals, microseconds, algorithm, bus);
      if (options.check)
        std::printf("  %5lld", static_cast<long long>(measurement.wrong));
      else
        std::printf("  %5s", "N/A");
      bandwidth_total += bus;
      wrong_total += measurement.wrong;
    }
    std::printf("\n");
  }
  std::printf("# Out of bounds values : %lld %s\n", static_cast<long long>(wrong_total),
              wrong_total ? "FAILED" : "OK");
  std::printf("# Avg bus bandwidth    : %g\n",
              rows.empty() ? 0.0 : bandwidth_total / (2.0 * static_cast<double>(rows.size())));
}

// Writes every measurement to options.csv_path (rank 0 only).
void write_csv(const std::vector<Row>& rows, const Options& options, int size) {
  std::FILE* file = std::fopen(options.csv_path.c_str(), "w");
  if (file == nullptr) throw std::runtime_error("--csv: cannot open '" + options.csv_path + "'");
  std::fputs(kCsvHeader, file);
  const char* names[variant_count] = {"keras-cpp", "keras-cpp", "raw MPI_Allreduce",
                                      "raw MPI_Allreduce"};
  for (const Row& row : rows) {
    for (int variant = 0; variant < variant_count; ++variant) {
      const Measurement& measurement = row.measurements[variant];
      double algorithm = algorithm_bandwidth(row.bytes, measurement.microseconds);
      std::fprintf(file, "MPI,%s,%d,%lld,%lld,%s,%s,%s,%.3f,%.4f,%.4f,%lld\n", names[variant], size,
                   static_cast<long long>(row.bytes), static_cast<long long>(row.count),
                   options.type_name.c_str(), options.operation_name.c_str(),
                   is_in_place(variant) ? "in-place" : "out-of-place", measurement.microseconds,
                   algorithm, algorithm * 2.0 * (size - 1) / size,
                   static_cast<long long>(measurement.wrong));
    }
  }
  if (std::fclose(file) != 0) throw std::runtime_error("--csv: writing '" + options.csv_path + "' failed");
}

template <typename T>
int run(const Options& options, MpiCommunicator& keras_communicator) {
  MPI_Comm communicator = keras_communicator.handle();
  int size = keras_communicator.size(), rank = keras_communicator.rank();
  ReduceOperation operation = reduce_operation(options.operation_name);
  MPI_Op mpi_operation = operation == ReduceOperation::max   ? MPI_MAX
                         : operation == ReduceOperation::min ? MPI_MIN
                                                             : MPI_SUM;
  std::int64_t maximum_count = options.maximum_bytes / static_cast<std::int64_t>(sizeof(T));
  if (maximum_count > INT32_MAX) throw UsageError("-e: more elements than MPI's int count allows");

  // Allocated and touched once at the largest size: a first touch costs a page fault per 4 KiB,
  // which would dominate the timings if each size had fresh buffers.
  std::vector<T> send(static_cast<std::size_t>(maximum_count)), receive(send.size());
  for (std::int64_t index = 0; index < maximum_count; ++index) {
    send[static_cast<std::size_t>(index)] = static_cast<T>((rank + 1) * (index % 7 + 1));
  }
  // Our Communicator is in place only: out-of-place copies first, as a caller would.
  auto step = [&](int variant, std::int64_t count) {
    if (variant == keras_out_of_place)
      std::copy(send.begin(), send.begin() + count, receive.begin());
    if (variant == keras_out_of_place || variant == keras_in_place) {
      keras_communicator.all_reduce(receive.data(), count, keras::dtype_of<T>::value, operation);
      return;
    }
    const void* source = variant == raw_out_of_place ? send.data() : MPI_IN_PLACE;
    check_mpi(MPI_Allreduce(source, receive.data(), static_cast<int>(count), mpi_datatype<T>(),
                            mpi_operation, communicator),
              "MPI_Allreduce");
    if (operation != ReduceOperation::mean) return;
    for (std::int64_t index = 0; index < count; ++index) {
      receive[static_cast<std::size_t>(index)] /= static_cast<T>(size);  // as our Communicator
    }
  };

  std::vector<Row> rows;
  for (std::int64_t bytes = options.minimum_bytes; bytes <= options.maximum_bytes;
       bytes = bytes > options.maximum_bytes / options.factor ? options.maximum_bytes + 1
                                                              : bytes * options.factor) {
    std::int64_t count = bytes / static_cast<std::int64_t>(sizeof(T));
    Row row{count * static_cast<std::int64_t>(sizeof(T)), count, {}};
    // On a shared 2-core VM one timed loop per variant drifted by +-15% between runs, even for
    // two identical MPI calls. So the four variants run in kRounds interleaved rounds (the
    // order rotating each round) and each reports its median round.
    constexpr int kRounds = 5;
    std::vector<double> times[variant_count];
    for (int round = 0; round < kRounds; ++round) {
      for (int offset = 0; offset < variant_count; ++offset) {
        int variant = (round + offset) % variant_count;
        Measurement measurement =
            measure<T>(variant, step, count, options, communicator, send, receive, operation, size);
        times[variant].push_back(measurement.microseconds);
        row.measurements[variant].wrong += measurement.wrong;
      }
    }
    for (int variant = 0; variant < variant_count; ++variant) {
      std::sort(times[variant].begin(), times[variant].end());
      row.measurements[variant].microseconds = times[variant][kRounds / 2];
    }
    rows.push_back(row);
  }
  std::int64_t wrong = 0;  // already summed over ranks, so every rank agrees on the exit code
  for (const Row& row : rows) {
    for (const Measurement& measurement : row.measurements) wrong += measurement.wrong;
  }
  if (rank != 0) return wrong > 0 ? 1 : 0;

  char version[MPI_MAX_LIBRARY_VERSION_STRING];
  int length = 0;
  MPI_Get_library_version(version, &length);
  std::string library(version, static_cast<std::size_t>(length));
  library = library.substr(0, library.find('\n'));
  std::printf(
      "# all_reduce_perf: keras-cpp Communicator::all_reduce vs raw MPI_Allreduce, %d processes, "
      "%s, dtype %s, op %s, signature checks %s\n",
      size, library.c_str(), options.type_name.c_str(), options.operation_name.c_str(),
      options.signature_checks ? "on" : "off");
  std::printf(
      "# minBytes %lld maxBytes %lld step: %lld(factor) warmup iters: %lld iters: %lld validation: "
      "%lld\n",
      static_cast<long long>(options.minimum_bytes), static_cast<long long>(options.maximum_bytes),
      static_cast<long long>(options.factor), static_cast<long long>(options.warmup_iterations),
      static_cast<long long>(options.iterations), static_cast<long long>(options.check));
  print_table("keras-cpp MpiCommunicator::all_reduce (out-of-place = copy + in place)", rows, true,
              options, size);
  print_table("raw MPI_Allreduce on the same MPI communicator", rows, false, options, size);
  // Time ratio raw / ours equals the busbw ratio ours / raw (same bytes) without rounding.
  std::printf("#\n# ratio keras-cpp / raw MPI busbw (goal >= 0.95 from 1 MiB)\n");
  std::printf("# %10s  %12s  %12s\n", "size (B)", "out-of-place", "in-place");
  for (const Row& row : rows) {
    auto ratio = [&](int raw, int ours) {
      return row.measurements[raw].microseconds / row.measurements[ours].microseconds;
    };
    double out_of_place = ratio(raw_out_of_place, keras_out_of_place);
    double in_place = ratio(raw_in_place, keras_in_place);
    bool below_goal = row.bytes >= (1 << 20) && std::min(out_of_place, in_place) < 0.95;
    std::printf("%12lld  %12.3f  %12.3f%s\n", static_cast<long long>(row.bytes), out_of_place,
                in_place, below_goal ? "  below 0.95" : "");
  }
  if (!options.csv_path.empty()) {
    write_csv(rows, options, size);
    std::printf("# CSV written to %s\n", options.csv_path.c_str());
  }
  std::fflush(stdout);
  return wrong > 0 ? 1 : 0;
}

}  // namespace

int main(int argument_count, char** arguments) {
  keras::distribution::initialize();
  auto* keras_communicator = dynamic_cast<MpiCommunicator*>(&keras::distribution::world());
  int rank = keras::distribution::process_id();
  try {
    Options options = parse_options(argument_count, arguments);
    if (keras_communicator == nullptr)
      throw UsageError("run under mpirun (even -np 1): raw MPI is compared");
    if (options.backend == "nccl") {
      return run_nccl_all_reduce_perf({options.minimum_bytes, options.maximum_bytes,
                                       options.factor, options.iterations,
                                       options.warmup_iterations, options.check,
                                       options.type_name, options.operation_name});
    }
    keras_communicator->set_signature_checks(options.signature_checks);
    if (options.type_name == "double") return run<double>(options, *keras_communicator);
    if (options.type_name == "int32") return run<std::int32_t>(options, *keras_communicator);
    if (options.type_name == "int64") return run<std::int64_t>(options, *keras_communicator);
    return run<float>(options, *keras_communicator);
  } catch (const UsageError& error) {
    // Every rank parses the same command line, so every rank leaves with 2; one prints.
    bool help = std::string_view(error.what()) == "help";
    if (rank == 0 && help) std::printf("%s", kUsage);
    if (rank == 0 && !help) std::fprintf(stderr, "all_reduce_perf: %s\n%s", error.what(), kUsage);
    return help ? 0 : 2;
  } catch (const std::exception& error) {
    std::fprintf(stderr, "all_reduce_perf (rank %d): %s\n", rank, error.what());
    MPI_Abort(MPI_COMM_WORLD, 1);
    return 1;
  }
}
