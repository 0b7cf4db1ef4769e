// A plain MPI loop (no planner code): MPI_Allreduce and MPI_Sendrecv over
// the same sizes as `planner profile --comm`, for the comparison in
// docs/performance.md. Run: mpirun -np 2 build/bench/mpi_loop [max_bytes]
#include <mpi.h>

#include <cstdio>
#include <cstdlib>
#include <vector>

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, n = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  long max_bytes = argc > 1 ? std::atol(argv[1]) : (16L << 20);
  if (rank == 0) std::printf("# plain MPI on %d ranks: size (B), all-reduce busbw (GB/s), send/recv busbw (GB/s)\n", n);
  for (long bytes = 8; bytes <= max_bytes; bytes *= 2) {
    long count = bytes / 4;
    std::vector<float> a(static_cast<size_t>(count), 1.0f), b(static_cast<size_t>(count));
    int iters = static_cast<int>(std::max(3L, std::min(20L, (64L << 20) / bytes)));
    double best[2];
    for (int which = 0; which < 2; ++which) {
      for (int w = 0; w < 3; ++w) {
        if (which == 0)
          MPI_Allreduce(MPI_IN_PLACE, a.data(), static_cast<int>(count), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
        else
          MPI_Sendrecv(a.data(), static_cast<int>(count), MPI_FLOAT, (rank + 1) % n, 0, b.data(),
                       static_cast<int>(count), MPI_FLOAT, (rank + n - 1) % n, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      }
      MPI_Barrier(MPI_COMM_WORLD);
      double t0 = MPI_Wtime();
      for (int i = 0; i < iters; ++i) {
        if (which == 0)
          MPI_Allreduce(MPI_IN_PLACE, a.data(), static_cast<int>(count), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
        else
          MPI_Sendrecv(a.data(), static_cast<int>(count), MPI_FLOAT, (rank + 1) % n, 0, b.data(),
                       static_cast<int>(count), MPI_FLOAT, (rank + n - 1) % n, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      }
      double t = (MPI_Wtime() - t0) / iters;
      MPI_Allreduce(MPI_IN_PLACE, &t, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
      double factor = which == 0 ? 2.0 * (n - 1) / n : 1.0;
      best[which] = static_cast<double>(bytes) / t / 1e9 * factor;
    }
    if (rank == 0) std::printf("%12ld %10.3f %10.3f\n", bytes, best[0], best[1]);
  }
  MPI_Finalize();
  return 0;
}
