// allreduce_sum_in_rank_order under mpirun -np 4: every process gets the sum of the four
// vectors added in rank order, bit for bit, on the world and on a split communicator. The
// vectors mix magnitudes so that the order of the additions shows in the result: the test
// checks that summing in the reverse order gives other bits, so a reduction in any other
// order could not pass.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <ppsched/backend/mpi/allreduce.hpp>
#include <ppsched/backend/mpi/session.hpp>
#include <vector>

namespace {

std::vector<float> vector_of(int rank, std::size_t n) {
  std::vector<float> v(n);
  std::uint32_t state = 0x9e3779b9u + static_cast<std::uint32_t>(rank) * 7919u;
  const float scale = std::pow(10.0f, static_cast<float>((rank % 3) * 3));  // 1, 1e3, 1e6
  for (float& x : v) {
    state ^= state << 13;
    state ^= state >> 17;
    state ^= state << 5;
    x = scale * (static_cast<float>(state >> 8) / static_cast<float>(1u << 23) - 1.0f);
  }
  return v;
}

// Checks one all-reduce over `comm`, whose ranks hold the vectors of `members` (world ranks).
int check(MPI_Comm comm, const std::vector<int>& members, int me, const char* what) {
  const std::size_t n = 4096;
  std::vector<float> values = vector_of(members[static_cast<std::size_t>(me)], n);
  std::vector<float> scratch;
  ppsched::mpi::allreduce_sum_in_rank_order(values, comm, scratch,
                                       ppsched::HostWait::within(std::chrono::seconds(60)));
  std::vector<std::vector<float>> inputs;
  for (int m : members) inputs.push_back(vector_of(m, n));
  std::vector<float> forward(n, 0.0f);
  std::vector<float> backward(n, 0.0f);
  for (std::size_t i = 0; i < n; ++i) {
    float f = inputs.front()[i];
    for (std::size_t r = 1; r < inputs.size(); ++r) f += inputs[r][i];
    float b = inputs.back()[i];
    for (std::size_t r = inputs.size() - 1; r-- > 0;) b += inputs[r][i];
    forward[i] = f;
    backward[i] = b;
  }
  int failures = 0;
  if (values != forward) {
    std::printf("FAIL %s rank %d: the result is not the rank-order sum\n", what, me);
    ++failures;
  }
  if (members.size() > 2 && forward == backward) {
    std::printf("FAIL %s rank %d: the data does not tell the orders apart\n", what, me);
    ++failures;
  }
  return failures;
}

}  // namespace

int main(int argc, char** argv) {
  ppsched::mpi::MpiSession session(&argc, &argv);
  int rank = 0;
  int size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  std::vector<int> all;
  for (int r = 0; r < size; ++r) all.push_back(r);
  int failures = check(MPI_COMM_WORLD, all, rank, "world");
  MPI_Comm half = MPI_COMM_NULL;
  MPI_Comm_split(MPI_COMM_WORLD, rank % 2, rank, &half);  // {0, 2} and {1, 3}
  std::vector<int> mine;
  for (int r = rank % 2; r < size; r += 2) mine.push_back(r);
  failures += check(half, mine, rank / 2, "half");
  MPI_Comm_free(&half);
  int total = 0;
  MPI_Allreduce(&failures, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  if (rank == 0) std::printf("%s: %d failed checks\n", total == 0 ? "PASS" : "FAIL", total);
  return total == 0 ? 0 : 1;
}
