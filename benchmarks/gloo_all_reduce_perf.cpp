// gloo_all_reduce_perf: the all-reduce bandwidth of our Gloo Communicator (a job started by
// hand, scripts/launch_local.sh) beside raw gloo::allreduce called directly on the same Gloo
// context, float32 sum, in place, in nccl-tests' columns. The variants alternate size by size
// over several rounds and the medians are printed. Time is per iteration on the slowest rank;
// algbw = bytes / time, busbw = algbw * 2(n-1)/n.
// --csv FILE writes the rows in all_reduce_perf's CSV columns (scripts/plot_all_reduce.py).
//   bash scripts/launch_local.sh 2 gloo_all_reduce_perf [-b 1K] [-e 64M] [-f 4] [-n 20] [-r 5]
//        [--csv FILE]
#include <gloo/allreduce.h>
#include <gloo/math.h>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "distribution/transports/gloo/gloo_communicator.h"
#include "keras.h"

namespace {

namespace kd = keras::distribution;

std::int64_t parse_size(const std::string& text) {
  std::int64_t value = 0;
  auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error != std::errc() || end == text.data()) {
    throw keras::ValueError("'" + text + "' is not a size (a positive integer, optionally with K, M or G)");
  }
  std::string suffix(end, text.data() + text.size());
  if (suffix == "K") value <<= 10;
  else if (suffix == "M") value <<= 20;
  else if (suffix == "G") value <<= 30;
  else if (!suffix.empty()) throw keras::ValueError("size '" + text + "' has an unknown suffix (K, M or G)");
  if (value < 1) throw keras::ValueError("sizes must be positive, got '" + text + "'");
  return value;
}

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  return values[values.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  try {
    std::int64_t minimum = 1 << 10, maximum = 64 << 20, factor = 4, iterations = 20, rounds = 5;
    std::string csv_path;
    for (int i = 1; i < argc; i += 2) {
      std::string flag = argv[i];
      if (i + 1 >= argc) throw keras::ValueError(flag + " needs a value");
      std::string value = argv[i + 1];
      if (flag == "-b") minimum = parse_size(value);
      else if (flag == "-e") maximum = parse_size(value);
      else if (flag == "-f") factor = parse_size(value);
      else if (flag == "-n") iterations = parse_size(value);
      else if (flag == "-r") rounds = parse_size(value);
      else if (flag == "--csv") csv_path = value;
      else throw keras::ValueError("unknown flag " + flag);
    }
    kd::initialize();
    auto* ours = dynamic_cast<kd::GlooCommunicator*>(&kd::world());
    if (ours == nullptr) {
      throw keras::ValueError("run it in a job started by hand (scripts/launch_local.sh N gloo_all_reduce_perf)");
    }
    const int size = ours->size();
    std::shared_ptr<gloo::Context> context = ours->gloo_context();
    std::uint32_t raw_tag = 1u << 30;  // apart from the communicator's own tags
    auto time_variant = [&](bool raw, std::vector<float>& buffer) {
      ours->barrier();
      auto begin = std::chrono::steady_clock::now();
      for (std::int64_t i = 0; i < iterations; ++i) {
        if (raw) {
          gloo::AllreduceOptions options(context);
          options.setOutput(buffer.data(), buffer.size());
          options.setReduceFunction(static_cast<void (*)(void*, const void*, const void*, size_t)>(&gloo::sum<float>));
          options.setTag(raw_tag++);
          gloo::allreduce(options);
        } else {
          ours->all_reduce(buffer.data(), static_cast<std::int64_t>(buffer.size()), keras::float32,
                           kd::ReduceOperation::sum);
        }
      }
      double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - begin).count() /
                       static_cast<double>(iterations);
      ours->all_reduce(&seconds, 1, keras::float64, kd::ReduceOperation::max);
      return seconds;
    };
    std::vector<std::int64_t> sizes;
    for (std::int64_t bytes = minimum; bytes <= maximum; bytes *= factor) sizes.push_back(bytes);
    std::vector<std::vector<double>> ours_times(sizes.size()), raw_times(sizes.size());
    for (std::int64_t round = 0; round < rounds; ++round) {
      for (std::size_t s = 0; s < sizes.size(); ++s) {
        std::vector<float> buffer(static_cast<std::size_t>(sizes[s] / 4), 1.0f);
        time_variant(false, buffer);  // warm-up of this size
        ours_times[s].push_back(time_variant(false, buffer));
        raw_times[s].push_back(time_variant(true, buffer));
      }
    }
    if (ours->rank() == 0) {
      std::printf("# gloo_all_reduce_perf: keras-cpp GlooCommunicator::all_reduce vs raw gloo::allreduce on the "
                  "same context, %d processes, float32 sum, in place, %lld rounds x %lld iterations (medians)\n",
                  size, static_cast<long long>(rounds), static_cast<long long>(iterations));
      std::printf("#%11s %12s  %10s %8s %8s  %10s %8s %8s  %6s\n", "size", "count", "ours(us)", "algbw", "busbw",
                  "raw(us)", "algbw", "busbw", "ratio");
      for (std::size_t s = 0; s < sizes.size(); ++s) {
        double mine = median(ours_times[s]), theirs = median(raw_times[s]);
        double bytes = static_cast<double>(sizes[s]);
        double bus = 2.0 * (size - 1) / size;
        std::printf(" %11lld %12lld  %10.1f %8.2f %8.2f  %10.1f %8.2f %8.2f  %6.2f\n",
                    static_cast<long long>(sizes[s]), static_cast<long long>(sizes[s] / 4), mine * 1e6,
                    bytes / mine / 1e9, bytes / mine / 1e9 * bus, theirs * 1e6, bytes / theirs / 1e9,
                    bytes / theirs / 1e9 * bus, theirs / mine);
      }
      if (!csv_path.empty()) {
        std::FILE* file = std::fopen(csv_path.c_str(), "w");
        if (file == nullptr) throw keras::FileNotFoundError("--csv: cannot open '" + csv_path + "'");
        std::fputs("backend,implementation,processes,size_bytes,count,dtype,operation,placement,"
                   "time_us,algbw_gbps,busbw_gbps,wrong\n", file);
        for (std::size_t s = 0; s < sizes.size(); ++s) {
          for (bool raw : {false, true}) {
            double seconds = median(raw ? raw_times[s] : ours_times[s]);
            double algorithm = static_cast<double>(sizes[s]) / seconds / 1e9;
            // wrong: not checked by this benchmark (all_reduce_perf checks values).
            std::fprintf(file, "Gloo,%s,%d,%lld,%lld,float,sum,in-place,%.3f,%.4f,%.4f,\n",
                         raw ? "raw gloo::allreduce" : "keras-cpp", size,
                         static_cast<long long>(sizes[s]), static_cast<long long>(sizes[s] / 4),
                         seconds * 1e6, algorithm, algorithm * 2.0 * (size - 1) / size);
          }
        }
        if (std::fclose(file) != 0) throw keras::Error("--csv: writing '" + csv_path + "' failed");
        std::printf("# CSV written to %s\n", csv_path.c_str());
      }
    }
    return 0;
  } catch (const keras::Error& error) {
    std::fprintf(stderr, "gloo_all_reduce_perf: %s\n", error.what());
    return 1;
  }
}
