// Run under mpirun by mpi_dtype_test.cc: bf16 all-reduce, reduce-scatter (out of place and in place)
// and all-gather through MpiCommunicator, each checked against the fp32 collective of the same values
// rounded to bf16. Prints every mismatch; exits 0 when all agree, 1 otherwise. On two ranks the values
// are arbitrary bf16 numbers (one rounding, so bit equality must hold); on more, a sum rounds once per
// partial sum, so the values are sixteenths whose sums bf16 holds exactly.
#include <mpi.h>

#include <cstdint>
#include <cstdio>
#include <random>
#include <vector>

#include "exec/mpi/mpi_communicator.h"
#include "kernels/numerics.h"

namespace {

using loom::exec::DType;
using loom::exec::MpiCommunicator;
using loom::exec::TensorRef;
using loom::kernels::bf16_bits_from_float;
using loom::kernels::float_from_bf16_bits;

using Bits = std::vector<std::uint16_t>;

// Values that are exact in bf16, drawn per rank, as bits and as floats.
void draw(int rank, int ranks, std::size_t n, Bits& bits, std::vector<float>& floats) {
  std::mt19937 gen(1234u + static_cast<unsigned>(rank));
  std::normal_distribution<float> dist(0.0f, 3.0f);
  std::uniform_int_distribution<int> sixteenths(-255 / ranks, 255 / ranks);
  bits.resize(n);
  floats.resize(n);
  for (std::size_t i = 0; i < n; ++i) {
    bits[i] = bf16_bits_from_float(ranks == 2 ? dist(gen) : static_cast<float>(sixteenths(gen)) / 16.0f);
    floats[i] = float_from_bf16_bits(bits[i]);
  }
}

int compare(const char* what, const Bits& got, const std::vector<float>& fp32, int rank) {
  int bad = 0;
  for (std::size_t i = 0; i < got.size(); ++i)
    if (got[i] != bf16_bits_from_float(fp32[i]) && bad++ < 5)
      std::fprintf(stderr, "rank %d %s[%zu]: bf16 %g, fp32 rounded %g\n", rank, what, i,
                   static_cast<double>(float_from_bf16_bits(got[i])), static_cast<double>(fp32[i]));
  return bad;
}

TensorRef bf16(Bits& b, std::size_t offset = 0) { return {b.data() + offset, DType::kBF16}; }

int check(MpiCommunicator& world) {
  const int r = world.rank(), p = world.size();
  const std::size_t block = 37, n = block * static_cast<std::size_t>(p);
  Bits bits;
  std::vector<float> floats;
  draw(r, p, n, bits, floats);
  int bad = 0;

  Bits reduced = bits;
  std::vector<float> reduced32 = floats;
  world.all_reduce(bf16(reduced), static_cast<std::int64_t>(n), loom::exec::ReduceOp::kSum);
  world.all_reduce(reduced32.data(), static_cast<std::int64_t>(n), loom::exec::ReduceOp::kSum);
  bad += compare("all_reduce", reduced, reduced32, r);

  const std::vector<float> mine32(reduced32.begin() + r * block, reduced32.begin() + (r + 1) * block);
  Bits scattered(block);
  world.reduce_scatter(bf16(bits), bf16(scattered), static_cast<std::int64_t>(block));
  bad += compare("reduce_scatter", scattered, mine32, r);
  Bits in_place = bits;
  world.reduce_scatter(bf16(in_place), bf16(in_place, r * block), static_cast<std::int64_t>(block));
  bad += compare("reduce_scatter in place", Bits(in_place.begin() + r * block, in_place.begin() + (r + 1) * block),
                 mine32, r);

  Bits gathered(n);
  std::vector<float> gathered32(n);
  world.all_gather(bf16(bits, r * block), bf16(gathered), static_cast<std::int64_t>(block));
  world.all_gather(floats.data() + r * block, gathered32.data(), static_cast<std::int64_t>(block));
  bad += compare("all_gather", gathered, gathered32, r);
  return bad;
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int bad = 0;
  {
    MpiCommunicator world(MPI_COMM_WORLD, "world");
    bad = check(world);
    int all_bad = 0;
    MPI_Allreduce(&bad, &all_bad, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (world.rank() == 0) std::printf("bf16 collectives on %d ranks: %d mismatches\n", world.size(), all_bad);
    bad = all_bad;
  }
  MPI_Finalize();
  return bad == 0 ? 0 : 1;
}
