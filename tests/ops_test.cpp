// Every op in one table (ggml test-backend-ops style): each entry names the op, its input
// shapes, how to call it, and an independent naive float64 reference. Each entry is checked
//   1. in float64 against the reference (kernel correctness),
//   2. in float32 against the reference (the dtype training uses),
//   3. for its gradient, in float64, against central finite differences of sum(op(x) * w).
//   4. with NaN, +inf and -inf among its inputs, in float64 and float32, against the same
//      reference: non-finite values propagate as in NumPy (a NaN is never masked to a number).
//   5. in bfloat16 and float16, output and gradient, within the dtype's resolution.
// Each check runs on every backend (see TestDevice). Adding an op to the engine means adding a
// row here; OpTableCoverage fails for an op of engine/ops.h without one. References use NumPy's NaN rules:
// maximum/minimum/max/min/argmax propagate NaN (nan_max below), unlike std::max.
#include <algorithm>
#include <cmath>
#include <fstream>
#include <functional>
#include <iterator>
#include <map>
#include <numbers>
#include <optional>
#include <regex>
#include <tuple>

#include "engine/gpu_runtime.h"
#include "tests/gpu_emulation/gpu_emulation.h"
#include "tests/test_helpers.h"

namespace keras {
namespace {

using Values = std::vector<double>;
using Inputs = std::vector<Values>;

enum class Domain { any, positive, away_from_zero };

struct OpCase {
  std::string name;
  std::vector<Shape> shapes;
  std::function<Tensor(const std::vector<Tensor>&)> op;
  std::function<Values(const Inputs&, const std::vector<Shape>&)> reference;
  Domain domain = Domain::any;
  bool differentiable = true;
  // A float32 round trip needs a step far above float32's resolution.
  double gradient_step = 1e-6;
  double gradient_tolerance = 1e-6;
  // Whether check 4 applies (one_hot casts its input to indices, where NaN has no meaning).
  bool nonfinite_inputs = true;
};

// NumPy's maximum and minimum: NaN wins.
double nan_max(double a, double b) { return std::isnan(a) || std::isnan(b) ? NAN : std::max(a, b); }
double nan_min(double a, double b) { return std::isnan(a) || std::isnan(b) ? NAN : std::min(a, b); }
double line_max(const std::vector<double>& v) {
  double best = v[0];
  for (double e : v) best = nan_max(best, e);
  return best;
}
double line_min(const std::vector<double>& v) {
  double best = v[0];
  for (double e : v) best = nan_min(best, e);
  return best;
}
// NumPy's argmax: the first NaN, else the first maximum.
double first_argmax(const double* begin, const double* end) {
  for (const double* at = begin; at != end; ++at) {
    if (std::isnan(*at)) return double(at - begin);
  }
  return double(std::max_element(begin, end) - begin);
}

// Index of `out_index` (row-major in out_shape) into a broadcast input of `shape`.
std::int64_t broadcast_source(std::int64_t out_index, const Shape& out_shape, const Shape& shape) {
  std::int64_t source = 0, stride = 1;
  int offset = static_cast<int>(out_shape.size() - shape.size());
  for (int d = static_cast<int>(out_shape.size()) - 1; d >= 0; --d) {
    std::int64_t index = out_index % out_shape[d];
    out_index /= out_shape[d];
    int own = d - offset;
    if (own >= 0) {
      if (shape[own] != 1) source += index * stride;
      stride *= shape[own];
    }
  }
  return source;
}

OpCase unary_case(std::string name, Tensor (*op)(const Tensor&), double (*reference)(double),
                  Domain domain = Domain::any) {
  return {name, {{3, 4}}, [op](const std::vector<Tensor>& x) { return op(x[0]); },
          [reference](const Inputs& in, const std::vector<Shape>&) {
            Values out;
            for (double v : in[0]) out.push_back(reference(v));
            return out;
          },
          domain};
}

OpCase binary_case(std::string name, Tensor (*op)(const Tensor&, const Tensor&),
                   double (*reference)(double, double), Shape a, Shape b,
                   Domain domain = Domain::any) {
  return {name, {a, b}, [op](const std::vector<Tensor>& x) { return op(x[0], x[1]); },
          [reference](const Inputs& in, const std::vector<Shape>& shapes) {
            Shape out_shape = broadcast_shapes(shapes[0], shapes[1], "test");
            Values out;
            for (std::int64_t i = 0; i < shape_size(out_shape); ++i) {
              out.push_back(reference(in[0][broadcast_source(i, out_shape, shapes[0])],
                                      in[1][broadcast_source(i, out_shape, shapes[1])]));
            }
            return out;
          },
          domain};
}

// Reduction over one axis of a rank-3 input (2, 3, 4), keepdims=false.
OpCase reduce_case(std::string name, std::function<Tensor(const Tensor&)> op, int axis,
                   std::function<double(const Values&)> reduce) {
  return {name, {{2, 3, 4}}, [op](const std::vector<Tensor>& x) { return op(x[0]); },
          [axis, reduce](const Inputs& in, const std::vector<Shape>&) {
            Shape shape = {2, 3, 4};
            Values out;
            std::int64_t outer = 1, inner = 1;
            for (int d = 0; d < axis; ++d) outer *= shape[d];
            for (int d = axis + 1; d < 3; ++d) inner *= shape[d];
            for (std::int64_t o = 0; o < outer; ++o) {
              for (std::int64_t i = 0; i < inner; ++i) {
                Values line;
                for (std::int64_t r = 0; r < shape[axis]; ++r) {
                  line.push_back(in[0][(o * shape[axis] + r) * inner + i]);
                }
                out.push_back(reduce(line));
              }
            }
            return out;
          }};
}

// numpy.einsum of two operands in float64, by visiting every assignment of the letters:
// `spec` is "ab,bc->ac" with every letter named (no "..." and an explicit output).
Values naive_einsum(const std::string& spec, const Inputs& in, const std::vector<Shape>& shapes) {
  auto comma = spec.find(','), arrow = spec.find("->");
  std::string terms[2] = {spec.substr(0, comma), spec.substr(comma + 1, arrow - comma - 1)};
  std::string output = spec.substr(arrow + 2);
  std::string letters;
  std::map<char, std::int64_t> size;
  for (int i = 0; i < 2; ++i) {
    for (std::size_t d = 0; d < terms[i].size(); ++d) {
      if (!size.count(terms[i][d])) letters += terms[i][d];
      size[terms[i][d]] = shapes[i][d];
    }
  }
  std::int64_t out_size = 1, total = 1;
  for (char c : output) out_size *= size[c];
  for (char c : letters) total *= size[c];
  Values out(static_cast<std::size_t>(out_size), 0.0);
  std::map<char, std::int64_t> at;
  auto offset = [&](const std::string& term) {
    std::int64_t flat = 0;
    for (char c : term) flat = flat * size[c] + at[c];
    return flat;
  };
  for (std::int64_t index = 0; index < total; ++index) {
    std::int64_t rest = index;
    for (auto c = letters.rbegin(); c != letters.rend(); ++c) {
      at[*c] = rest % size[*c];
      rest /= size[*c];
    }
    out[offset(output)] += in[0][offset(terms[0])] * in[1][offset(terms[1])];
  }
  return out;
}

Values naive_matmul(const Values& a, const Values& b, std::int64_t batch, std::int64_t m,
                    std::int64_t k, std::int64_t n, bool shared_b) {
  Values out(batch * m * n, 0.0);
  for (std::int64_t p = 0; p < batch; ++p) {
    for (std::int64_t i = 0; i < m; ++i) {
      for (std::int64_t j = 0; j < n; ++j) {
        double total = 0;
        for (std::int64_t q = 0; q < k; ++q) {
          total += a[(p * m + i) * k + q] * b[(shared_b ? 0 : p * k * n) + q * n + j];
        }
        out[(p * m + i) * n + j] = total;
      }
    }
  }
  return out;
}

Values softmax_reference(const Values& x, std::int64_t outer, std::int64_t length,
                         std::int64_t inner, bool log) {
  Values out(x.size());
  for (std::int64_t o = 0; o < outer; ++o) {
    for (std::int64_t i = 0; i < inner; ++i) {
      auto at = [&](std::int64_t r) { return (o * length + r) * inner + i; };
      double largest = -INFINITY, total = 0;
      for (std::int64_t r = 0; r < length; ++r) largest = nan_max(largest, x[at(r)]);
      for (std::int64_t r = 0; r < length; ++r) total += std::exp(x[at(r)] - largest);
      for (std::int64_t r = 0; r < length; ++r) {
        double value = x[at(r)] - largest - std::log(total);
        out[at(r)] = log ? value : std::exp(value);
      }
    }
  }
  return out;
}

// A 2-D window's output size and padding before, written out from Keras' documented rule
// (independently of engine/window_geometry.cpp): "valid" floor((n - extent) / stride) + 1,
// "same" ceil(n / stride) with the padding's smaller half before.
struct AxisReference {
  std::int64_t output, pad_before;
};
AxisReference axis_reference(std::int64_t n, std::int64_t window, std::int64_t stride,
                             std::int64_t dilation, bool same) {
  std::int64_t extent = dilation * (window - 1) + 1;
  if (!same) return {(n - extent) / stride + 1, 0};
  std::int64_t output = (n + stride - 1) / stride;
  std::int64_t total = std::max<std::int64_t>(0, (output - 1) * stride + extent - n);
  return {output, total / 2};
}

// Direct 2-D convolution in float64, channels_last, Keras kernel layout; padding contributes
// nothing.
Values naive_conv(const Values& x, const Shape& xs, const Values& k, const Shape& ks,
                  std::int64_t stride_h, std::int64_t stride_w, bool same, std::int64_t dilation) {
  std::int64_t groups = xs[3] / ks[2], per_group = ks[2], filters_per_group = ks[3] / groups;
  AxisReference rows = axis_reference(xs[1], ks[0], stride_h, dilation, same);
  AxisReference columns = axis_reference(xs[2], ks[1], stride_w, dilation, same);
  Values out;
  for (std::int64_t n = 0; n < xs[0]; ++n)
    for (std::int64_t i = 0; i < rows.output; ++i)
      for (std::int64_t j = 0; j < columns.output; ++j)
        for (std::int64_t f = 0; f < ks[3]; ++f) {
          std::int64_t group = f / filters_per_group;
          double total = 0;
          for (std::int64_t a = 0; a < ks[0]; ++a)
            for (std::int64_t b = 0; b < ks[1]; ++b)
              for (std::int64_t c = 0; c < per_group; ++c) {
                std::int64_t r = i * stride_h - rows.pad_before + a * dilation;
                std::int64_t q = j * stride_w - columns.pad_before + b * dilation;
                if (r < 0 || r >= xs[1] || q < 0 || q >= xs[2]) continue;
                total += x[((n * xs[1] + r) * xs[2] + q) * xs[3] + group * per_group + c] *
                         k[((a * ks[1] + b) * ks[2] + c) * ks[3] + f];
              }
          out.push_back(total);
        }
  return out;
}

// Max (NaN wins) or average (over the covered elements, padding not counted) pooling.
Values naive_pool(bool max, const Values& x, const Shape& xs, std::int64_t window,
                  std::int64_t stride, bool same) {
  AxisReference rows = axis_reference(xs[1], window, stride, 1, same);
  AxisReference columns = axis_reference(xs[2], window, stride, 1, same);
  Values out;
  for (std::int64_t n = 0; n < xs[0]; ++n)
    for (std::int64_t i = 0; i < rows.output; ++i)
      for (std::int64_t j = 0; j < columns.output; ++j)
        for (std::int64_t c = 0; c < xs[3]; ++c) {
          std::vector<double> covered;
          for (std::int64_t a = 0; a < window; ++a)
            for (std::int64_t b = 0; b < window; ++b) {
              std::int64_t r = i * stride - rows.pad_before + a, q = j * stride - columns.pad_before + b;
              if (r < 0 || r >= xs[1] || q < 0 || q >= xs[2]) continue;
              covered.push_back(x[((n * xs[1] + r) * xs[2] + q) * xs[3] + c]);
            }
          double total = 0;
          for (double v : covered) total += v;
          out.push_back(max ? line_max(covered) : total / double(covered.size()));
        }
  return out;
}

std::vector<OpCase> all_cases() {
  std::vector<OpCase> cases = {
      unary_case("negative", ops::negative, [](double v) { return -v; }),
      unary_case("abs", ops::abs, [](double v) { return std::abs(v); }, Domain::away_from_zero),
      unary_case("exp", ops::exp, [](double v) { return std::exp(v); }),
      unary_case("log", ops::log, [](double v) { return std::log(v); }, Domain::positive),
      unary_case("sqrt", ops::sqrt, [](double v) { return std::sqrt(v); }, Domain::positive),
      unary_case("rsqrt", ops::rsqrt, [](double v) { return 1 / std::sqrt(v); }, Domain::positive),
      unary_case("square", ops::square, [](double v) { return v * v; }),
      unary_case("reciprocal", ops::reciprocal, [](double v) { return 1 / v; }, Domain::positive),
      unary_case("tanh", ops::tanh, [](double v) { return std::tanh(v); }),
      unary_case("sigmoid", ops::sigmoid, [](double v) { return 1 / (1 + std::exp(-v)); }),
      unary_case("relu", ops::relu, [](double v) { return std::isnan(v) || v > 0 ? v : 0.0; },
                 Domain::away_from_zero),
      [] {  // piecewise constant: no gradient is recorded
        OpCase c = unary_case("sign", ops::sign,
                              [](double v) { return std::isnan(v) ? v : double((0 < v) - (v < 0)); },
                              Domain::away_from_zero);
        c.differentiable = false;
        return c;
      }(),
      unary_case("gelu", ops::gelu,
                 [](double v) { return 0.5 * v * (1 + std::erf(v / std::numbers::sqrt2)); }),
      unary_case("gelu_approximate", ops::gelu_approximate, [](double v) {
        return 0.5 * v * (1 + std::tanh(std::sqrt(2 / std::numbers::pi) * (v + 0.044715 * v * v * v)));
      }),
      unary_case("silu", ops::silu, [](double v) { return v / (1 + std::exp(-v)); }),
      binary_case("add", ops::add, [](double a, double b) { return a + b; }, {2, 3}, {3}),
      binary_case("subtract", ops::subtract, [](double a, double b) { return a - b; },
                  {2, 1, 3}, {4, 1}),
      binary_case("multiply", ops::multiply, [](double a, double b) { return a * b; }, {3, 4}, {}),
      binary_case("divide", ops::divide, [](double a, double b) { return a / b; }, {3, 1}, {1, 4},
                  Domain::positive),
      binary_case("maximum", ops::maximum, nan_max,
                  {3, 4}, {3, 4}),
      binary_case("minimum", ops::minimum, nan_min,
                  {3, 4}, {4}),
      binary_case("power", ops::power, [](double a, double b) { return std::pow(a, b); }, {3, 4},
                  {4}, Domain::positive),
      reduce_case("sum_axis1", [](const Tensor& x) { return ops::sum(x, {1}); }, 1,
                  [](const Values& v) { double t = 0; for (double e : v) t += e; return t; }),
      reduce_case("sum_axis0", [](const Tensor& x) { return ops::sum(x, {0}); }, 0,
                  [](const Values& v) { double t = 0; for (double e : v) t += e; return t; }),
      reduce_case("mean_axis2", [](const Tensor& x) { return ops::mean(x, {-1}); }, 2,
                  [](const Values& v) { double t = 0; for (double e : v) t += e; return t / double(v.size()); }),
      reduce_case("max_axis1", [](const Tensor& x) { return ops::max(x, {1}); }, 1,
                  line_max),
      reduce_case("min_axis2", [](const Tensor& x) { return ops::min(x, {2}); }, 2,
                  line_min),
      reduce_case("var_axis1", [](const Tensor& x) { return ops::var(x, {1}); }, 1,
                  [](const Values& v) {
                    double m = 0, s = 0;
                    for (double e : v) m += e / double(v.size());
                    for (double e : v) s += (e - m) * (e - m) / double(v.size());
                    return s;
                  }),
      reduce_case("softmax_axis1", [](const Tensor& x) { return ops::sum(ops::softmax(x, 1) * x, {1}); },
                  1, [](const Values& v) {
                    double largest = line_max(v), total = 0, weighted = 0;
                    for (double e : v) total += std::exp(e - largest);
                    for (double e : v) weighted += e * std::exp(e - largest) / total;
                    return weighted;
                  }),
  };
  cases.push_back({"sum_all", {{2, 3, 4}}, [](const auto& x) { return ops::sum(x[0]); },
                   [](const Inputs& in, const auto&) {
                     double t = 0;
                     for (double e : in[0]) t += e;
                     return Values{t};
                   }});
  cases.push_back({"mean_axes_0_2_keepdims", {{2, 3, 4}},
                   [](const auto& x) { return ops::mean(x[0], {0, 2}, true); },
                   [](const Inputs& in, const auto&) {
                     Values out(3, 0.0);
                     for (int i = 0; i < 24; ++i) out[(i / 4) % 3] += in[0][i] / 8.0;
                     return out;
                   }});
  // On one process the batch's mean is the mean (its rule under a distribution: the MPI tables'
  // synchronized BatchNormalization rows).
  cases.push_back({"batch_mean_axes_0_2", {{2, 3, 4}},
                   [](const auto& x) { return ops::batch_mean(x[0], {0, 2}); },
                   [](const Inputs& in, const auto&) {
                     Values out(3, 0.0);
                     for (int i = 0; i < 24; ++i) out[(i / 4) % 3] += in[0][i] / 8.0;
                     return out;
                   }});
  // The mask is the uniform draw of the key (the same bits in float32 and float64), kept where
  // it reaches the rate; kept elements scaled by 1 / (1 - rate).
  cases.push_back({"dropout", {{4, 5}},
                   [](const auto& x) { return ops::dropout(x[0], 0.3, 77); },
                   [](const Inputs& in, const auto& shapes) {
                     std::vector<double> uniform =
                         ops::random({RandomDistribution::uniform, 0.0, 1.0, 77}, shapes[0], float64).template to_vector<double>();
                     Values out(in[0].size());
                     for (std::size_t i = 0; i < out.size(); ++i) out[i] = uniform[i] >= 0.3 ? in[0][i] / 0.7 : in[0][i] * 0.0;
                     return out;
                   }});
  cases.push_back({"matmul", {{3, 4}, {4, 5}}, [](const auto& x) { return ops::matmul(x[0], x[1]); },
                   [](const Inputs& in, const auto&) { return naive_matmul(in[0], in[1], 1, 3, 4, 5, true); }});
  cases.push_back({"matmul_batched", {{2, 3, 4}, {2, 4, 5}},
                   [](const auto& x) { return ops::matmul(x[0], x[1]); },
                   [](const Inputs& in, const auto&) { return naive_matmul(in[0], in[1], 2, 3, 4, 5, false); }});
  // einsum: the contractions of EinsumDense and MultiHeadAttention (Keras' own equations),
  // transposed operands, sums over a letter of one operand, "..." and implicit outputs.
  auto einsum_case = [&](std::string name, std::string equation, std::string spelled_out,
                         std::vector<Shape> shapes) {
    cases.push_back({"einsum_" + name, shapes,
                     [equation](const auto& x) { return ops::einsum(equation, x[0], x[1]); },
                     [spelled_out](const Inputs& in, const std::vector<Shape>& s) {
                       return naive_einsum(spelled_out, in, s);
                     }});
  };
  einsum_case("dense", "abc,cd->abd", "abc,cd->abd", {{2, 3, 4}, {4, 5}});
  einsum_case("query_projection", "abc,cde->abde", "abc,cde->abde", {{2, 3, 4}, {4, 2, 3}});
  einsum_case("output_projection", "abcd,cde->abe", "abcd,cde->abe", {{2, 3, 2, 3}, {2, 3, 4}});
  einsum_case("attention_scores", "aecd,abcd->acbe", "aecd,abcd->acbe", {{2, 4, 2, 3}, {2, 3, 2, 3}});
  einsum_case("attention_combine", "acbe,aecd->abcd", "acbe,aecd->abcd", {{2, 2, 3, 4}, {2, 4, 2, 3}});
  // The four orientations the matmul kernel reads without a copy: a @ b, a @ bᵀ, aᵀ @ b, aᵀ @ bᵀ.
  einsum_case("plain_operands", "ik,kj->ij", "ik,kj->ij", {{3, 4}, {4, 5}});
  einsum_case("transposed_second", "ik,jk->ij", "ik,jk->ij", {{3, 4}, {5, 4}});
  einsum_case("transposed_first", "ki,kj->ij", "ki,kj->ij", {{4, 3}, {4, 5}});
  einsum_case("transposed_operands", "ki,jk->ij", "ki,jk->ij", {{4, 3}, {5, 4}});
  einsum_case("batched_transposed_second", "bik,bjk->bij", "bik,bjk->bij", {{2, 3, 4}, {2, 5, 4}});
  einsum_case("sums_a_letter", "abc,cd->ad", "abc,cd->ad", {{2, 3, 4}, {4, 5}});
  einsum_case("outer", "a,b->ab", "a,b->ab", {{3}, {4}});
  einsum_case("ellipsis", "...b,bc->...c", "xyb,bc->xyc", {{2, 3, 4}, {4, 5}});
  einsum_case("implicit_output", "ij,jk", "ij,jk->ik", {{3, 4}, {4, 2}});
  cases.push_back({"matmul_rank3_by_matrix", {{2, 3, 4}, {4, 5}},
                   [](const auto& x) { return ops::matmul(x[0], x[1]); },
                   [](const Inputs& in, const auto&) { return naive_matmul(in[0], in[1], 2, 3, 4, 5, true); }});
  cases.push_back({"softmax_last", {{3, 5}}, [](const auto& x) { return ops::softmax(x[0]); },
                   [](const Inputs& in, const auto&) { return softmax_reference(in[0], 3, 5, 1, false); }});
  cases.push_back({"softmax_axis0", {{3, 5}}, [](const auto& x) { return ops::softmax(x[0], 0); },
                   [](const Inputs& in, const auto&) { return softmax_reference(in[0], 1, 3, 5, false); }});
  cases.push_back({"log_softmax", {{2, 3, 4}}, [](const auto& x) { return ops::log_softmax(x[0], 1); },
                   [](const Inputs& in, const auto&) { return softmax_reference(in[0], 2, 3, 4, true); }});
  // Batch normalization in training: the statistics of every axis but the channels', then
  // Keras' formula in its order (keras.ops.batch_normalization: inv = gamma / sqrt(variance +
  // epsilon), x * inv + (beta - mean * inv), which makes an infinite gamma NaN, not infinite);
  // the gradient flows through the statistics to x, and to gamma and beta.
  auto batch_normalization_reference = [](const Values& x, const Shape& shape, int axis, const Values* gamma,
                                          const Values* beta) {
    std::int64_t outer = 1, channels = shape[static_cast<std::size_t>(axis)], inner = 1;
    for (int d = 0; d < axis; ++d) outer *= shape[static_cast<std::size_t>(d)];
    for (std::size_t d = static_cast<std::size_t>(axis) + 1; d < shape.size(); ++d) inner *= shape[d];
    auto channel_of = [&](std::size_t flat) { return static_cast<std::size_t>((std::int64_t(flat) / inner) % channels); };
    Values mean(static_cast<std::size_t>(channels), 0.0), variance(mean);
    const double count = double(outer * inner);
    for (std::size_t i = 0; i < x.size(); ++i) mean[channel_of(i)] += x[i] / count;
    for (std::size_t i = 0; i < x.size(); ++i) {
      variance[channel_of(i)] += (x[i] - mean[channel_of(i)]) * (x[i] - mean[channel_of(i)]) / count;
    }
    Values out;
    for (std::size_t i = 0; i < x.size(); ++i) {
      std::size_t c = channel_of(i);
      double inverse = 1 / std::sqrt(variance[c] + 1e-3) * (gamma ? (*gamma)[c] : 1.0);
      out.push_back(x[i] * inverse + ((beta ? (*beta)[c] : 0.0) - mean[c] * inverse));
    }
    return out;
  };
  cases.push_back({"fused_batch_normalization_channels_last", {{3, 2, 4}, {4}, {4}},
                   [](const auto& x) { return ops::fused_batch_normalization(x[0], x[1], x[2], -1, 1e-3); },
                   [batch_normalization_reference](const Inputs& in, const auto& shapes) {
                     return batch_normalization_reference(in[0], shapes[0], 2, &in[1], &in[2]);
                   }});
  cases.push_back({"fused_batch_normalization_axis1_without_scale", {{2, 3, 4}, {3}},
                   [](const auto& x) { return ops::fused_batch_normalization(x[0], Tensor(), x[1], 1, 1e-3); },
                   [batch_normalization_reference](const Inputs& in, const auto& shapes) {
                     return batch_normalization_reference(in[0], shapes[0], 1, nullptr, &in[1]);
                   }});
  // Layer normalization: each line of the last axis by its own statistics,
  // (x - mean) / sqrt(variance + epsilon) * gamma + beta.
  auto layer_normalization_reference = [](const Values& x, std::int64_t length, const Values* gamma,
                                          const Values* beta) {
    Values out;
    for (std::size_t start = 0; start < x.size(); start += static_cast<std::size_t>(length)) {
      double mean = 0, variance = 0;
      for (std::int64_t k = 0; k < length; ++k) mean += x[start + std::size_t(k)] / double(length);
      for (std::int64_t k = 0; k < length; ++k) {
        double d = x[start + std::size_t(k)] - mean;
        variance += d * d / double(length);
      }
      for (std::int64_t k = 0; k < length; ++k) {
        double normalized = (x[start + std::size_t(k)] - mean) / std::sqrt(variance + 1e-3);
        out.push_back(normalized * (gamma ? (*gamma)[std::size_t(k)] : 1.0) + (beta ? (*beta)[std::size_t(k)] : 0.0));
      }
    }
    return out;
  };
  cases.push_back({"fused_layer_normalization", {{2, 3, 5}, {5}, {5}},
                   [](const auto& x) { return ops::fused_layer_normalization(x[0], x[1], x[2], 1e-3); },
                   [layer_normalization_reference](const Inputs& in, const auto&) {
                     return layer_normalization_reference(in[0], 5, &in[1], &in[2]);
                   }});
  cases.push_back({"fused_layer_normalization_without_gamma_and_beta", {{4, 6}},
                   [](const auto& x) { return ops::fused_layer_normalization(x[0], Tensor(), Tensor(), 1e-3); },
                   [layer_normalization_reference](const Inputs& in, const auto&) {
                     return layer_normalization_reference(in[0], 6, nullptr, nullptr);
                   }});
  cases.push_back({"reshape", {{2, 6}}, [](const auto& x) { return ops::reshape(x[0], {3, -1}); },
                   [](const Inputs& in, const auto&) { return in[0]; }});
  cases.push_back({"transpose", {{2, 3, 4}},
                   [](const auto& x) { return ops::transpose(x[0], {2, 0, 1}); },
                   [](const Inputs& in, const auto&) {
                     Values out;
                     for (int k = 0; k < 4; ++k)
                       for (int i = 0; i < 2; ++i)
                         for (int j = 0; j < 3; ++j) out.push_back(in[0][(i * 3 + j) * 4 + k]);
                     return out;
                   }});
  cases.push_back({"slice", {{4, 5}}, [](const auto& x) { return ops::slice(x[0], {1, 2}, {2, -1}); },
                   [](const Inputs& in, const auto&) {
                     Values out;
                     for (int i = 1; i < 3; ++i)
                       for (int j = 2; j < 5; ++j) out.push_back(in[0][i * 5 + j]);
                     return out;
                   }});
  cases.push_back({"concatenate_axis1", {{2, 2}, {2, 3}},
                   [](const auto& x) { return ops::concatenate({x[0], x[1]}, 1); },
                   [](const Inputs& in, const auto&) {
                     Values out;
                     for (int i = 0; i < 2; ++i) {
                       for (int j = 0; j < 2; ++j) out.push_back(in[0][i * 2 + j]);
                       for (int j = 0; j < 3; ++j) out.push_back(in[1][i * 3 + j]);
                     }
                     return out;
                   }});
  cases.push_back({"take_axis0_repeated", {{4, 3}},
                   [](const auto& x) {
                     return ops::take(x[0], Tensor::from_vector<std::int64_t>({2, 0, 2, -1}, {2, 2}).to(x[0].device()), 0);
                   },
                   [](const Inputs& in, const auto&) {
                     Values out;
                     for (int row : {2, 0, 2, 3})
                       for (int j = 0; j < 3; ++j) out.push_back(in[0][row * 3 + j]);
                     return out;
                   }});
  cases.push_back({"take_axis1", {{2, 4}},
                   [](const auto& x) {
                     return ops::take(x[0], Tensor::from_vector<std::int32_t>({3, 1}, {2}).to(x[0].device()), 1);
                   },
                   [](const Inputs& in, const auto&) {
                     return Values{in[0][3], in[0][1], in[0][7], in[0][5]};
                   }});
  cases.push_back({"broadcast_to", {{3, 1}},
                   [](const auto& x) { return ops::broadcast_to(x[0], {2, 3, 4}); },
                   [](const Inputs& in, const auto&) {
                     Values out;
                     for (int i = 0; i < 24; ++i) out.push_back(in[0][(i / 4) % 3]);
                     return out;
                   }});
  cases.push_back({"expand_dims_then_squeeze", {{2, 3}},
                   [](const auto& x) { return ops::squeeze(ops::expand_dims(x[0], 1), 1) * 2.0; },
                   [](const Inputs& in, const auto&) {
                     Values out;
                     for (double v : in[0]) out.push_back(2 * v);
                     return out;
                   }});
  cases.push_back({"where", {{2, 3}, {3}},
                   [](const auto& x) {
                     Tensor condition = Tensor::from_vector<bool>({true, false, true, false, false, true}, {2, 3}).to(x[0].device());
                     return ops::where(condition, x[0], x[1]);
                   },
                   [](const Inputs& in, const auto&) {
                     bool c[] = {true, false, true, false, false, true};
                     Values out;
                     for (int i = 0; i < 6; ++i) out.push_back(c[i] ? in[0][i] : in[1][i % 3]);
                     return out;
                   }});
  cases.push_back({"cast_roundtrip", {{2, 3}},
                   [](const auto& x) { return ops::cast(ops::cast(x[0], float32), x[0].dtype()); },
                   [](const Inputs& in, const auto&) {
                     Values out;
                     for (double v : in[0]) out.push_back(static_cast<float>(v));
                     return out;
                   },
                   Domain::any, true, 1e-2, 1e-4});
  cases.push_back({"argmax_axis1", {{3, 4}},
                   [](const auto& x) { return ops::argmax(x[0], 1); },
                   [](const Inputs& in, const auto&) {
                     Values out;
                     for (int i = 0; i < 3; ++i) {
                       const double* row = in[0].data() + i * 4;
                       out.push_back(first_argmax(row, row + 4));
                     }
                     return out;
                   },
                   Domain::any, false});
  cases.push_back({"argmin_axis0", {{3, 4}},
                   [](const auto& x) { return ops::argmin(x[0], 0); },
                   [](const Inputs& in, const auto&) {
                     Values out;
                     for (int j = 0; j < 4; ++j) {
                       double column[3] = {-in[0][j], -in[0][4 + j], -in[0][8 + j]};
                       out.push_back(first_argmax(column, column + 3));
                     }
                     return out;
                   },
                   Domain::any, false});
  cases.push_back({"one_hot", {{3}},
                   [](const auto& x) {
                     return ops::one_hot(ops::cast(ops::abs(x[0]) * 1.9, int64), 4, x[0].dtype());
                   },
                   [](const Inputs& in, const auto&) {
                     Values out(12, 0.0);
                     for (int i = 0; i < 3; ++i) {
                       out[i * 4 + static_cast<int>(static_cast<float>(std::abs(in[0][i])) * 1.9f)] = 1;
                     }
                     return out;
                   },
                   Domain::any, false, 1e-6, 1e-6, /*nonfinite_inputs=*/false});
  // Comparisons and logic give bool tensors, with no gradient; NaN compares false (not_equal
  // true), as in NumPy.
  auto comparison_case = [&](std::string name, Tensor (*op)(const Tensor&, const Tensor&),
                             double (*reference)(double, double)) {
    OpCase c = binary_case(std::move(name), op, reference, {3, 4}, {4});
    c.differentiable = false;
    cases.push_back(c);
  };
  comparison_case("equal", ops::equal, [](double a, double b) { return double(a == b); });
  comparison_case("not_equal", ops::not_equal, [](double a, double b) { return double(a != b); });
  comparison_case("less", ops::less, [](double a, double b) { return double(a < b); });
  comparison_case("less_equal", ops::less_equal, [](double a, double b) { return double(a <= b); });
  comparison_case("greater", ops::greater, [](double a, double b) { return double(a > b); });
  comparison_case("greater_equal", ops::greater_equal,
                  [](double a, double b) { return double(a >= b); });
  // Logic on the signs of two float inputs, so that every combination of truths occurs.
  auto positive = [](const Tensor& x) { return ops::greater(x, ops::scalar_like(x, 0.0)); };
  auto logic_case = [&](std::string name, std::function<Tensor(const Tensor&, const Tensor&)> op,
                        bool (*reference)(bool, bool)) {
    cases.push_back({name, {{3, 4}, {3, 4}},
                     [op](const auto& x) { return op(x[0], x[1]); },
                     [reference](const Inputs& in, const auto&) {
                       Values out;
                       for (std::size_t i = 0; i < in[0].size(); ++i) {
                         out.push_back(double(reference(in[0][i] > 0, in[1][i] > 0)));
                       }
                       return out;
                     },
                     Domain::away_from_zero, false});
  };
  logic_case("logical_and", [positive](const Tensor& a, const Tensor& b) {
    return ops::logical_and(positive(a), positive(b));
  }, [](bool a, bool b) { return a && b; });
  logic_case("logical_or", [positive](const Tensor& a, const Tensor& b) {
    return ops::logical_or(positive(a), positive(b));
  }, [](bool a, bool b) { return a || b; });
  logic_case("logical_not", [positive](const Tensor& a, const Tensor&) {
    return ops::logical_not(positive(a));
  }, [](bool a, bool) { return !a; });
  // Convolutions: strides, both paddings (odd and even windows, so "same" pads unevenly),
  // dilation, groups and depthwise. Padded rows take no NaN inputs: a padded zero times an
  // infinite kernel entry is NaN when im2col multiplies it (the GPU) and nothing when oneDNN
  // skips the padding (the CPU); the unpadded rows check NaN and inf on every backend.
  auto conv_case = [&](std::string name, Shape input, Shape kernel, std::int64_t stride_h,
                       std::int64_t stride_w, bool same, std::int64_t dilation) {
    OpCase c{"conv_" + name, {input, kernel},
             [=](const auto& x) {
               return ops::conv(x[0], x[1], {stride_h, stride_w}, same ? "same" : "valid",
                                "channels_last", {dilation});
             },
             [=](const Inputs& in, const auto& shapes) {
               return naive_conv(in[0], shapes[0], in[1], shapes[1], stride_h, stride_w, same, dilation);
             }};
    c.nonfinite_inputs = !same;
    cases.push_back(c);
  };
  conv_case("valid", {2, 5, 5, 3}, {3, 3, 3, 4}, 1, 1, false, 1);
  conv_case("same_stride2", {1, 6, 5, 2}, {3, 3, 2, 3}, 2, 2, true, 1);
  conv_case("same_even_window", {1, 5, 5, 2}, {4, 4, 2, 2}, 1, 1, true, 1);
  conv_case("valid_strides_2x1_rectangular_window", {2, 6, 5, 2}, {2, 3, 2, 3}, 2, 1, false, 1);
  conv_case("dilation2_same", {1, 7, 7, 2}, {3, 3, 2, 2}, 1, 1, true, 2);
  conv_case("dilation2_valid_stride2", {1, 8, 8, 1}, {2, 2, 1, 2}, 2, 2, false, 2);
  conv_case("groups2", {1, 5, 5, 4}, {3, 3, 2, 6}, 1, 1, false, 1);
  conv_case("depthwise_same", {1, 4, 4, 3}, {3, 3, 1, 3}, 1, 1, true, 1);
  conv_case("window_6_stride2", {2, 9, 9, 2}, {6, 6, 2, 3}, 2, 2, false, 1);
  // Pooling: the ties of max pooling's gradient do not occur with random inputs.
  auto pool_case = [&](std::string name, bool max, Shape input, std::int64_t window,
                       std::int64_t stride, bool same) {
    cases.push_back({(max ? "max_pool_" : "average_pool_") + name, {input},
                     [=](const auto& x) {
                       return max ? ops::max_pool(x[0], {window}, {stride}, same ? "same" : "valid")
                                  : ops::average_pool(x[0], {window}, {stride}, same ? "same" : "valid");
                     },
                     [=](const Inputs& in, const auto& shapes) {
                       return naive_pool(max, in[0], shapes[0], window, stride, same);
                     }});
  };
  pool_case("2x2", true, {2, 4, 4, 3}, 2, 2, false);
  pool_case("3x3_stride2_same", true, {1, 5, 5, 2}, 3, 2, true);
  pool_case("3x3_stride1_valid_overlapping", true, {1, 5, 4, 2}, 3, 1, false);
  pool_case("2x2", false, {2, 4, 4, 3}, 2, 2, false);
  pool_case("3x3_stride2_same", false, {1, 5, 5, 2}, 3, 2, true);
  pool_case("3x3_stride1_same_overlapping", false, {1, 4, 5, 2}, 3, 1, true);
  cases.push_back({"squeeze", {{2, 1, 3}}, [](const auto& x) { return ops::squeeze(x[0], -2); },
                   [](const Inputs& in, const auto&) { return in[0]; }});
  cases.push_back({"scalar_like", {{2, 3}},
                   [](const auto& x) { return x[0] * ops::scalar_like(x[0], -1.5); },
                   [](const Inputs& in, const auto&) {
                     Values out;
                     for (double v : in[0]) out.push_back(-1.5 * v);
                     return out;
                   }});
  return cases;
}

Tensor make_input(const Shape& shape, Domain domain, std::uint64_t seed) {
  Tensor x = testing::random_tensor(shape, seed, float64, -2.0, 2.0);
  if (domain == Domain::positive) return ops::abs(x) + 0.3;
  if (domain == Domain::away_from_zero) {
    return ops::where(ops::less(x, ops::scalar_like(x, 0.0)), x - 0.2, x + 0.2);
  }
  return x;
}

// Prints a case by name in test listings.
void PrintTo(const OpCase& op_case, std::ostream* stream) { *stream << op_case.name; }

// Every case runs on every backend: the CPU; an emulated gpu:0 whose memory is host memory and
// whose kernels are the CUDA kernel bodies run on the host (tests/gpu_emulation/: the GPU
// kernels' logic and the ops' device placement, without a GPU); and the GPU when one exists.
enum class TestDevice { cpu, emulated_gpu, gpu };

std::string device_name(TestDevice device) {
  switch (device) {
    case TestDevice::cpu: return "cpu";
    case TestDevice::emulated_gpu: return "gpu_kernels_on_host";
    case TestDevice::gpu: return "gpu";
  }
  return "unknown";
}

void PrintTo(TestDevice device, std::ostream* stream) { *stream << device_name(device); }

class OpTable : public ::testing::TestWithParam<std::tuple<OpCase, TestDevice>> {
 protected:
  void SetUp() override {
    TestDevice device = std::get<1>(GetParam());
    if (device == TestDevice::gpu && gpu::device_count() == 0) {
      GTEST_SKIP() << "no GPU here (" << gpu::description()
                   << "): the GPU half of the op table did not run";
    }
    if (device == TestDevice::emulated_gpu) {
      if (gpu::device_count() > 0) GTEST_SKIP() << "a real GPU is here: the gpu cases run on it";
      emulation_.emplace();
    }
  }
  const OpCase& op_case() const { return std::get<0>(GetParam()); }
  Device device() const {
    return std::get<1>(GetParam()) == TestDevice::cpu ? Device::cpu() : Device::gpu(0);
  }
  std::vector<Tensor> on_device(const std::vector<Tensor>& tensors) const {
    std::vector<Tensor> moved;
    for (const Tensor& tensor : tensors) moved.push_back(tensor.to(device()));
    return moved;
  }

 private:
  std::optional<testing::ScopedGpuEmulation> emulation_;
};

TEST_P(OpTable, MatchesReferenceInFloat64AndFloat32) {
  const OpCase& c = op_case();
  std::vector<Tensor> inputs;
  Inputs values;
  for (std::size_t i = 0; i < c.shapes.size(); ++i) {
    inputs.push_back(make_input(c.shapes[i], c.domain, 1000 + i));
    values.push_back(inputs.back().to_vector<double>());
  }
  Values expected = c.reference(values, c.shapes);
  inputs = on_device(inputs);
  testing::expect_close(c.op(inputs).to_vector<double>(), expected, 1e-12, c.name + " float64");
  std::vector<Tensor> inputs32;
  for (const Tensor& input : inputs) inputs32.push_back(input.astype(float32));
  Tensor out32 = c.op(inputs32);
  testing::expect_close(out32.to_vector<double>(), expected, 2e-5, c.name + " float32");
}

TEST_P(OpTable, GradientMatchesFiniteDifferences) {
  const OpCase& c = op_case();
  if (!c.differentiable) GTEST_SKIP() << c.name << " has no gradient";
  std::vector<Tensor> inputs;
  for (std::size_t i = 0; i < c.shapes.size(); ++i) {
    inputs.push_back(
        make_input(c.shapes[i], c.domain, 2000 + i).to(device()).clone().set_requires_grad(true));
  }
  Tensor output = c.op(inputs);
  Tensor weights = testing::random_tensor(output.shape(), 77).to(device());
  ops::sum(output * weights).backward();
  auto objective = [&](const std::vector<Tensor>& x) {
    NoGradGuard no_grad;
    return ops::sum(c.op(x) * weights).item();
  };
  const double step = c.gradient_step;
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    ASSERT_TRUE(inputs[i].grad().defined()) << c.name << " input " << i << " got no gradient";
    Values analytic = inputs[i].grad().to_vector<double>();
    Values base = inputs[i].to_vector<double>();
    Values numeric(base.size());
    for (std::size_t j = 0; j < base.size(); ++j) {
      std::vector<Tensor> plus = inputs, minus = inputs;
      Values shifted = base;
      shifted[j] = base[j] + step;
      plus[i] = Tensor::from_vector(shifted, inputs[i].shape()).to(device());
      shifted[j] = base[j] - step;
      minus[i] = Tensor::from_vector(shifted, inputs[i].shape()).to(device());
      numeric[j] = (objective(plus) - objective(minus)) / (2 * step);
    }
    testing::expect_close(analytic, numeric, c.gradient_tolerance, c.name + " gradient of input " + std::to_string(i));
  }
}

// Both NaN, or equal infinities, or close finite values.
void expect_same_nonfinite(const Values& actual, const Values& expected, double tolerance,
                           const std::string& what) {
  ASSERT_EQ(actual.size(), expected.size()) << what;
  for (std::size_t i = 0; i < actual.size(); ++i) {
    if (std::isnan(expected[i]) || std::isinf(expected[i])) {
      EXPECT_TRUE(std::isnan(expected[i]) ? std::isnan(actual[i]) : actual[i] == expected[i])
          << what << " element " << i << ": got " << actual[i] << ", expected " << expected[i];
    } else {
      EXPECT_LE(std::abs(actual[i] - expected[i]), tolerance * std::max(1.0, std::abs(expected[i])))
          << what << " element " << i << ": got " << actual[i] << ", expected " << expected[i];
    }
  }
}

TEST_P(OpTable, NonFiniteInputsPropagateAsInNumPy) {
  const OpCase& c = op_case();
  if (!c.nonfinite_inputs) GTEST_SKIP() << c.name << " takes no NaN inputs";
  std::vector<Tensor> inputs;
  Inputs values;
  const double specials[] = {NAN, INFINITY, -INFINITY};
  for (std::size_t i = 0; i < c.shapes.size(); ++i) {
    Values v = make_input(c.shapes[i], c.domain, 3000 + i).to_vector<double>();
    // Different positions in each input, so that NaN meets inf and finite values.
    for (std::size_t k = 0; k < 3 && k < v.size(); ++k) v[(k * 5 + i * 2) % v.size()] = specials[k];
    inputs.push_back(Tensor::from_vector(v, c.shapes[i]));
    values.push_back(v);
  }
  Values expected = c.reference(values, c.shapes);
  inputs = on_device(inputs);
  expect_same_nonfinite(c.op(inputs).to_vector<double>(), expected, 1e-12, c.name + " float64");
  std::vector<Tensor> inputs32;
  for (const Tensor& input : inputs) inputs32.push_back(input.astype(float32));
  expect_same_nonfinite(c.op(inputs32).to_vector<double>(), expected, 2e-5, c.name + " float32");
}

// Half precision: every op on bfloat16 and float16 inputs against the float64 reference on the
// same (rounded) inputs. Kernels compute 16-bit tensors in float32 and round each result once
// (engine/float32_compute.h), so an op's error is half a unit in the last place of its result:
// 2^-9 of it in bfloat16 (8 significant bits), 2^-12 in float16 (11 bits). The tolerances
// allow two such roundings, for the ops written as two ops (x * scalar_like, var's mean of
// squares) and for float16's double rounding from float64 through float32. Gradients: the same
// inputs' float64 gradient, two roundings per op of the rule, so four units here.
struct HalfPrecision {
  DType dtype;
  double unit;  // 2^-(significant bits)
};
constexpr HalfPrecision kHalfPrecisions[] = {{bfloat16, 1.0 / 256}, {float16, 1.0 / 2048}};

TEST_P(OpTable, HalfPrecisionMatchesTheReferenceWithinItsResolution) {
  const OpCase& c = op_case();
  for (const HalfPrecision& half : kHalfPrecisions) {
    std::vector<Tensor> inputs;
    Inputs values;
    for (std::size_t i = 0; i < c.shapes.size(); ++i) {
      inputs.push_back(make_input(c.shapes[i], c.domain, 1000 + i).astype(half.dtype));
      values.push_back(inputs.back().to_vector<double>());
    }
    Values expected = c.reference(values, c.shapes);
    Tensor out = c.op(on_device(inputs));
    std::string what = c.name + " " + std::string(dtype_name(half.dtype));
    if (is_floating(out.dtype())) {
      EXPECT_EQ(out.dtype(), half.dtype) << what << ": the result's dtype";
    }
    testing::expect_close(out.to_vector<double>(), expected, 2 * half.unit, what);
  }
}

TEST_P(OpTable, HalfPrecisionGradientMatchesFloat64) {
  const OpCase& c = op_case();
  if (!c.differentiable) GTEST_SKIP() << c.name << " has no gradient";
  for (const HalfPrecision& half : kHalfPrecisions) {
    std::vector<Tensor> narrow, wide;
    for (std::size_t i = 0; i < c.shapes.size(); ++i) {
      Tensor rounded = make_input(c.shapes[i], c.domain, 2000 + i).astype(half.dtype);
      narrow.push_back(rounded.to(device()).clone().set_requires_grad(true));
      wide.push_back(rounded.astype(float64).to(device()).clone().set_requires_grad(true));
    }
    Tensor weights = testing::random_tensor(c.op(wide).shape(), 77, float64).astype(half.dtype);
    ops::sum(c.op(wide) * weights.astype(float64).to(device())).backward();
    ops::sum(c.op(narrow) * weights.to(device())).backward();
    for (std::size_t i = 0; i < narrow.size(); ++i) {
      std::string what = c.name + " " + std::string(dtype_name(half.dtype)) + " gradient of input " + std::to_string(i);
      ASSERT_TRUE(narrow[i].grad().defined()) << what;
      EXPECT_EQ(narrow[i].grad().dtype(), half.dtype) << what;
      // A gradient sums many products: scale the tolerance by the largest of them.
      Values expected = wide[i].grad().to_vector<double>();
      double largest = 1.0;
      for (double value : expected) largest = std::max(largest, std::abs(value));
      testing::expect_close(narrow[i].grad().to_vector<double>(), expected, 4 * half.unit * largest, what);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(AllOps, OpTable,
                         ::testing::Combine(::testing::ValuesIn(all_cases()),
                                            ::testing::Values(TestDevice::cpu,
                                                              TestDevice::emulated_gpu,
                                                              TestDevice::gpu)),
                         [](const auto& parameter) {
                           return std::get<0>(parameter.param).name + "_on_" +
                                  device_name(std::get<1>(parameter.param));
                         });


// Every op of engine/ops.h has a row here: a case named after it, or after it and an underscore
// ("sum_axis1"). The exceptions are checked elsewhere, where the table's three checks do not
// fit, and say where.
TEST(Einsum, BadEquationsAreClearErrors) {
  Tensor x = Tensor::zeros({2, 3, 4});
  Tensor kernel = Tensor::zeros({4, 5});
  using testing::expect_throw_with;
  expect_throw_with<ValueError>([&] { ops::einsum("abc->abc", x, kernel); }, "exactly two operands");
  expect_throw_with<ValueError>([&] { ops::einsum("abc,cd,de->ae", x, kernel); }, "exactly two operands");
  expect_throw_with<ValueError>([&] { ops::einsum("ab1,cd->abd", x, kernel); }, "has '1' in operand 0");
  expect_throw_with<ValueError>([&] { ops::einsum("ab,cd->abd", x, kernel); },
                                "names 2 dimensions for operand 0 ('ab'), but it has shape (2, 3, 4)");
  expect_throw_with<ValueError>([&] { ops::einsum("abc,cd->abq", x, kernel); }, "'q' in its output but in no operand");
  expect_throw_with<ValueError>([&] { ops::einsum("abc,cd->aa", x, kernel); }, "repeats 'a' in its output");
  expect_throw_with<ValueError>([&] { ops::einsum("abc,cd->ab->d", x, kernel); }, "more than one '->'");
  // The kernel does not match the equation: 'c' is 4 in x but 5 in the kernel.
  expect_throw_with<ShapeError>([&] { ops::einsum("abc,dc->abd", x, kernel); },
                                "'c' is 4 in the first operand (shape (2, 3, 4)) but 5 in the second");
  expect_throw_with<NotImplementedError>([&] { ops::einsum("aab,bc->ac", Tensor::zeros({3, 3, 4}), kernel); },
                                         "repeats 'a' in one operand");
  expect_throw_with<DTypeError>([&] { ops::einsum("ab,bc->ac", Tensor::zeros({2, 4}, int64), Tensor::zeros({4, 5}, int64)); },
                                "expects a floating tensor");
}

// The table's shapes are small enough that a convolution runs as one oneDNN call; a batch this
// size (4.7 M multiply-adds, over the 4.2 M below which one thread runs it) is split over two
// threads, each on its own primitives, and the kernel gradient sums the parts. float64 (the
// patch matrix through Eigen) is the reference.
TEST(Convolution, BatchSplitOverThreadsMatchesFloat64) {
  int threads = num_threads();
  set_num_threads(2);
  Tensor x = testing::random_tensor({16, 16, 16, 16}, 5, float64);
  Tensor kernel = testing::random_tensor({3, 3, 16, 32}, 6, float64);
  Tensor weights = testing::random_tensor({16, 8, 8, 32}, 7, float64);
  auto run = [&](DType dtype) {
    Tensor input = x.astype(dtype).detach().clone().set_requires_grad(true);
    Tensor filters = kernel.astype(dtype).detach().clone().set_requires_grad(true);
    Tensor out = ops::conv(input, filters, {2}, "same");
    ops::sum(out * weights.astype(dtype)).backward();
    return std::vector<Values>{out.to_vector<double>(), input.grad().to_vector<double>(),
                               filters.grad().to_vector<double>()};
  };
  std::vector<Values> expected = run(float64), actual = run(float32);
  set_num_threads(threads);
  testing::expect_close(actual[0], expected[0], 2e-4, "output");
  testing::expect_close(actual[1], expected[1], 2e-4, "input gradient");
  testing::expect_close(actual[2], expected[2], 2e-3, "kernel gradient");
}

// The same split in bfloat16 and float16 (oneDNN's bf16 primitives where the CPU's bf16
// instructions pay, float32 copies elsewhere; keras_tests_bfloat16_kernels_forced runs both): each result rounded once from float32 sums, the kernel
// gradient's parts summed in float32. Against float64 on the same rounded inputs, with the op
// table's tolerances (two units; four units of the largest for gradients).
TEST(Convolution, HalfPrecisionBatchSplitOverThreadsRoundsOnce) {
  int threads = num_threads();
  set_num_threads(2);
  for (DType dtype : {bfloat16, float16}) {
    Tensor x = testing::random_tensor({16, 16, 16, 16}, 5, float32).astype(dtype);
    Tensor kernel = testing::random_tensor({3, 3, 16, 32}, 6, float32).astype(dtype);
    Tensor weights = testing::random_tensor({16, 8, 8, 32}, 7, float32).astype(dtype);
    auto run = [&](DType compute) {
      Tensor input = x.astype(compute).detach().clone().set_requires_grad(true);
      Tensor filters = kernel.astype(compute).detach().clone().set_requires_grad(true);
      Tensor out = ops::conv(input, filters, {2}, "same");
      ops::sum(out * weights.astype(compute)).backward();
      EXPECT_EQ(input.grad().dtype(), compute);
      return std::vector<Values>{out.to_vector<double>(), input.grad().to_vector<double>(),
                                 filters.grad().to_vector<double>()};
    };
    std::vector<Values> expected = run(float64), actual = run(dtype);
    double unit = dtype == bfloat16 ? 1.0 / 256 : 1.0 / 2048;
    auto largest = [](const Values& values) {
      double most = 1.0;
      for (double value : values) most = std::max(most, std::abs(value));
      return most;
    };
    std::string name(dtype_name(dtype));
    testing::expect_close(actual[0], expected[0], 2 * unit, name + " output");
    testing::expect_close(actual[1], expected[1], 4 * unit * largest(expected[1]), name + " input gradient");
    testing::expect_close(actual[2], expected[2], 4 * unit * largest(expected[2]), name + " kernel gradient");
  }
  set_num_threads(threads);
}

TEST(Convolution, BadInputsAreClearErrors) {
  using testing::expect_throw_with;
  Tensor x = Tensor::zeros({2, 5, 5, 4});
  expect_throw_with<ValueError>([&] { ops::conv(x, Tensor::zeros({6, 6, 4, 2})); },
                                "the window's height of 6 (size 6, dilation 1) is larger than the input's height of 5");
  expect_throw_with<ValueError>([&] { ops::conv(x, Tensor::zeros({3, 3, 4, 2}), {1}, "valid", "channels_last", {3}); },
                                "the window's height of 7 (size 3, dilation 3)");
  expect_throw_with<ValueError>([&] { ops::conv(x, Tensor::zeros({3, 3, 3, 2})); },
                                "the input has 4 channels on its last axis");
  expect_throw_with<ValueError>([&] { ops::conv(x, Tensor::zeros({3, 3, 2, 3})); },
                                "3 filters (kernel shape (3, 3, 2, 3)) cannot be split into 2 groups");
  // A channels_first batch (batch, channels, height, width) meets a kernel for 4 channels.
  expect_throw_with<ValueError>([&] { ops::conv(Tensor::zeros({2, 4, 5, 5}), Tensor::zeros({3, 3, 4, 2})); },
                                "a channels_first input must be transposed first");
  expect_throw_with<NotImplementedError>([&] { ops::conv(x, Tensor::zeros({3, 3, 4, 2}), {1}, "valid", "channels_first"); },
                                         "data_format \"channels_first\" is not supported");
  expect_throw_with<ValueError>([&] { ops::conv(x, Tensor::zeros({3, 3, 4, 2}), {1}, "full"); },
                                "padding must be \"valid\" or \"same\", got \"full\"");
  expect_throw_with<ValueError>([&] { ops::conv(x, Tensor::zeros({3, 3, 4, 2}), {0}); }, "strides must be positive");
  expect_throw_with<ValueError>([&] { ops::conv(x, Tensor::zeros({3, 3, 4, 2}), {1, 1, 1}); }, "strides must have 1 or 2 entries");
  expect_throw_with<ValueError>([&] { ops::conv(Tensor::zeros({5, 5, 4}), Tensor::zeros({3, 3, 4, 2})); },
                                "expects a rank-4 channels_last input (batch, height, width, channels), got shape (5, 5, 4)");
  expect_throw_with<ValueError>([&] { ops::conv(x, Tensor::zeros({3, 4, 2})); }, "expects a rank-4 kernel");
  expect_throw_with<DTypeError>([&] { ops::conv(x, Tensor::zeros({3, 3, 4, 2}, float64)); }, "different dtypes");
  expect_throw_with<ValueError>([&] { ops::max_pool(x, {6}); },
                                "max_pool: the window's height of 6 (size 6, dilation 1) is larger than the input's height of 5");
  expect_throw_with<NotImplementedError>([&] { ops::average_pool(x, {2}, {}, "valid", "channels_first"); },
                                         "average_pool: data_format \"channels_first\"");
  expect_throw_with<DTypeError>([&] { ops::max_pool(Tensor::zeros({1, 2, 2, 1}, int64), {2}); }, "expects a floating tensor");
}

TEST(OpTableCoverage, EveryOpInOpsHeaderHasARow) {
  const std::map<std::string, std::string> checked_elsewhere = {
      {"random", "engine_test's Random tests (a fixed function of the seed, with its moments)"},
      {"random_slice", "engine_test's Random.AnySliceEqualsTheSameSliceOfTheFullTensor"},
      {"check_indices", "take's and Embedding's out-of-range tests (it returns nothing)"},
  };
  std::ifstream header(KERAS_OPS_HEADER);
  ASSERT_TRUE(header) << "cannot read " << KERAS_OPS_HEADER;
  std::string text((std::istreambuf_iterator<char>(header)), std::istreambuf_iterator<char>());
  std::string in_namespace = text.substr(0, text.find("}  // namespace keras::ops"));
  std::regex declaration(R"(\n(?:Tensor|void) ([a-z_0-9]+)\()");
  std::vector<std::string> ops_declared;
  for (auto match = std::sregex_iterator(in_namespace.begin(), in_namespace.end(), declaration);
       match != std::sregex_iterator(); ++match) {
    ops_declared.push_back((*match)[1]);
  }
  ASSERT_GT(ops_declared.size(), 40u) << "the declarations of engine/ops.h were not found";
  std::vector<OpCase> cases = all_cases();
  for (const std::string& op : ops_declared) {
    if (checked_elsewhere.count(op)) continue;
    bool has_row = std::any_of(cases.begin(), cases.end(), [&](const OpCase& c) {
      return c.name == op || c.name.rfind(op + "_", 0) == 0;
    });
    EXPECT_TRUE(has_row) << "ops::" << op << " (engine/ops.h) has no row in the op table "
                         << "(all_cases() in tests/ops_test.cpp)";
  }
}

}  // namespace
}  // namespace keras
