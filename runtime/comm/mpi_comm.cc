// MPI backend: the library's blocking collectives (its tuned algorithms; the
// non-blocking ones run about 2x slower, docs/performance.md), each armed on
// a watchdog thread: past the timeout the watchdog prints one error naming
// the operation and rank and calls MPI_Abort, which ends every rank with a
// non-zero exit instead of a hang. While `planner run` executes, the same
// thread also watches the processes of the other ranks on this node and
// aborts with one message naming a rank whose process is gone.
#include <mpi.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <fstream>
#include <limits>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include <signal.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <fmt/format.h>

#include "common/file_writer.h"
#include "common/progress.h"
#include "runtime/comm/communicator.h"

namespace planner {

namespace {

MPI_Op Op(ReduceOp op) { return op == ReduceOp::kSum ? MPI_SUM : MPI_MAX; }
bool g_thread_multiple = false;
std::string g_transport = "mpi";  // set once MPI is initialised: DescribeTransport()

// Open MPI's shared-memory transport (btl "vader", "sm" in Open MPI 5) copies
// messages up to its eager limit (4 KiB by default) through a shared segment
// and moves larger ones by rendezvous: the receiver, once matched, reads the
// sender's buffer with one kernel copy (CMA, process_vm_readv). Inside a
// pipeline that kernel copy runs while the peer core computes and was 3x
// slower than idle (128 KiB: 44-58 us against 11-15 us; docs/performance.md).
// With an eager limit of 256 KiB the sender copies such a message into its
// shared segment at Send and the receiver copies it out at Recv: 15-17 us for
// the same messages in the same runs. Each eager message holds a 256 KiB
// fragment of the sender's segment until the sender's next progress call
// (Send polls for that), and the fragment list grows 64 fragments at a time,
// so the segment is 64 MiB (Open MPI's 4 MiB could not grow it: GPipe's 32
// forward sends then queued until the sender's backward, 113 ms iterations
// instead of 73). tmpfs pages are used only as touched, but Open MPI refuses
// a segment the backing directory cannot hold, so the settings apply only
// when /dev/shm has room for every rank of the node twice over. Set before
// MPI_Init, so the profiler and the runtime measure and use the same
// transport; a value the user exported (OMPI_MCA_..., mpirun --mca) wins.
constexpr int64_t kEagerLimitBytes = int64_t{256} << 10;
constexpr int64_t kSegmentBytes = int64_t{64} << 20;
int64_t g_eager_set = 0;  // MpiEagerLimitSet()
void SetSharedMemoryDefaults() {
  if (std::getenv("OMPI_MCA_btl_vader_eager_limit") != nullptr) return;  // the user's choice
  const char* local = std::getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
  const int64_t ranks = local != nullptr ? std::max(1L, std::atol(local)) : 1;
  struct statvfs fs;
  if (statvfs("/dev/shm", &fs) != 0) return;
  if (static_cast<int64_t>(fs.f_bavail) * static_cast<int64_t>(fs.f_frsize) < 2 * ranks * kSegmentBytes) return;
  setenv("OMPI_MCA_btl_vader_eager_limit", std::to_string(kEagerLimitBytes).c_str(), 0);
  setenv("OMPI_MCA_btl_vader_max_send_size", std::to_string(kEagerLimitBytes).c_str(), 0);
  setenv("OMPI_MCA_btl_vader_segment_size", std::to_string(kSegmentBytes).c_str(), 0);
  g_eager_set = kEagerLimitBytes;
}

// Open MPI's all-reduce of 1 MiB and more as a segmented ring with 128 KiB
// segments (coll tuned algorithm 5), through a dynamic rules file; smaller
// all-reduces keep the library's own decision. The segments move as eager
// copies (above) instead of the kernel copy of half the peer's buffer: the
// runtime's 3.73 MB gradient all-reduce on 2 ranks took 0.46-0.52 ms against
// 0.66-0.80 ms, and the cold comm curve at 4 MiB 0.43-0.47 ms against
// 0.69-0.72 ms (docs/performance.md). Skipped where the user enabled dynamic
// rules. Returns the file to remove once MPI_Init has read it, or "".
constexpr int64_t kRingFromBytes = int64_t{1} << 20;
constexpr int64_t kRingSegmentBytes = int64_t{128} << 10;
bool g_ring_set = false;
std::string SetAllReduceRule() {
  if (std::getenv("OMPI_MCA_coll_tuned_use_dynamic_rules") != nullptr) return "";
  const char* dir = std::getenv("TMPDIR");
  std::string path = std::string(dir != nullptr && *dir != '\0' ? dir : "/tmp") + "/planner-coll-rules-XXXXXX";
  std::vector<char> name(path.begin(), path.end());
  name.push_back('\0');
  const int fd = mkstemp(name.data());
  if (fd < 0) return "";
  // Format (Open MPI 4.1): collectives; collective id (2: all-reduce); comm sizes; comm size (2 and up);
  // message sizes; then per message size: bytes, algorithm (0: the library's decision), topology, segment.
  const std::string rules = fmt::format("1\n2\n1\n2\n2\n0 0 0 0\n{} 5 0 {}\n", kRingFromBytes, kRingSegmentBytes);
  const bool written = write(fd, rules.data(), rules.size()) == static_cast<ssize_t>(rules.size());
  close(fd);
  if (!written) {
    unlink(name.data());
    return "";
  }
  setenv("OMPI_MCA_coll_tuned_use_dynamic_rules", "1", 0);
  setenv("OMPI_MCA_coll_tuned_dynamic_rules_filename", name.data(), 0);
  g_ring_set = true;
  return name.data();
}

// A control variable of the library through MPI_T (-1 when it has none of that
// name); the caller holds an MPI_T session (MPI_T_init_thread).
int64_t ReadControlVariable(const char* name) {
  int64_t value = -1;
  int index = 0;
  if (MPI_T_cvar_get_index(name, &index) != MPI_SUCCESS) return value;
  MPI_T_cvar_handle h;
  int count = 0;
  if (MPI_T_cvar_handle_alloc(index, nullptr, &h, &count) != MPI_SUCCESS) return value;
  unsigned char buf[64] = {};  // little-endian: a 4- or 8-byte unsigned reads the same
  if (count == 1 && MPI_T_cvar_read(h, buf) == MPI_SUCCESS) {
    uint64_t v = 0;
    std::memcpy(&v, buf, sizeof v);
    value = static_cast<int64_t>(v);
  }
  MPI_T_cvar_handle_free(&h);
  return value;
}

// "Open MPI v4.1.4, shared-memory eager limit 262144 B, all-reduce from
// 1048576 B as a segmented ring (131072 B segments)": the library (first
// clause of its version string) and the settings above as the library reports
// them through MPI_T; written into comm profiles and run reports.
std::string DescribeTransport() {
  char version[MPI_MAX_LIBRARY_VERSION_STRING] = {};
  int len = 0;
  MPI_Get_library_version(version, &len);
  std::string lib(version, static_cast<size_t>(std::max(0, len)));
  lib = lib.substr(0, lib.find_first_of(",\n"));
  int provided = 0;
  if (MPI_T_init_thread(MPI_THREAD_SINGLE, &provided) != MPI_SUCCESS) return lib;
  const int64_t eager = ReadControlVariable("btl_vader_eager_limit");
  if (eager >= 0) lib += fmt::format(", shared-memory eager limit {} B", eager);
  if (g_ring_set && ReadControlVariable("coll_tuned_use_dynamic_rules") == 1) {
    lib += fmt::format(", all-reduce from {} B as a segmented ring ({} B segments)", kRingFromBytes, kRingSegmentBytes);
  }
  MPI_T_finalize();
  return lib;
}

// One per process: a thread that wakes every 20 ms and aborts the job when an
// in-flight call has passed its own deadline. Each blocking call holds one
// slot of a fixed registry for its lifetime (a Guard): it claims a free slot
// with one compare-and-swap, writes its operation, rank and timeout, then its
// deadline, and clears only that slot when it returns. So the gradient
// thread's finished all-reduce (--overlap-dp) never disarms the pipeline
// thread's receive, and each call is judged by its own timeout. Arming takes
// no lock and wakes nothing, so small collectives pay nothing measurable.
class Watchdog {
 public:
  // More blocking calls at once than the runtime ever makes (two threads).
  static constexpr int kSlots = 64;
  struct Slot {
    std::atomic<bool> busy{false};
    std::atomic<int64_t> deadline_ns{0};  // 0: armed by nobody (yet)
    std::atomic<const char*> what{""};
    std::atomic<int> rank{0}, size{0};
    std::atomic<double> timeout_s{0};
    std::atomic<bool> mpi_usable{true};  // false in MPI_Init_thread / MPI_Finalize: MPI_Abort undefined there
  };
  static Watchdog& Get() {
    static Watchdog* w = new Watchdog();  // never destroyed: the thread outlives static destruction
    return *w;
  }
  // The slot now watching this call, or nullptr when all kSlots are in use
  // (the call then runs unwatched; said once on stderr).
  Slot* Arm(const char* what, int rank, int size, double seconds, bool mpi_usable = true) {
    for (Slot& s : slots_) {
      bool expected = false;
      if (s.busy.load(std::memory_order_relaxed) ||
          !s.busy.compare_exchange_strong(expected, true, std::memory_order_acquire))
        continue;
      s.what.store(what, std::memory_order_release);
      s.rank.store(rank, std::memory_order_release);
      s.size.store(size, std::memory_order_release);
      s.timeout_s.store(seconds, std::memory_order_release);
      s.mpi_usable.store(mpi_usable, std::memory_order_release);
      s.deadline_ns.store(NowNs() + static_cast<int64_t>(seconds * 1e9), std::memory_order_release);
      return &s;
    }
    if (!full_said_.exchange(true)) {
      std::fprintf(stderr,
                   "planner: warning: more than %d MPI calls at once; the watchdog does not time the extra ones\n",
                   kSlots);
    }
    return nullptr;
  }
  static void Disarm(Slot* s) {
    if (s == nullptr) return;
    s->deadline_ns.store(0, std::memory_order_release);
    s->busy.store(false, std::memory_order_release);
  }
  // Node-local peers (world rank, pid) to watch until Unwatch().
  void Watch(std::vector<std::pair<int, long>> peers, int rank, int size) {
    {
      std::lock_guard<std::mutex> lk(mu_);
      peers_ = std::move(peers);
    }
    me_.store(rank);
    world_size_.store(size);
    watching_.store(true);
  }
  void Unwatch() { watching_.store(false); }

 private:
  Watchdog() {
    std::thread([this] { Loop(); }).detach();
  }
  static int64_t NowNs() {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
        .count();
  }
  // A process that exists and is not a zombie waiting for its parent to reap it.
  static bool Alive(long pid) {
    if (kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH) return false;
    std::ifstream f("/proc/" + std::to_string(pid) + "/stat");
    std::string stat((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    const size_t close = stat.rfind(')');
    if (close == std::string::npos || close + 2 >= stat.size()) return true;  // no /proc: trust kill()
    return stat[close + 2] != 'Z' && stat[close + 2] != 'X';
  }
  // A peer seen gone is named 300 ms later: a rank that failed cleanly has printed its own line
  // and exited, and mpirun, ending the job with its exit code, usually ends this rank first
  // (silently: CheckDeferredSignal); a peer killed by a signal is named well within the 1 s
  // mpirun gives the others before SIGKILL.
  static constexpr int64_t kPeerGraceNs = 300'000'000;
  void CheckPeers() {
    // kSilent: this rank printed its own error and is leaving (or stopping with the others):
    // a peer that left meanwhile is no news.
    if (!watching_.load() || CurrentStopMode() == StopMode::kSilent) return;
    std::lock_guard<std::mutex> lk(mu_);
    for (const auto& [peer, pid] : peers_) {
      if (Alive(pid) || !watching_.load()) continue;
      if (peer_gone_ns_.load() == 0) peer_gone_ns_.store(NowNs());
      if (NowNs() - peer_gone_ns_.load() < kPeerGraceNs) return;
      SetStopMode(StopMode::kSilent);  // mpirun's SIGTERM, coming next, adds no line
      std::fprintf(stderr,
                   "planner: error: rank %d (pid %ld, on this node) exited while rank %d of %d was running; aborting "
                   "all ranks\n",
                   peer, pid, me_.load(), world_size_.load());
      std::fflush(stderr);
      RemoveOpenTemporaries();
      MPI_Abort(MPI_COMM_WORLD, 1);
      std::_Exit(1);
    }
  }
  // Aborts when one in-flight call has passed its deadline. The fields are
  // read between two loads of the deadline: a slot that was released (and
  // perhaps claimed by another call) meanwhile is skipped, so the message
  // names the call that timed out and a call that just finished is not blamed.
  void CheckDeadlines() {
    const int64_t now = NowNs();
    for (const Slot& s : slots_) {
      const int64_t d = s.deadline_ns.load(std::memory_order_acquire);
      if (d == 0 || now <= d) continue;
      const char* what = s.what.load(std::memory_order_relaxed);
      const int rank = s.rank.load(std::memory_order_relaxed);
      const int size = s.size.load(std::memory_order_relaxed);
      const double timeout = s.timeout_s.load(std::memory_order_relaxed);
      const bool mpi_usable = s.mpi_usable.load(std::memory_order_relaxed);
      std::atomic_thread_fence(std::memory_order_acquire);
      if (s.deadline_ns.load(std::memory_order_relaxed) != d) continue;
      SetStopMode(StopMode::kSilent);
      std::fprintf(
          stderr, "planner: error: MPI %s on rank %d of %d timed out after %.0f s: a peer rank died or is stuck; %s\n",
          what, rank, size, timeout, mpi_usable ? "aborting all ranks" : "ending this rank (mpirun ends the others)");
      std::fflush(stderr);
      RemoveOpenTemporaries();
      // Outside MPI_Init .. MPI_Finalize MPI_Abort is undefined: this process exits, and mpirun,
      // seeing a rank end without MPI_Finalize, ends the job's other processes.
      if (mpi_usable) MPI_Abort(MPI_COMM_WORLD, 1);
      std::_Exit(1);
    }
  }
  // SIGINT / SIGTERM outside the training loop (StopMode::kDeferred, common/progress.h): ends
  // this rank, after CheckPeers, so that a rank mpirun ends because another one failed names
  // that one (the peer watch's line) instead of the signal.
  void CheckDeferredSignal() {
    const int sig = InterruptSignal();
    if (sig == 0 || CurrentStopMode() != StopMode::kDeferred) return;
    SetStopMode(StopMode::kSilent);
    if (peer_gone_ns_.load() != 0) {  // mpirun ending the job for a peer that left: that one said why
      RemoveOpenTemporaries();
      std::_Exit(128 + sig);
    }
    std::fprintf(stderr,
                 "planner: error: %s (%s) on rank %s of %s outside training; stopping at once, nothing to save\n",
                 sig == SIGTERM ? "terminated" : "interrupted", SignalName(sig), EnvOr("OMPI_COMM_WORLD_RANK", "?"),
                 EnvOr("OMPI_COMM_WORLD_SIZE", "?"));
    std::fflush(stderr);
    RemoveOpenTemporaries();
    std::_Exit(128 + sig);
  }
  static const char* EnvOr(const char* name, const char* fallback) {
    const char* v = std::getenv(name);
    return v != nullptr ? v : fallback;
  }
  void Loop() {
    while (true) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      CheckPeers();
      CheckDeadlines();
      CheckDeferredSignal();
      PrintLateStopLine(kLateStopNs);  // rank 0's training loop sets its text (common/progress.h)
    }
  }
  Slot slots_[kSlots];
  std::atomic<bool> full_said_{false};
  std::atomic<bool> watching_{false};
  std::atomic<int> me_{0}, world_size_{0};  // world rank and size while watching
  std::mutex mu_;
  std::vector<std::pair<int, long>> peers_;
  std::atomic<int64_t> peer_gone_ns_{0};  // when CheckPeers first saw a peer gone (0: never)
};

// Arms the watchdog for the lifetime of one blocking call: its own slot, its own deadline.
class Guard {
 public:
  Guard(const char* what, int rank, int size, double timeout, bool mpi_usable = true)
      : slot_(Watchdog::Get().Arm(what, rank, size, timeout, mpi_usable)) {}
  ~Guard() { Watchdog::Disarm(slot_); }
  Guard(const Guard&) = delete;
  Guard& operator=(const Guard&) = delete;

 private:
  Watchdog::Slot* slot_;
};

Status Check(int rc, const char* what) {
  if (rc == MPI_SUCCESS) return Status::OK();
  char msg[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, msg, &len);
  return Status::CommError(fmt::format("MPI {} failed: {}", what, std::string(msg, static_cast<size_t>(len))));
}

class MpiComm final : public Communicator {
 public:
  MpiComm(MPI_Comm c, bool owned) : comm_(c), owned_(owned) {
    MPI_Comm_rank(c, &rank_);
    MPI_Comm_size(c, &size_);
    void* attr = nullptr;
    int found = 0;
    MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &attr, &found);
    tag_space_ = (found != 0 && attr != nullptr ? *static_cast<int*>(attr) : 32767) - 100 + 1;
  }
  ~MpiComm() override {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (owned_ && !finalized) MPI_Comm_free(&comm_);
  }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string backend() const override { return "mpi"; }
  std::string transport() const override { return g_transport; }

  Status AllReduce(float* data, int64_t count, ReduceOp op) override {
    Guard g("all-reduce", rank_, size_, timeout_s_);
    return Check(MPI_Allreduce(MPI_IN_PLACE, data, Int(count), MPI_FLOAT, Op(op), comm_), "all-reduce");
  }
  Status AllGather(const float* send, float* recv, int64_t count) override {
    Guard g("all-gather", rank_, size_, timeout_s_);
    return Check(MPI_Allgather(send, Int(count), MPI_FLOAT, recv, Int(count), MPI_FLOAT, comm_), "all-gather");
  }
  Status ReduceScatter(const float* send, float* recv, int64_t count, ReduceOp op) override {
    Guard g("reduce-scatter", rank_, size_, timeout_s_);
    return Check(MPI_Reduce_scatter_block(send, recv, Int(count), MPI_FLOAT, Op(op), comm_), "reduce-scatter");
  }
  Status Broadcast(float* data, int64_t count, int root) override {
    Guard g("broadcast", rank_, size_, timeout_s_);
    return Check(MPI_Bcast(data, Int(count), MPI_FLOAT, root, comm_), "broadcast");
  }
  Status AllToAllV(const float* send, const std::vector<int64_t>& send_counts, const std::vector<int64_t>& send_displs,
                   float* recv, const std::vector<int64_t>& recv_counts,
                   const std::vector<int64_t>& recv_displs) override {
    PLANNER_RETURN_IF_ERROR(CheckAllToAllV(size_, send_counts, send_displs, recv_counts, recv_displs));
    std::vector<int> sc, sd, rc, rd;
    PLANNER_RETURN_IF_ERROR(Ints(send_counts, "send_counts", &sc));
    PLANNER_RETURN_IF_ERROR(Ints(send_displs, "send_displs", &sd));
    PLANNER_RETURN_IF_ERROR(Ints(recv_counts, "recv_counts", &rc));
    PLANNER_RETURN_IF_ERROR(Ints(recv_displs, "recv_displs", &rd));
    Guard g("all-to-all", rank_, size_, timeout_s_);
    return Check(MPI_Alltoallv(send, sc.data(), sd.data(), MPI_FLOAT, recv, rc.data(), rd.data(), MPI_FLOAT, comm_),
                 "all-to-all");
  }
  Status GroupSendRecv(const std::vector<P2POp>& ops) override {
    std::vector<MPI_Request> rs(ops.size());
    for (const P2POp& o : ops) {
      if (o.peer < 0 || o.peer >= size_)
        return Status::InvalidArgument(fmt::format("send/recv peer {} outside [0, {})", o.peer, size_));
    }
    Guard g("send/recv", rank_, size_, timeout_s_);
    for (size_t i = 0; i < ops.size(); ++i) {
      const P2POp& o = ops[i];
      if (o.send) MPI_Isend(o.data, Int(o.count), MPI_FLOAT, o.peer, 7, comm_, &rs[i]);
      else MPI_Irecv(o.data, Int(o.count), MPI_FLOAT, o.peer, 7, comm_, &rs[i]);
    }
    return Check(MPI_Waitall(static_cast<int>(rs.size()), rs.data(), MPI_STATUSES_IGNORE), "send/recv");
  }
  Status Barrier() override {
    Guard g("barrier", rank_, size_, timeout_s_);
    return Check(MPI_Barrier(comm_), "barrier");
  }
  Status Send(const float* data, int64_t count, int peer, int64_t tag) override {
    if (peer < 0 || peer >= size_)
      return Status::InvalidArgument(fmt::format("send peer {} outside [0, {})", peer, size_));
    if (tag < 0) return Status::InvalidArgument(fmt::format("send tag {} is negative", tag));
    pending_.emplace_back();
    PLANNER_RETURN_IF_ERROR(
        Check(MPI_Isend(data, Int(count), MPI_FLOAT, peer, MpiTag(tag), comm_, &pending_.back()), "send"));
    // One progress call: completes the sends the peers have taken (their eager fragments go back
    // to the shared segment's free list) and pushes queued ones, so a schedule that posts many
    // sends between receives (GPipe's forward) never waits for a fragment until its next Recv.
    int done = 0;
    std::vector<int>& idx = done_scratch_;
    idx.resize(pending_.size());
    PLANNER_RETURN_IF_ERROR(
        Check(MPI_Testsome(static_cast<int>(pending_.size()), pending_.data(), &done, idx.data(), MPI_STATUSES_IGNORE),
              "send"));
    if (done > 0 && done != MPI_UNDEFINED) {
      pending_.erase(std::remove(pending_.begin(), pending_.end(), MPI_REQUEST_NULL), pending_.end());
    }
    return Status::OK();
  }
  Status Recv(float* data, int64_t count, int peer, int64_t tag) override {
    if (peer < 0 || peer >= size_)
      return Status::InvalidArgument(fmt::format("recv peer {} outside [0, {})", peer, size_));
    if (tag < 0) return Status::InvalidArgument(fmt::format("recv tag {} is negative", tag));
    Guard g("recv", rank_, size_, timeout_s_);
    MPI_Status st;
    PLANNER_RETURN_IF_ERROR(Check(MPI_Recv(data, Int(count), MPI_FLOAT, peer, MpiTag(tag), comm_, &st), "recv"));
    int got = 0;
    MPI_Get_count(&st, MPI_FLOAT, &got);
    if (got != count)
      return Status::CommError(fmt::format("rank {} sent {} floats, rank {} expected {}", peer, got, rank_, count));
    return Status::OK();
  }
  Status FlushSends() override {
    if (pending_.empty()) return Status::OK();
    Guard g("send", rank_, size_, timeout_s_);
    Status s = Check(MPI_Waitall(static_cast<int>(pending_.size()), pending_.data(), MPI_STATUSES_IGNORE), "send");
    pending_.clear();
    return s;
  }
  Status Split(int color, int key, std::unique_ptr<Communicator>* out) override {
    MPI_Comm c;
    {
      Guard g("communicator split", rank_, size_, timeout_s_);
      if (MPI_Comm_split(comm_, color, key, &c) != MPI_SUCCESS) return Status::CommError("MPI_Comm_split failed");
    }
    auto m = std::make_unique<MpiComm>(c, true);
    m->set_timeout_seconds(timeout_s_);
    *out = std::move(m);
    return Status::OK();
  }
  MPI_Comm raw() const { return comm_; }
  double timeout() const { return timeout_s_; }

 private:
  // Tags 0-99 stay free for the collectives' own traffic; pipeline tags wrap
  // over the rest of the library's tag space (MPI_TAG_UB, at least 32767 by the standard).
  int MpiTag(int64_t tag) const { return static_cast<int>(100 + tag % tag_space_); }
  int64_t tag_space_ = 32767 - 100 + 1;
  static int Int(int64_t n) { return static_cast<int>(n); }
  // MPI_Alltoallv takes int counts and displacements (in floats): larger ones are refused, not truncated.
  static Status Ints(const std::vector<int64_t>& v, const char* name, std::vector<int>* out) {
    out->resize(v.size());
    for (size_t j = 0; j < v.size(); ++j) {
      if (v[j] > std::numeric_limits<int>::max()) {
        return Status::InvalidArgument(fmt::format("all-to-all: {}[{}] is {} floats; MPI_Alltoallv takes at most {}",
                                                   name, j, v[j], std::numeric_limits<int>::max()));
      }
      (*out)[j] = static_cast<int>(v[j]);
    }
    return Status::OK();
  }
  MPI_Comm comm_;
  std::vector<MPI_Request> pending_;
  std::vector<int> done_scratch_;
  bool owned_;
  int rank_ = 0, size_ = 1;
};

// This process's rank in the job before MPI_Init (mpirun's environment), for the watchdog's message.
int LauncherRank() {
  const char* rank = std::getenv("OMPI_COMM_WORLD_RANK");
  if (rank == nullptr) rank = std::getenv("PMIX_RANK");
  return rank != nullptr ? std::atoi(rank) : 0;
}
int LauncherSize() {
  const char* size = std::getenv("OMPI_COMM_WORLD_SIZE");
  return size != nullptr ? std::atoi(size) : 1;
}

double g_finalize_timeout_s = 300;  // max(MakeMpiWorld's timeout, 300 s)

// MPI_Finalize waits for every rank (Open MPI: a fence of the launcher): bounded, so a rank
// stopped after its last collective cannot hold the others forever. Not by the timeout alone:
// the other ranks wait there while rank 0 merges the traces and writes the report, which may
// take longer than a timeout meant for a stuck collective.
void FinalizeAtExit() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) return;
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  Guard g("finalisation", rank, size, g_finalize_timeout_s, false);
  MPI_Finalize();
}

}  // namespace

bool MpiBuilt() { return true; }
int64_t MpiEagerLimitSet() { return g_eager_set; }
bool ConcurrentCommunicatorsSafe(const Communicator& c) { return c.backend() != "mpi" || g_thread_multiple; }

bool LaunchedUnderMpi() {
  for (const char* v : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK", "SLURM_NTASKS", "MPI_LOCALNRANKS"}) {
    if (std::getenv(v) != nullptr) return true;
  }
  return false;
}

Status MakeMpiWorld(std::unique_ptr<Communicator>* out, double timeout_s) {
  int inited = 0;
  MPI_Initialized(&inited);
  if (!inited) {
    SetSharedMemoryDefaults();
    const std::string rules_file = SetAllReduceRule();
    int provided = 0;
    g_finalize_timeout_s = std::max(timeout_s, 300.0);
    int rc = MPI_SUCCESS;
    {
      // MPI_Init waits for every rank of the job (the launcher's exchange of addresses): a rank
      // stopped or lost meanwhile would hold the others there forever. The watchdog thread runs
      // before MPI does; past the deadline it ends this process (MPI_Abort is not yet usable).
      Guard g("initialisation", LauncherRank(), LauncherSize(), timeout_s, false);
      // MULTIPLE: the runtime all-reduces gradients on a second thread while backward runs.
      rc = MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided);
    }
    if (rc != MPI_SUCCESS) {
      if (!rules_file.empty()) unlink(rules_file.c_str());
      return Status::CommError("MPI_Init_thread failed");
    }
    g_thread_multiple = provided >= MPI_THREAD_MULTIPLE;
    g_transport = DescribeTransport();
    if (!rules_file.empty()) unlink(rules_file.c_str());  // read by MPI_Init
    std::atexit(FinalizeAtExit);
  }
  *out = std::make_unique<MpiComm>(MPI_COMM_WORLD, false);
  (*out)->set_timeout_seconds(timeout_s);
  return Status::OK();
}

void LeaveJobAfterError(int exit_code) {
  int inited = 0, finalized = 0;
  MPI_Initialized(&inited);
  MPI_Finalized(&finalized);
  if (!inited || finalized) return;
  std::fflush(nullptr);
  RemoveOpenTemporaries();
  // No MPI_Finalize: it would wait for the other ranks, which wait for this one in a collective.
  // mpirun sees a rank end with a non-zero status, ends the others and exits with this code.
  std::_Exit(exit_code);
}

// The ranks of `m` on this node (shared memory), ordered by rank; the caller frees it.
Status NodeComm(const MpiComm& m, MPI_Comm* local) {
  Guard g("communicator split (node)", m.rank(), m.size(), m.timeout());
  if (MPI_Comm_split_type(m.raw(), MPI_COMM_TYPE_SHARED, m.rank(), MPI_INFO_NULL, local) != MPI_SUCCESS) {
    return Status::CommError("MPI_Comm_split_type failed");
  }
  return Status::OK();
}

Status StartPeerWatch(Communicator& world) {
  auto* m = dynamic_cast<MpiComm*>(&world);
  if (m == nullptr) return Status::OK();
  MPI_Comm local;
  PLANNER_RETURN_IF_ERROR(NodeComm(*m, &local));
  int local_size = 0;
  MPI_Comm_size(local, &local_size);
  long mine[2] = {world.rank(), static_cast<long>(getpid())};
  std::vector<long> all(static_cast<size_t>(2 * local_size));
  int rc = MPI_SUCCESS;
  {
    Guard g("all-gather of the node's pids", m->rank(), m->size(), m->timeout());
    rc = MPI_Allgather(mine, 2, MPI_LONG, all.data(), 2, MPI_LONG, local);
  }
  MPI_Comm_free(&local);
  PLANNER_RETURN_IF_ERROR(Check(rc, "all-gather of the node's pids"));
  std::vector<std::pair<int, long>> peers;
  for (int i = 0; i < local_size; ++i) {
    if (all[static_cast<size_t>(2 * i)] != world.rank())
      peers.emplace_back(static_cast<int>(all[static_cast<size_t>(2 * i)]), all[static_cast<size_t>(2 * i + 1)]);
  }
  Watchdog::Get().Watch(std::move(peers), world.rank(), world.size());
  return Status::OK();
}

void EndPeerWatch() { Watchdog::Get().Unwatch(); }

Status MpiNodeLayout(Communicator& world, int* local_rank, int* local_size, int* nodes) {
  auto* m = dynamic_cast<MpiComm*>(&world);
  if (m == nullptr) {
    *local_rank = world.rank();
    *local_size = world.size();
    *nodes = 1;
    return Status::OK();
  }
  MPI_Comm local;
  PLANNER_RETURN_IF_ERROR(NodeComm(*m, &local));
  MPI_Comm_rank(local, local_rank);
  MPI_Comm_size(local, local_size);
  MPI_Comm_free(&local);
  float leaders = *local_rank == 0 ? 1.0f : 0.0f;
  PLANNER_RETURN_IF_ERROR(world.AllReduce(&leaders, 1, ReduceOp::kSum));
  *nodes = static_cast<int>(leaders);
  return Status::OK();
}

}  // namespace planner
