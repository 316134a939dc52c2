// einsum of two operands, as numpy.einsum and keras.ops.einsum read the equation, lowered to
// one batched matmul: every letter is a batch letter (in both operands and the output), a
// contracted letter (in both, not in the output), or a free letter of one operand. Letters of
// one operand only and not in the output are summed out first. The operands are reshaped to
// [batch, rows, contracted] and [batch, contracted, columns], each transposed only when its
// letters are in neither that order nor the swapped one (the matmul kernel reads either), and
// the product is reshaped and, where the output asks another order, transposed. The gradient
// is that of those ops: einsum has no rule of its own to get wrong.
#include <algorithm>
#include <array>
#include <string>

#include "engine/ops/op_helpers.h"

namespace keras::ops {
namespace {

// One operand's letters, "..." expanded, and the output's.
struct Equation {
  std::array<std::string, 2> operands;
  std::string output;
};

bool contains(const std::string& letters, char c) { return letters.find(c) != std::string::npos; }

bool is_letter(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }

[[noreturn]] void bad_equation(const std::string& equation, const std::string& why) {
  throw ValueError(str("einsum: equation '", equation, "' ", why));
}

// Splits "ab,bc->ac" and expands "..." in each term into as many fresh letters (from the end
// of the alphabet's capitals) as the operand has dimensions left over.
Equation parse(const std::string& equation, const Tensor& a, const Tensor& b) {
  std::string lhs = equation, rhs;
  bool explicit_output = false;
  if (auto arrow = equation.find("->"); arrow != std::string::npos) {
    lhs = equation.substr(0, arrow);
    rhs = equation.substr(arrow + 2);
    explicit_output = true;
    if (rhs.find("->") != std::string::npos) bad_equation(equation, "has more than one '->'");
  }
  auto strip = [](std::string text) {
    text.erase(std::remove(text.begin(), text.end(), ' '), text.end());
    return text;
  };
  lhs = strip(lhs);
  rhs = strip(rhs);
  auto comma = lhs.find(',');
  if (comma == std::string::npos || lhs.find(',', comma + 1) != std::string::npos) {
    bad_equation(equation, "must name exactly two operands ('ab,bc->ac'), as this einsum takes two");
  }
  std::array<std::string, 2> terms = {lhs.substr(0, comma), lhs.substr(comma + 1)};
  std::array<const Tensor*, 2> tensors = {&a, &b};
  std::string ellipsis_letters;
  for (int i = 0; i < 2; ++i) {
    std::string& term = terms[i];
    std::size_t dots = term.find("...");
    std::string without = term;
    if (dots != std::string::npos) without.erase(dots, 3);
    for (char c : without) {
      if (!is_letter(c)) {
        bad_equation(equation, str("has '", std::string(1, c), "' in operand ", i,
                                   "; expected letters, '...', ',' and '->'"));
      }
    }
    const int rank = tensors[i]->rank();
    const int named = static_cast<int>(without.size());
    if (dots == std::string::npos) {
      if (named != rank) {
        bad_equation(equation, str("names ", named, " dimensions for operand ", i, " ('", term,
                                   "'), but it has shape ", shape_to_string(tensors[i]->shape())));
      }
      continue;
    }
    if (named > rank) {
      bad_equation(equation, str("names ", named, " dimensions besides '...' for operand ", i,
                                 ", but it has shape ", shape_to_string(tensors[i]->shape())));
    }
    // "..." covers the same trailing letters in every term (NumPy aligns it from the right).
    const int covered = rank - named;
    std::string letters;
    for (int k = 0; k < covered; ++k) letters += static_cast<char>('Z' - (covered - 1 - k));
    for (char c : equation) {
      if (contains(letters, c)) {
        bad_equation(equation, str("names '", std::string(1, c), "' beside '...', which stands for the ",
                                   "letters up to 'Z' here; use other letters beside '...'"));
      }
    }
    if (letters.size() > ellipsis_letters.size()) ellipsis_letters = letters;
    term = term.substr(0, dots) + letters + term.substr(dots + 3);
  }
  for (const std::string& term : terms) {
    for (char c : term) {
      if (std::count(term.begin(), term.end(), c) > 1) {
        throw NotImplementedError(str("einsum: equation '", equation, "' repeats '", std::string(1, c),
                                      "' in one operand (a diagonal); take the diagonal first"));
      }
    }
  }
  if (explicit_output) {
    if (auto dots = rhs.find("..."); dots != std::string::npos) {
      rhs = rhs.substr(0, dots) + ellipsis_letters + rhs.substr(dots + 3);
    }
    for (char c : rhs) {
      if (!is_letter(c)) bad_equation(equation, str("has '", std::string(1, c), "' in its output"));
      if (std::count(rhs.begin(), rhs.end(), c) > 1) {
        bad_equation(equation, str("repeats '", std::string(1, c), "' in its output"));
      }
      if (terms[0].find(c) == std::string::npos && terms[1].find(c) == std::string::npos) {
        bad_equation(equation, str("has '", std::string(1, c), "' in its output but in no operand"));
      }
    }
  } else {
    // NumPy's implicit output: "..." first, then the letters that appear once, sorted.
    std::string once;
    for (const std::string& term : terms) {
      for (char c : term) {
        bool in_ellipsis = ellipsis_letters.find(c) != std::string::npos;
        int uses = static_cast<int>(std::count(terms[0].begin(), terms[0].end(), c) +
                                    std::count(terms[1].begin(), terms[1].end(), c));
        if (!in_ellipsis && uses == 1) once += c;
      }
    }
    std::sort(once.begin(), once.end());
    rhs = ellipsis_letters + once;
  }
  return {terms, rhs};
}

// The permutation that takes `from`'s letter order to `to`'s.
std::vector<std::int64_t> permutation(const std::string& from, const std::string& to) {
  std::vector<std::int64_t> order;
  for (char c : to) order.push_back(static_cast<std::int64_t>(from.find(c)));
  return order;
}

Tensor transposed(const Tensor& x, const std::string& from, const std::string& to) {
  return from == to ? x : transpose(x, permutation(from, to));
}

// Whether a letter of one operand is in neither the other operand nor the output: summed out
// before the product.
bool sums_before_the_product(const Equation& equation) {
  for (int i = 0; i < 2; ++i) {
    for (char c : equation.operands[i]) {
      if (!contains(equation.operands[1 - i], c) && !contains(equation.output, c)) return true;
    }
  }
  return false;
}

std::int64_t product_of(const std::string& letters, const std::string& term, const Shape& shape) {
  std::int64_t product = 1;
  for (char c : letters) product *= shape[term.find(c)];
  return product;
}

}  // namespace

Tensor einsum(const std::string& equation, const Tensor& a_in, const Tensor& b_in) {
  if (detail::goes_through_handler({&a_in, &b_in})) {
    return detail::through_handler({"einsum", OpFamily::contraction, {a_in, b_in},
                                    [equation](const std::vector<Tensor>& local) { return einsum(equation, local[0], local[1]); }, {}, false, equation});
  }
  detail::check_defined(a_in, "einsum", "a");
  detail::check_defined(b_in, "einsum", "b");
  detail::check_same_device(a_in, b_in, "einsum");
  detail::check_same_dtype(a_in, b_in, "einsum");
  detail::check_floating(a_in, "einsum");
  Equation parsed = parse(equation, a_in, b_in);
  if (is_half_precision(a_in.dtype()) && sums_before_the_product(parsed)) {
    // A sum over a letter, then a batched matmul: each would round to 16 bits, so the two are
    // computed in float32 and rounded once, as XLA computes a dot. Without such a sum the
    // lowering is exact but for the one product, which the matmul kernel computes in float32
    // and rounds once: it runs on the 16-bit tensors themselves. (Copying every einsum's
    // operands to float32 and back, forward and backward, made attention's score einsum 2.0 ms
    // in bfloat16 against 1.0 in float32; on the 16-bit tensors it takes 0.88.)
    return cast(einsum(equation, cast(a_in, float32), cast(b_in, float32)), a_in.dtype());
  }
  std::array<std::string, 2> terms = parsed.operands;
  const std::string& output = parsed.output;
  std::array<Tensor, 2> operands = {a_in, b_in};

  // Every letter has one size.
  for (char c : terms[0]) {
    if (!contains(terms[1], c)) continue;
    std::int64_t size_a = a_in.shape()[terms[0].find(c)], size_b = b_in.shape()[terms[1].find(c)];
    if (size_a != size_b) {
      throw ShapeError(str("einsum '", equation, "': '", std::string(1, c), "' is ", size_a,
                           " in the first operand (shape ", shape_to_string(a_in.shape()), ") but ",
                           size_b, " in the second (shape ", shape_to_string(b_in.shape()), ")"));
    }
  }
  // Letters of one operand that the output drops are summed out before the product.
  for (int i = 0; i < 2; ++i) {
    const std::string& other = terms[1 - i];
    Axes summed;
    std::string kept;
    for (std::size_t d = 0; d < terms[i].size(); ++d) {
      char c = terms[i][d];
      if (!contains(other, c) && !contains(output, c)) {
        summed.push_back(static_cast<std::int64_t>(d));
      } else {
        kept += c;
      }
    }
    if (!summed.empty()) {
      operands[i] = sum(operands[i], summed);
      terms[i] = kept;
    }
  }

  std::string batch, contracted;
  std::array<std::string, 2> free;
  for (char c : output) {
    bool in_a = contains(terms[0], c), in_b = contains(terms[1], c);
    if (in_a && in_b) batch += c;
    else if (in_a) free[0] += c;
    else free[1] += c;
  }
  for (char c : terms[0]) {
    if (contains(terms[1], c) && !contains(output, c)) contracted += c;
  }
  // The operand whose free letters come first in the output (after the batch letters) gives
  // the product's rows, so that the product needs no transpose when the output follows it.
  int rows_from = 0;
  for (char c : output) {
    if (contains(batch, c)) continue;
    rows_from = contains(free[0], c) ? 0 : 1;
    break;
  }
  const int columns_from = 1 - rows_from;
  const Tensor& left = operands[rows_from];
  const Tensor& right = operands[columns_from];
  const std::string& left_term = terms[rows_from];
  const std::string& right_term = terms[columns_from];
  const std::string& rows = free[rows_from];
  const std::string& columns = free[columns_from];

  const std::int64_t batch_size = product_of(batch, left_term, left.shape());
  const std::int64_t row_count = product_of(rows, left_term, left.shape());
  const std::int64_t column_count = product_of(columns, right_term, right.shape());
  const std::int64_t inner = product_of(contracted, left_term, left.shape());
  auto as_matrices = [&](const Tensor& x, std::int64_t first, std::int64_t second) {
    return batch.empty() ? reshape(x, {first, second}) : reshape(x, {batch_size, first, second});
  };
  // Left as [batch, rows, contracted], or [batch, contracted, rows] read transposed.
  bool transpose_left = false, transpose_right = false;
  Tensor left_matrices, right_matrices;
  if (left_term == batch + contracted + rows && left_term != batch + rows + contracted) {
    transpose_left = true;
    left_matrices = as_matrices(left, inner, row_count);
  } else {
    left_matrices = as_matrices(transposed(left, left_term, batch + rows + contracted), row_count, inner);
  }
  if (right_term == batch + columns + contracted && right_term != batch + contracted + columns) {
    transpose_right = true;
    right_matrices = as_matrices(right, column_count, inner);
  } else {
    right_matrices = as_matrices(transposed(right, right_term, batch + contracted + columns), inner,
                                 column_count);
  }
  Tensor product = detail::matmul_transposed(left_matrices, right_matrices, transpose_left, transpose_right);

  const std::string product_letters = batch + rows + columns;
  Shape product_shape;
  for (char c : product_letters) {
    product_shape.push_back(contains(left_term, c) ? left.shape()[left_term.find(c)]
                                                   : right.shape()[right_term.find(c)]);
  }
  return transposed(reshape(product, product_shape), product_letters, output);
}

}  // namespace keras::ops
