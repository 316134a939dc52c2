// What the processes compare before each collective, in one vocabulary for every backend: a
// signature is (operation code, dtype, element count); the code holds the kind in its high 32
// bits and its detail (the reduction, or the broadcast root) in the low 32, so no two
// collectives share a code. When the ranks disagree, describe_signatures says in words what
// each issued ("ranks 0-2 issued all_reduce (sum) of 4 float32 elements; rank 3 issued ...").
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace keras::distribution {

// `none` stands for a rank whose signature has not arrived.
enum class CollectiveKind : std::int64_t {
  none = 0, all_reduce = 1, all_gather, reduce_scatter, broadcast, barrier, split, leaving
};
std::int64_t collective_code(CollectiveKind kind, std::int64_t detail = 0);

// One rank's collective: "all_reduce (sum) of 4 float32 elements".
std::string describe_collective(std::int64_t code, std::int64_t dtype_code, std::int64_t count);
// Every rank's, from 3 entries per rank; consecutive equal ranks together, at most 8 groups.
std::string describe_signatures(const std::vector<std::int64_t>& every, int size);

}  // namespace keras::distribution
