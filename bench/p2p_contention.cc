// A plain MPI one-way transfer (no planner code) under the conditions a
// pipeline receive meets inside the runtime, to measure how much of the
// send/recv gap in docs/performance.md the memory system explains:
//   idle           both ranks idle, the receive buffer warm
//   receiver-cold  the receiver streams 32 MiB through its caches before the
//                  receive (as a stage's compute does between receives)
//   sender-busy    the sender streams memory right after posting the send (as
//                  its next layer's compute does) while the receiver copies
//   both           the two together: the runtime's case
// Rank 0 sends, rank 1 receives; the receive is timed from its post, after a
// barrier that both ranks leave with the send already posted or about to be.
// With Open MPI's default eager limit (4 KiB) its shared-memory transport
// moves messages above 32 KiB with one process_vm_readv (CMA) call made by
// the receiver, so the timed receive is mostly that kernel copy; with
// planner's eager limit (256 KiB, runtime/comm/mpi_comm.cc) the sender copies
// the message into the shared segment and the receiver copies it out. The
// bench script runs both. Run: mpirun -np 2 build/bench/p2p_contention [iters]
#include <mpi.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

namespace {

std::vector<float>& Sweep() {
  static std::vector<float> big(8u << 20);  // 32 MiB: the L3 of this machine
  return big;
}

// Reads and writes every cache line of 32 MiB (about what a layer's compute
// touches on this machine), or stops early after `max_us` when positive.
void Stream(double max_us) {
  std::vector<float>& big = Sweep();
  const double t0 = MPI_Wtime();
  for (size_t i = 0; i < big.size(); i += 16) {
    big[i] += 1.0f;
    if (max_us > 0 && (i & 4095) == 0 && (MPI_Wtime() - t0) * 1e6 > max_us) break;
  }
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, n = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  if (n != 2) {
    if (rank == 0) std::fprintf(stderr, "p2p_contention: error: needs exactly 2 ranks (mpirun -np 2), got %d\n", n);
    MPI_Finalize();
    return 2;
  }
  const int iters = argc > 1 ? std::max(5, std::atoi(argv[1])) : 200;
  const char* names[] = {"idle", "receiver-cold", "sender-busy", "both"};
  if (rank == 1)
    std::printf(
        "# one-way MPI transfer, rank 0 -> rank 1, median of %d: size (B), then receive time (us) per condition: idle, "
        "receiver-cold, sender-busy, both\n",
        iters);
  for (long bytes : {32768L, 131072L, 524288L}) {
    std::vector<char> sbuf(static_cast<size_t>(bytes), 1), rbuf(static_cast<size_t>(bytes), 0);
    double med[4];
    for (int cond = 0; cond < 4; ++cond) {
      const bool receiver_cold = cond == 1 || cond == 3, sender_busy = cond == 2 || cond == 3;
      std::vector<double> ts;
      for (int i = 0; i < iters + 3; ++i) {
        if (rank == 0) std::memset(sbuf.data(), i, sbuf.size());  // the activation was just produced
        if (rank == 1) {
          if (receiver_cold) Stream(0);
          else std::memset(rbuf.data(), 0, rbuf.size());
        }
        MPI_Barrier(MPI_COMM_WORLD);
        if (rank == 0) {
          MPI_Request q;
          MPI_Isend(sbuf.data(), static_cast<int>(bytes), MPI_BYTE, 1, 0, MPI_COMM_WORLD, &q);
          if (sender_busy) Stream(2000);  // about 2 ms of streaming, longer than any copy here
          MPI_Wait(&q, MPI_STATUS_IGNORE);
        } else {
          const double t0 = MPI_Wtime();
          MPI_Recv(rbuf.data(), static_cast<int>(bytes), MPI_BYTE, 0, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
          if (i >= 3) ts.push_back(MPI_Wtime() - t0);
        }
      }
      med[cond] = rank == 1 ? Median(ts) : 0;
    }
    if (rank == 1) {
      std::printf("%ld", bytes);
      for (int c = 0; c < 4; ++c)
        std::printf("  %s %.1f us (%.2f GB/s)", names[c], med[c] * 1e6, static_cast<double>(bytes) / med[c] / 1e9);
      std::printf("\n");
    }
  }
  MPI_Finalize();
  return 0;
}
