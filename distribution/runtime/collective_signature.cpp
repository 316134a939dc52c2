// Collective signatures in words (see the header).
#include "distribution/runtime/collective_signature.h"

#include "distribution/runtime/communicator.h"

namespace keras::distribution {

std::int64_t collective_code(CollectiveKind kind, std::int64_t detail) {
  return (static_cast<std::int64_t>(kind) << 32) | detail;
}

std::string describe_collective(std::int64_t code, std::int64_t dtype_code, std::int64_t count) {
  auto kind = static_cast<CollectiveKind>(code >> 32);
  std::int64_t detail = code & 0xFFFFFFFF;
  std::string elements =
      str(count, " ", dtype_code >= 0 && dtype_code <= static_cast<std::int64_t>(DType::float64)
                          ? dtype_name(static_cast<DType>(dtype_code))
                          : "unknown-dtype",
          " elements");
  auto reduction = [&] {
    return detail >= 0 && detail <= static_cast<std::int64_t>(ReduceOperation::min)
               ? reduce_operation_name(static_cast<ReduceOperation>(detail))
               : "unknown";
  };
  switch (kind) {
    case CollectiveKind::none: return "nothing yet (it has not reached this collective)";
    case CollectiveKind::all_reduce: return str("all_reduce (", reduction(), ") of ", elements);
    case CollectiveKind::all_gather: return str("all_gather of ", elements, " per rank");
    case CollectiveKind::reduce_scatter:
      return str("reduce_scatter (", reduction(), ") of ", elements, " per rank");
    case CollectiveKind::broadcast: return str("broadcast from rank ", detail, " of ", elements);
    case CollectiveKind::barrier: return "barrier";
    case CollectiveKind::split: return "split (creating a sub-group)";
    case CollectiveKind::leaving: return "finalize (its program returned or called finalize())";
  }
  return str("an unknown operation (code ", code, ")");
}

std::string describe_signatures(const std::vector<std::int64_t>& all, int size) {
  std::string text;
  int groups = 0;
  auto same = [&](int a, int b) {
    for (int k = 0; k < 3; ++k) {
      if (all[static_cast<std::size_t>(a) * 3 + k] != all[static_cast<std::size_t>(b) * 3 + k]) return false;
    }
    return true;
  };
  for (int first = 0; first < size;) {
    int last = first;
    while (last + 1 < size && same(first, last + 1)) ++last;
    if (++groups > 8) {
      text += str("; and ranks ", first, "-", size - 1, " issued other collectives");
      break;
    }
    std::size_t at = static_cast<std::size_t>(first) * 3;
    text += str(text.empty() ? "" : "; ", first == last ? str("rank ", first) : str("ranks ", first, "-", last),
                " issued ", describe_collective(all[at], all[at + 1], all[at + 2]));
    first = last + 1;
  }
  return text;
}

}  // namespace keras::distribution
