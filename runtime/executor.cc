#include "runtime/executor.h"

#include <algorithm>
#include <cmath>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <numeric>
#include <memory>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "common/file_writer.h"
#include "common/log.h"
#include "common/progress.h"
#include "common/timing.h"
#include "common/units.h"
#include "runtime/agree.h"
#include "runtime/checkpoint.h"
#include "runtime/dp_reducer.h"
#include "runtime/interpreter.h"
#include "runtime/kernels/optimizer.h"
#include "runtime/kernels/device_ops.h"
#include "runtime/kernels/mixed_precision.h"
#include "runtime/launch_layout.h"
#include "runtime/rank_program.h"
#include "runtime/rank_comms.h"
#include "runtime/run_report.h"
#include "runtime/sequence_parallel.h"
#include "runtime/stage.h"
#include "runtime/transfers.h"
#include "spec/kernel_table.h"
#include "spec/model_state.h"

namespace planner {

namespace {

namespace fs = std::filesystem;

// What can be checked before any communication: the job's size, the layout, --comm-only with the
// asynchronous schedule, the model's loss, the stages' layers.
Status CheckLaunch(const LaunchPlan& L, const ModelSpec& model, int world_size, const RunOptions& opt,
                   LaunchLayout* layout) {
  const int64_t n = static_cast<int64_t>(L.ranks.size() + L.servers.size());
  if (world_size != n) {
    return Status::InvalidArgument(
        fmt::format("{} has {} ranks{} but this job has {}; start it with mpirun -np {} (bash run.sh)", L.path, n,
                    L.servers.empty() ? "" : fmt::format(" ({} summation servers)", L.servers.size()), world_size, n));
  }
  if (DpCommUsesServers(L.dp_comm) && L.device != Device::kCpu) {
    return Status::NotSupported(fmt::format(
        "{}: dp_comm {} runs on CPU ranks only (device cpu); codegen with --device cpu or an all-reduce dp_comm",
        L.path, DpCommName(L.dp_comm)));
  }
  PLANNER_RETURN_IF_ERROR(LayoutOf(L, layout));
  if (opt.comm_only && layout->async) {
    return Status::NotSupported(fmt::format(
        "{}: schedule pipedream: --comm-only runs the synchronous schedules only (gpipe, 1f1b, interleaved, "
        "zb-h1, dualpipev); drop --comm-only, or solve with one of them and codegen again",
        L.path));
  }
  if (model.layers.back().kind != LayerKind::kLoss)
    return Status::InvalidArgument("the model's last layer must be a loss to train it");
  PLANNER_RETURN_IF_ERROR(CheckRunPrecision(L, model));
  PLANNER_RETURN_IF_ERROR(
      CheckSeqParallelLaunch(L.path, L.device, L.tp, L.cp, L.sequence_parallel, model.layers.front()));
  const bool etp_ok = L.etp == 1 || (L.etp == L.tp && !L.sequence_parallel);
  if (L.ep > 1 && (!etp_ok || L.cp > 1 || layout->replicated || layout->async)) {
    return Status::NotSupported(fmt::format(
        "{}: ep {} runs with etp 1 (or etp = tp without sequence parallelism), cp 1 and uniform synchronous "
        "stages on CPU ranks (got etp {}, cp {}); solve with those and codegen again",
        L.path, L.ep, L.etp, L.cp));
  }
  for (const auto& s : L.stages) {
    if (s.last_layer >= static_cast<int64_t>(model.layers.size())) {
      return Status::InvalidArgument(
          fmt::format("{}: a stage ends at layer {} but the model has {}", L.path, s.last_layer, model.layers.size()));
    }
  }
  return Status::OK();
}

// A verified checkpoint and the metrics of the iterations it covers: where a resumed rank starts.
struct ResumePoint {
  LoadedCheckpoint checkpoint;
  std::vector<double> loss, iteration_s;
};

// Everything a rank checks alone before it trusts a checkpoint (runtime/checkpoint.h
// VerifyCheckpoint, the metrics it continues); summation servers hold none.
Status VerifyResume(const LaunchPlan& L, const ModelSpec& model, int64_t job_rank, const RunOptions& opt,
                    ResumePoint* out) {
  if (job_rank >= static_cast<int64_t>(L.ranks.size())) return Status::OK();
  PLANNER_RETURN_IF_ERROR(VerifyCheckpoint(opt.resume_from, IdentityOf(L, model), job_rank, &out->checkpoint));
  return ReadMetrics(opt.resume_from, out->checkpoint.iteration, &out->loss, &out->iteration_s);
}

// Every process of the job at two barriers, the peer watch ended between them.
Status EndJob(Communicator& job) {
  PLANNER_RETURN_IF_ERROR(job.Barrier());
  EndPeerWatch();
  return job.Barrier();
}

// dp_comm ps / byteps: every process's data bytes per gradient sync (sent, received), to rank 0 of the job.
Status GatherTraffic(const LaunchPlan& L, Communicator& job, const SyncTraffic& mine, std::vector<SyncTraffic>* all) {
  if (!DpCommUsesServers(L.dp_comm)) return Status::OK();
  // Bytes per sync and the sync count as int64 bit patterns in 6 floats (a float holds integers
  // exactly only to 2^24: 16 MiB per sync); AllGather copies them, it computes nothing.
  const double syncs = static_cast<double>(std::max<int64_t>(1, mine.syncs));
  const int64_t v[3] = {std::llround(mine.sent_bytes / syncs), std::llround(mine.received_bytes / syncs), mine.syncs};
  std::vector<float> packed(6);
  std::memcpy(packed.data(), v, sizeof v);
  std::vector<float> every(static_cast<size_t>(6 * job.size()));
  PLANNER_RETURN_IF_ERROR(job.AllGather(packed.data(), every.data(), 6));
  all->clear();
  for (size_t r = 0; r < every.size(); r += 6) {
    int64_t w[3];
    std::memcpy(w, every.data() + r, sizeof w);
    all->push_back({static_cast<double>(w[0]), static_cast<double>(w[1]), w[2]});
  }
  return Status::OK();
}

// A summation server's life (launch.yaml `servers`): the peer watch over the job, every group
// served until its workers are done, the traffic to rank 0, the job's last barriers.
Status ServeRank(const LaunchPlan& L, Communicator& job, DpSyncComms& sync, RunSummary* out) {
  PLANNER_RETURN_IF_ERROR(StartPeerWatch(job));
  RunSummary sum;
  sum.server = true;
  PLANNER_RETURN_IF_ERROR(ServeGroups(sync, L.dp_comm, static_cast<int64_t>(L.servers.size()), &sum.dp_traffic));
  std::vector<SyncTraffic> all;
  PLANNER_RETURN_IF_ERROR(GatherTraffic(L, job, sum.dp_traffic, &all));
  PLANNER_RETURN_IF_ERROR(EndJob(job));
  if (out) *out = std::move(sum);
  return Status::OK();
}

// One rank's run: its parts, put together. Setup builds them, Train runs the passes (an
// iteration each; PipeDream's one pass covers the rest of the run), Finish gathers the figures
// and writes the run's files.
class RankRun {
 public:
  // `world`: the workers; `job`: every process (the workers and the summation servers, if any).
  RankRun(const LaunchPlan& L, const ModelSpec& model, const LaunchLayout& layout, Communicator& world,
          Communicator& job, SummationClient* service, const RunOptions& opt, const ResumePoint* resume)
      : L_(L),
        model_(model),
        y_(layout),
        world_(world),
        job_(job),
        service_(service),
        opt_(opt),
        resume_(resume),
        rank_(world.rank()),
        me_(L.ranks[static_cast<size_t>(world.rank())]),
        id_(IdentityOf(L, model)) {}
  Status Setup();
  Status Train();
  Status Finish(RunSummary* out);

 private:
  bool WantGradients() const { return opt_.dump_gradients || opt_.keep_gradients; }
  Status Resume();
  Status StartInterpreter();
  Status EndIteration(int64_t it, const PassFigures& f);
  Status EndAsyncPass(int64_t it, const PassFigures& f);
  Status AfterFirstStep();
  Status Checkpoint(int64_t done);
  Status Stopped(int64_t done);
  std::string StopMessage(int64_t done) const;
  // The stop line's text if iteration done + 1 does not reach its end before mpirun's kill (SetLateStopText).
  std::string LateStopText(int64_t done) const;
  std::string CheckpointClause() const;
  // The late line's text while iteration `done`'s checkpoint is written.
  std::string LateCheckpointText(int64_t done) const;
  Status Summarise(RunSummary* sum, ReportInputs* report);
  Status WriteRunFiles(const ReportInputs& report);

  const LaunchPlan& L_;
  const ModelSpec& model_;
  const LaunchLayout y_;
  Communicator& world_;
  Communicator& job_;
  SummationClient* service_;
  const RunOptions& opt_;
  const ResumePoint* resume_;  // null: a fresh start
  const int64_t rank_;
  const LaunchRank& me_;
  const CheckpointIdentity id_;
  Device dev_ = Device::kCpu;
  int64_t iterations_ = 0, start_ = 0, checkpoint_every_ = 0;
  bool warned_kept_ = false;     // CommitCheckpoint kept a file the planner did not write (said once)
  int64_t last_checkpoint_ = 0;  // iterations the newest complete checkpoint holds (0: none)
  int stop_signal_ = 0;          // SIGINT / SIGTERM some rank received, agreed at the iteration's end
  double peak_bytes_ = 0;
  RankComms comms_;
  RunRecord record_;
  std::unique_ptr<CommTpGroup> tp_group_;
  std::vector<double> a2a_calls_s_;        // every all-to-all of the MoE layers since the last iteration's end
  std::vector<double> a2a_s_, a2a_count_;  // per iteration: their summed seconds and number
  std::unique_ptr<CommExpertGroup> ep_group_;
  Stage stage_;
  std::unique_ptr<Optimizer> optimizer_;
  std::unique_ptr<LossScaler> scaler_;            // fp16 runs
  std::unique_ptr<DataParallelReducer> reducer_;  // after the stage and the comms: its thread ends first
  ProgramInterpreter interpreter_;
  std::vector<NamedGradient> gradients_;
  double gradient_norm_ = 0;
  StashCounts stash_;
  VersionSummary versions_;
};

Status RankRun::Setup() {
  dev_ = L_.device;
  PLANNER_RETURN_IF_ERROR(OpenRankComms(L_, dev_, world_, &comms_, &job_));
  tp_group_ = std::make_unique<CommTpGroup>(comms_.tp.get(), &record_.transfers().tp_allreduces);
  SeqParallel seq;
  seq.tp = L_.tp, seq.tp_rank = me_.tp_rank, seq.sp = L_.sequence_parallel, seq.tp_comm = comms_.tp.get();
  seq.cp = L_.cp, seq.cp_rank = me_.cp_rank, seq.cp_comm = comms_.cp.get();
  seq.log = [g = tp_group_.get()](int kind, int64_t bytes, double s) { g->Log(kind, bytes, s); };
  if (L_.ep > 1) ep_group_ = std::make_unique<CommExpertGroup>(comms_.ep.get(), &a2a_calls_s_);
  PLANNER_RETURN_IF_ERROR(stage_.Build(L_, model_, y_, rank_, dev_, tp_group_.get(), seq, ep_group_.get()));
  OptimizerConfig oc;
  oc.kind = L_.run.optimizer == "sgd" ? OptimizerConfig::kSgd : OptimizerConfig::kAdam;
  oc.lr = L_.run.learning_rate;
  optimizer_ = std::make_unique<Optimizer>(oc);
  iterations_ = opt_.iterations > 0 ? opt_.iterations : L_.run.iterations;
  checkpoint_every_ = opt_.checkpoint_every >= 0 ? opt_.checkpoint_every : L_.run.checkpoint_every;
  if (model_.dtype == DType::kFp16) {  // dynamic loss scaling, Megatron's defaults (mixed_precision.h)
    scaler_ = opt_.initial_loss_scale > 0 ? std::make_unique<LossScaler>(opt_.initial_loss_scale)
                                          : std::make_unique<LossScaler>();
  }
  if (resume_ != nullptr) PLANNER_RETURN_IF_ERROR(Resume());
  return StartInterpreter();
}

// Parameters, optimizer state and the iteration from the verified checkpoint (RunLaunch); the
// earlier iterations' figures from its metrics.
Status RankRun::Resume() {
  PLANNER_RETURN_IF_ERROR(ApplyCheckpoint(resume_->checkpoint, stage_.params(), optimizer_.get(), scaler_.get()));
  start_ = resume_->checkpoint.iteration;
  last_checkpoint_ = start_;
  for (size_t i = 0; i < resume_->loss.size(); ++i)
    record_.AddIteration(resume_->loss[i], resume_->iteration_s[i], 0, 0);
  return Status::OK();
}

Status RankRun::StartInterpreter() {
  const bool sync_dp =
      !y_.async && (y_.replicated ? L_.stages[static_cast<size_t>(me_.stage)].replicas > 1 : L_.dp * L_.cp > 1);
  const bool overlap =
      L_.run.overlap_dp && sync_dp && stage_.grad_elems() > 0 && ConcurrentCommunicatorsSafe(*comms_.dp);
  reducer_ = std::make_unique<DataParallelReducer>(comms_.dp.get(), stage_.bucket(), overlap, service_);
  std::vector<Action> program;
  const int64_t covers = y_.async ? iterations_ - start_ : 1;
  if (opt_.program) {
    PLANNER_RETURN_IF_ERROR(opt_.program(L_, rank_, covers, &program));
  } else if (covers > 0) {
    PLANNER_RETURN_IF_ERROR(RankProgramOf(L_, y_, rank_, start_, y_.async ? iterations_ : start_ + 1, &program));
  }
  InterpreterContext c;
  c.launch = &L_;
  c.model = &model_;
  c.layout = y_;
  c.rank = rank_;
  c.stage = &stage_;
  c.pipe = comms_.pipe;
  c.tp_group = tp_group_.get();
  c.reducer = reducer_.get();
  c.edp = comms_.edp.get();
  c.optimizer = optimizer_.get();
  c.record = &record_;
  c.clock_offset_s = comms_.clock_offset_s;
  c.comm_only = opt_.comm_only;
  // The GEMMs in the run's precision (device_ops.h): CPU ranks round bf16 / fp16 operands and emulate FP8's
  // per-tensor e4m3 quantisation with fp32 arithmetic; CUDA runs cuBLAS in that precision.
  SetGemmPrecision(model_.dtype);
  if (scaler_ != nullptr) {  // fp16: dynamic loss scaling (made before a resume restores its state)
    c.scaler = scaler_.get();
    c.workers = &world_;
  }
  return interpreter_.Init(c, std::move(program));
}

Status RankRun::Train() {
  // SIGINT / SIGTERM stop the loop at an iteration boundary (below); outside it they end the process at once.
  struct SafePoints {
    StopMode before = CurrentStopMode();
    SafePoints() { SetStopMode(StopMode::kSafePoints); }
    ~SafePoints() {
      SetLateStopText("");
      if (CurrentStopMode() == StopMode::kSafePoints) SetStopMode(before);
    }
  } safe_points;
  for (int64_t it = start_; it < iterations_;) {
    if (rank_ == 0 && !y_.async) SetLateStopText(LateStopText(it));
    ResetPeakMemory(dev_);
    const int64_t span = y_.async ? iterations_ - it : 1;
    if (it == 0 && WantGradients()) interpreter_.CaptureNextStep(&gradients_);
    PassFigures f;
    PLANNER_RETURN_IF_ERROR(interpreter_.RunPass({it, span}, &f));
    PLANNER_RETURN_IF_ERROR(y_.async ? EndAsyncPass(it, f) : EndIteration(it, f));
    peak_bytes_ = std::max(peak_bytes_, static_cast<double>(GetMemoryStats(dev_).peak_bytes));
    if (it == 0 && WantGradients()) PLANNER_RETURN_IF_ERROR(AfterFirstStep());
    it += span;
    const bool due = checkpoint_every_ > 0 && (it % checkpoint_every_ == 0 || y_.async);
    // The iteration has ended: a late line now can only be about its checkpoint (none due: the boundary is here).
    if (rank_ == 0 && !y_.async) SetLateStopText(due ? LateCheckpointText(it) : std::string());
    if (due) PLANNER_RETURN_IF_ERROR(Checkpoint(it));
    if (stop_signal_ != 0) return Stopped(it);
  }
  return Status::OK();
}

// Every rank stops after the same iteration (the signal travels with the iteration's
// all-reduce), the checkpoint of that boundary, if due, complete. Rank 0 prints the one error
// line and writes the metrics so far; every rank returns an empty message (main prints nothing).
Status RankRun::Stopped(int64_t done) {
  NoteInterrupt(stop_signal_);
  if (rank_ == 0) {
    // The line first: mpirun gives signalled ranks 1 s (odls_base_sigkill_timeout) before SIGKILL. The
    // watchdog printed it already when this boundary came late (PrintLateStopLine).
    if (ClaimStopLine()) LogError(StopMessage(done));
    const Status m = record_.WriteMetrics(opt_.run_dir);
    if (!m.ok()) LogWarning(m.message());
  }
  SetStopMode(StopMode::kSilent);  // the line is out: mpirun's SIGTERM (a rank ended) adds none
  // The other ranks wait for rank 0's line (a rank leaving first makes mpirun end rank 0), and
  // the peer watch ends between two barriers, so that no rank names another that left.
  PLANNER_RETURN_IF_ERROR(world_.Barrier());
  EndPeerWatch();
  PLANNER_RETURN_IF_ERROR(world_.Barrier());
  return Status::Unavailable("");  // printed above; main prints nothing more
}

std::string RankRun::CheckpointClause() const {
  const fs::path run_dir(opt_.run_dir);
  const std::string resume = fmt::format("planner run {} --resume {}", run_dir.parent_path().parent_path().string(),
                                         run_dir.filename().string());
  if (last_checkpoint_ > 0) {
    return fmt::format("the last complete checkpoint is iteration {} ({}/ckpt); continue with {}", last_checkpoint_,
                       opt_.run_dir, resume);
  }
  return checkpoint_every_ > 0 ? fmt::format("no checkpoint yet (every {} iterations)", checkpoint_every_)
                               : "no checkpoint (checkpoint_every 0; --checkpoint-every N writes them)";
}

std::string RankRun::StopMessage(int64_t done) const {
  return fmt::format("{} ({}) after iteration {} of {}; {}; metrics so far in {}/metrics.csv",
                     stop_signal_ == SIGTERM ? "terminated" : "interrupted", SignalName(stop_signal_), done,
                     iterations_, CheckpointClause(), opt_.run_dir);
}

std::string RankRun::LateCheckpointText(int64_t done) const {
  return fmt::format(
      "after iteration {} of {}, writing its checkpoint, not done {:.1f} s after the signal (mpirun kills signalled "
      "ranks 1 s after forwarding it); {} (iteration {}'s, if it completes before the kill); {}/metrics.csv is "
      "written only if it does",
      done, iterations_, kLateStopNs / 1e9, CheckpointClause(), done, opt_.run_dir);
}

std::string RankRun::LateStopText(int64_t done) const {
  const bool due = checkpoint_every_ > 0 && (done + 1) % checkpoint_every_ == 0;
  return fmt::format(
      "in iteration {} of {}, not ended {:.1f} s after the signal (mpirun kills signalled ranks 1 s after forwarding "
      "it); {}{}; {}/metrics.csv is written only if the iteration ends before that",
      done + 1, iterations_, kLateStopNs / 1e9, CheckpointClause(),
      due ? fmt::format(" (iteration {}'s, due at its end, if it ends before the kill)", done + 1) : "", opt_.run_dir);
}

// Mean loss of the global batch (last-stage, tp-rank-0 ranks contribute their sum) and the
// iteration's time, the slowest rank's.
Status RankRun::EndIteration(int64_t it, const PassFigures& f) {
  // MoE: each microbatch's aux loss weighs b / B in the objective, so b x aux joins the per-sample sum (TP ranks
  // hold equal copies: tp rank 0 counts; each replica its own microbatches).
  double aux = 0;
  for (auto& c : stage_.chunks())
    for (auto& k : c.kernels) aux += k->TakeAuxLoss();
  const double mine = f.loss_sum[0] + aux * static_cast<double>(L_.microbatch_size);
  float lsum = me_.tp_rank == 0 && me_.cp_rank == 0 ? static_cast<float>(mine) : 0.0f;  // CP ranks hold the whole loss
  PLANNER_RETURN_IF_ERROR(world_.AllReduce(&lsum, 1, ReduceOp::kSum));
  // The slowest rank's time, and the signal (SIGINT 2, SIGTERM 15) any rank received: all stop here.
  float it_time[2] = {static_cast<float>(MonotonicSeconds() - f.start_s), static_cast<float>(InterruptSignal())};
  PLANNER_RETURN_IF_ERROR(world_.AllReduce(it_time, 2, ReduceOp::kMax));
  stop_signal_ = static_cast<int>(it_time[1]);
  record_.AddIteration(lsum / static_cast<double>(L_.global_batch), it_time[0], f.compute_s, f.comm_s);
  a2a_s_.push_back(std::accumulate(a2a_calls_s_.begin(), a2a_calls_s_.end(), 0.0));
  a2a_count_.push_back(static_cast<double>(a2a_calls_s_.size()));
  a2a_calls_s_.clear();
  if (rank_ == 0 && !opt_.quiet)
    LogNote(fmt::format("iteration {}: loss {:.5f}, {}", it + 1, record_.loss().back(), FormatSeconds(it_time[0])));
  return Status::OK();
}

// Per iteration of the pass: losses summed over ranks, the time stage 0 finished the iteration's
// last backward (max over ranks), and the pass's compute / communication spread evenly.
Status RankRun::EndAsyncPass(int64_t it, const PassFigures& f) {
  const int64_t span = static_cast<int64_t>(f.loss_sum.size());
  std::vector<float> lf(f.loss_sum.begin(), f.loss_sum.end()), df(f.done_s.begin(), f.done_s.end());
  if (me_.tp_rank != 0 || me_.cp_rank != 0) std::fill(lf.begin(), lf.end(), 0.0f);
  df.push_back(static_cast<float>(InterruptSignal()));  // as in EndIteration
  PLANNER_RETURN_IF_ERROR(world_.AllReduce(lf.data(), span, ReduceOp::kSum));
  PLANNER_RETURN_IF_ERROR(world_.AllReduce(df.data(), span + 1, ReduceOp::kMax));
  stop_signal_ = static_cast<int>(df.back());
  for (int64_t k = 0; k < span; ++k) {
    const size_t i = static_cast<size_t>(k);
    record_.AddIteration(lf[i] / static_cast<double>(L_.global_batch), df[i] - (k > 0 ? df[i - 1] : 0.0f),
                         f.compute_s / static_cast<double>(span), f.comm_s / static_cast<double>(span));
    if (rank_ == 0 && !opt_.quiet) {
      LogNote(fmt::format("iteration {}: loss {:.5f}, {}", it + k + 1, record_.loss().back(),
                          FormatSeconds(record_.iteration_s().back())));
    }
  }
  return Status::OK();
}

// The first step's gradients: files (replica 0, tp rank 0 of each stage), the global norm.
Status RankRun::AfterFirstStep() {
  // CP ranks hold the summed gradients like replicas: only cp rank 0 of replica 0 counts.
  // Expert gradients (MoE): each EP rank of EDP rank 0 holds its experts' sum.
  const int64_t edp_rank = RankInGroup(L_.edp_groups, rank_);
  PLANNER_RETURN_IF_ERROR(
      GlobalGradientNorm(world_, me_.replica + me_.cp_rank, me_.tp_rank, gradients_, &gradient_norm_, edp_rank));
  if (opt_.dump_gradients) {
    std::vector<NamedGradient> mine;
    for (const NamedGradient& g : gradients_) {
      // an expert cut over TP (etp > 1): tp rank 0's cut, as for the dense shards
      if (g.expert ? edp_rank == 0 && (!g.tp_sharded || me_.tp_rank == 0)
                   : (me_.replica == 0 && me_.tp_rank == 0 && me_.cp_rank == 0))
        mine.push_back(g);
    }
    if (!mine.empty()) PLANNER_RETURN_IF_ERROR(WriteGradients(opt_.run_dir, mine));
    if (rank_ == 0)
      PLANNER_RETURN_IF_ERROR(WriteFileAtomic((fs::path(opt_.run_dir) / "grad_norm.txt").string(),
                                              fmt::format("{:.9e}\n", gradient_norm_)));
  }
  if (!opt_.keep_gradients) gradients_.clear();
  return Status::OK();
}

// A test hook (docs/runtime.md, "Checkpoints"): PLANNER_TEST_KILL_AT_CHECKPOINT=N kills rank 0
// with SIGKILL once every rank's file of checkpoint N and the metrics are durable, before the
// manifest: the worst moment for a job to die.
void MaybeDieBeforeManifest(int64_t done) {
  const char* at = std::getenv("PLANNER_TEST_KILL_AT_CHECKPOINT");
  if (at != nullptr && std::to_string(done) == at) std::raise(SIGKILL);
}

// A size or checksum as four 16-bit pieces in floats (whole numbers: exact through any copy).
void PackU64(uint64_t v, float* out) {
  for (int i = 0; i < 4; ++i) out[i] = static_cast<float>((v >> (16 * i)) & 0xFFFFu);
}
uint64_t UnpackU64(const float* in) {
  uint64_t v = 0;
  for (int i = 0; i < 4; ++i) v |= static_cast<uint64_t>(in[i]) << (16 * i);
  return v;
}

// After `done` iterations: every rank's file (durable), every rank's size and checksum to rank 0
// (a rank that failed to write ends the job on every rank here), the metrics so far, then rank 0's
// manifest, the checkpoint's last write; every rank learns that it landed.
Status RankRun::Checkpoint(int64_t done) {
  CheckpointFile mine;
  const Status wrote =
      WriteCheckpoint(opt_.run_dir, id_, rank_, done, stage_.params(), *optimizer_, &mine, scaler_.get());
  float packed[9] = {};
  packed[0] = wrote.ok() ? 1.0f : 0.0f;
  PackU64(static_cast<uint64_t>(mine.bytes), packed + 1);
  PackU64(mine.crc32c, packed + 5);
  std::vector<float> every(static_cast<size_t>(9 * world_.size()));
  PLANNER_RETURN_IF_ERROR(world_.AllGather(packed, every.data(), 9));
  CheckpointManifest m;
  m.iteration = done, m.directory = fmt::format("iter-{}", done), m.model_digest = id_.model_digest,
  m.layout_digest = id_.layout_digest;
  if (!wrote.ok()) return wrote;
  for (int64_t r = 0; r < world_.size(); ++r) {
    const float* p = every.data() + 9 * r;
    if (p[0] != 1.0f)
      return Status::Unavailable(
          fmt::format("checkpoint after iteration {}: rank {} could not write its file (its error above)", done, r));
    m.files.push_back({static_cast<int64_t>(UnpackU64(p + 1)), static_cast<uint32_t>(UnpackU64(p + 5))});
  }
  Status committed;
  if (rank_ == 0) {
    committed = record_.WriteMetrics(opt_.run_dir);
    MaybeDieBeforeManifest(done);
    std::vector<std::string> kept;
    if (committed.ok()) committed = CommitCheckpoint(opt_.run_dir, m, &kept);
    if (!kept.empty() && !warned_kept_) {  // once per run: the next rotations keep them too
      warned_kept_ = true;
      LogWarning(
          fmt::format("kept {} in an older checkpoint directory: not written by the planner (only its rank "
                      "files and temporaries are removed)",
                      fmt::join(kept, ", ")));
    }
  }
  PLANNER_RETURN_IF_ERROR(AgreeOnStatus(world_, committed));
  last_checkpoint_ = done;
  return Status::OK();
}

// The model state a rank holds, from its tensors' element sizes: weights, gradients (and the fp32
// masters of mixed precision, once kernels hold them), the optimizer's fp32 moments.
struct ModelState {
  double bytes = 0, params = 0, weight_bytes = 0;
};
ModelState MeasureModelState(const std::vector<Param*>& params, const Optimizer* optimizer) {
  ModelState st;
  for (const Param* p : params) {
    st.params += static_cast<double>(p->value.numel());
    st.weight_bytes += static_cast<double>(p->value.bytes());
    st.bytes += static_cast<double>(p->value.bytes() + p->grad.bytes() + p->master.bytes());
  }
  if (optimizer != nullptr)
    st.bytes += static_cast<double>(optimizer->StateBytes());  // fp32 moments (and the step count)
  return st;
}

// The plan's model-state bytes per parameter for the model's precision at ZeRO-0 (the runtime keeps
// every replica's whole optimizer state): the cost model's own figure (spec/model_state.h).
// FP8 parameters at the default recipe's bytes (an FP8 weight and its transpose, 2 B: the launch carries no kernel table).
double PlanStateBytesPerParam(const ModelSpec& model, DType grad_dtype, OptimizerState optimizer_state,
                              bool fp8_params) {
  StateBytes sb = ModelStateBytes(&model, grad_dtype, 0, optimizer_state);
  if (fp8_params && sb.fp8_weight_copy > 0) {
    const Fp8Recipe recipe;
    KeepFp8Params(recipe.weight_bytes, recipe.param_gather_bytes, false, &sb);
  }
  return StateBytesPerParam(sb, 0, 1);
}

// The report's precision, the plan's model-state figure and what this runtime keeps apart from it: fp32
// gradients whatever the plan's buffer, fp32 master weights and moments whatever its optimizer state.
void PlanStateNotes(const ModelSpec& model, const LaunchPlan& L, ReportInputs* rep) {
  rep->precision = DTypeName(model.dtype);
  const DType plan_grad = EffectiveGradDType(model.dtype, L.grad_dtype);
  const OptimizerState plan_os = L.optimizer_state;  // checked against the precision (CheckRunPrecision)
  rep->plan_bytes_per_param = PlanStateBytesPerParam(model, plan_grad, plan_os, L.fp8_param_gather);
  if (plan_grad != DType::kFp32) {
    rep->state_note = fmt::format(
        "The plan keeps gradients in {} ({} bytes per parameter; Megatron's default for fp16, --grad-reduce-in-bf16 "
        "for bf16); "
        "this runtime accumulates and reduces them in fp32, 2 bytes per parameter more.",
        DTypeName(plan_grad), DTypeBytes(plan_grad));
  }
  if (plan_os != OptimizerState::kFp32) {
    rep->state_note += fmt::format(
        "{}The plan keeps the optimizer state as {} ({:g} bytes per parameter); this runtime keeps fp32 master "
        "weights and moments, {:g} bytes per parameter more.",
        rep->state_note.empty() ? "" : " ", OptimizerStateName(plan_os), OptimizerStateBytes(plan_os),
        OptimizerStateBytes(OptimizerState::kFp32) - OptimizerStateBytes(plan_os));
  }
  if (L.fp8_param_gather) {
    rep->state_note += fmt::format(
        "{}The plan keeps FP8 parameters (the weights in FP8 alone, Megatron --fp8-param-gather); this runtime keeps "
        "bf16 weights and casts them to FP8 per use: its weight bytes and parameter gathers are not the plan's.",
        rep->state_note.empty() ? "" : " ");
  }
}

// Medians over the iterations after warm-up; per-rank compute, communication and peak memory to
// every rank; the transfer table (rank 0).
Status RankRun::Summarise(RunSummary* sum, ReportInputs* rep) {
  const int64_t n = world_.size();
  // A resumed run's first start_ iterations come from metrics.csv, without compute or communication times:
  // the medians are over the iterations this job ran, after its own warm-up (they were over all of them, so
  // a resume reported a bubble of 100%: issue 32).
  const int64_t ran = iterations_ - start_, first = ran > 0 ? start_ : 0;
  const size_t warm = static_cast<size_t>(
      first + std::min<int64_t>(L_.run.warmup_iterations, std::max<int64_t>(0, (ran > 0 ? ran : iterations_) - 1)));
  auto tail = [&](const std::vector<double>& v) {
    return std::vector<double>(v.begin() + static_cast<long>(warm), v.end());
  };
  const double it_med = Median(tail(record_.iteration_s())), comp_med = Median(tail(record_.compute_s())),
               comm_med = Median(tail(record_.comm_s()));
  const ModelState st = MeasureModelState(stage_.params(), optimizer_.get());
  constexpr int64_t kFigures = 6;
  std::vector<float> mine = {static_cast<float>(comp_med),           static_cast<float>(comm_med),
                             static_cast<float>(peak_bytes_ / kGiB), static_cast<float>(st.bytes),
                             static_cast<float>(st.params),          static_cast<float>(st.weight_bytes)};
  std::vector<float> all(static_cast<size_t>(kFigures * n));
  PLANNER_RETURN_IF_ERROR(world_.AllGather(mine.data(), all.data(), kFigures));
  double busy = 0;
  rep->ranks.clear();
  for (int64_t r = 0; r < n; ++r) {
    const size_t i = static_cast<size_t>(kFigures * r);
    busy += all[i];
    rep->ranks.push_back({all[i], all[i + 1], all[i + 2], all[i + 3], all[i + 4], all[i + 5]});
  }
  PlanStateNotes(model_, L_, rep);
  if (scaler_ != nullptr) {
    rep->loss_scaling = fmt::format(
        "fp16 dynamic loss scaling: {} of {} optimizer steps skipped on overflow; loss scale {:g} at the end "
        "(initial {:g}, halved after 2 overflows, doubled after 1000 clean steps).",
        scaler_->skipped(), iterations_ - start_, scaler_->scale(),
        opt_.initial_loss_scale > 0 ? opt_.initial_loss_scale : 65536.0);
  }
  if (L_.ep > 1) {  // the MoE layers' all-to-alls: every rank's medians
    std::vector<float> a = {static_cast<float>(Median(tail(a2a_count_))), static_cast<float>(Median(tail(a2a_s_)))},
                       every(static_cast<size_t>(2 * n));
    PLANNER_RETURN_IF_ERROR(world_.AllGather(a.data(), every.data(), 2));
    for (int64_t r = 0; r < n; ++r)
      rep->a2a.push_back({every[static_cast<size_t>(2 * r)], every[static_cast<size_t>(2 * r + 1)]});
  }
  sum->loss = record_.loss();
  sum->iteration_s = record_.iteration_s();
  sum->median_iteration_s = it_med;
  sum->measured_bubble_fraction = it_med > 0 ? std::max(0.0, 1.0 - busy / (static_cast<double>(n) * it_med)) : 0;
  sum->gradients = std::move(gradients_);
  sum->gradient_norm = gradient_norm_;
  sum->stash = stash_;
  sum->versions = versions_;
  if (interpreter_.stash()) sum->version_records = interpreter_.stash()->records();
  rep->model_name = model_.name;
  rep->layout = y_;
  rep->loss = record_.loss();
  rep->warmup = static_cast<int64_t>(warm);
  rep->median_iteration_s = it_med;
  rep->bubble_fraction = sum->measured_bubble_fraction;
  rep->comm_only = opt_.comm_only;
  rep->clock_error_s = comms_.clock_error_s;
  rep->transport = comms_.pipe->transport();
  return SummariseTransfers(world_, L_, record_.transfers(), rep->warmup, &rep->transfers_md);
}

// Per-rank trace; past the peer watch, rank 0 merges the traces and writes metrics and the report.
Status RankRun::WriteRunFiles(const ReportInputs& rep) {
  PLANNER_RETURN_IF_ERROR(record_.WriteRankTrace(opt_.run_dir, rank_, comms_.clock_offset_s));
  // Stop watching peers between two barriers of the whole job (servers too): past the second one a rank may exit normally.
  PLANNER_RETURN_IF_ERROR(EndJob(job_));
  if (rank_ != 0) return Status::OK();
  PLANNER_RETURN_IF_ERROR(MergeTraces(opt_.run_dir, L_));
  PLANNER_RETURN_IF_ERROR(record_.WriteMetrics(opt_.run_dir));
  return WriteFileAtomic((fs::path(opt_.run_dir) / "report.md").string(), RunReportMarkdown(L_, rep));
}

Status RankRun::Finish(RunSummary* out) {
  if (y_.async) {
    const StashCounts mine = interpreter_.stash() ? interpreter_.stash()->counts() : StashCounts();
    PLANNER_RETURN_IF_ERROR(WriteStashCounts(world_, mine, opt_.run_dir, &stash_));
    PLANNER_RETURN_IF_ERROR(WriteVersionSummary(world_, interpreter_.stash(), L_.vertical_sync, y_.stages,
                                                iterations_ * y_.microbatches, opt_.run_dir, &versions_));
  }
  RunSummary sum;
  ReportInputs rep;
  PLANNER_RETURN_IF_ERROR(Summarise(&sum, &rep));
  if (service_ != nullptr) sum.dp_traffic = service_->traffic();
  PLANNER_RETURN_IF_ERROR(GatherTraffic(L_, job_, sum.dp_traffic, &rep.dp_traffic));
  PLANNER_RETURN_IF_ERROR(WriteRunFiles(rep));
  if (out) *out = std::move(sum);
  return Status::OK();
}

}  // namespace

Status CheckRunPrecision(const LaunchPlan& L, const ModelSpec& model) {
  if (StorageDType(model.dtype) != DType::kFp32 && (L.schedule == Schedule::kPipeDream || L.vertical_sync)) {
    return Status::NotSupported(
        fmt::format("{}: schedule {} with precision {}: weight stashing keeps fp32 weights only; solve with "
                    "--precision fp32 or a synchronous schedule and codegen again",
                    L.path, ScheduleName(L.schedule), DTypeName(model.dtype)));
  }
  if (L.grad_dtype && !GradDTypeAllowed(model.dtype, *L.grad_dtype)) {
    return Status::InvalidArgument(
        fmt::format("{}: field 'grad_dtype': {} gradients do not go with the model's {}; set grad_dtype: {} "
                    "(or codegen the plan again)",
                    L.path, DTypeName(*L.grad_dtype), DTypeName(model.dtype), GradDTypeChoices(model.dtype)));
  }
  if (L.fp8_param_gather && model.dtype != DType::kFp8) {
    return Status::InvalidArgument(fmt::format(
        "{}: field 'fp8_param_gather': FP8 parameters with the model's {}: an FP8 model's only; set it false (or "
        "codegen the plan again)",
        L.path, DTypeName(model.dtype)));
  }
  if (const std::string why = OptimizerStateRefusal(model.dtype, L.optimizer_state); !why.empty()) {
    return Status::InvalidArgument(
        fmt::format("{}: field 'optimizer_state': {} with the model's {}: {} (or codegen the plan again)", L.path,
                    OptimizerStateName(L.optimizer_state), DTypeName(model.dtype), why));
  }
  return Status::OK();
}

LaunchPlan SingleProcessPlan(const LaunchPlan& L, const ModelSpec& model) {
  LaunchPlan s = L;
  s.schedule = Schedule::kGpipe;
  s.interleave = 1;
  s.tp = s.pp = s.dp = s.cp = 1;
  s.sequence_parallel = false;
  s.cp_groups.clear();
  s.ep = s.etp = 1;  // every expert in the one process
  s.ep_groups.clear();
  s.edp_groups.clear();
  s.config = std::string("1");
  s.num_microbatches = L.global_batch / L.microbatch_size;
  s.stages = {LaunchStage{0, static_cast<int64_t>(model.layers.size()) - 1, 1, 0, 0}};
  s.ranks = {LaunchRank{}};
  s.tp_groups = {{0}};
  s.dp_groups = {{0}};
  s.pp_groups = {{0}};
  s.dp_comm = DpComm::kHierAllReduce;  // one process: nothing to synchronise, no servers
  s.servers.clear();
  s.programs = {RankProgram{0, -1, SingleDeviceProgram(s.num_microbatches)}};
  s.ranks[0].program = 0;
  return s;
}

Status RunLaunch(const LaunchPlan& L, const ModelSpec& model, Communicator& world, const RunOptions& opt,
                 RunSummary* out) {
  KeepFreedHostMemory();
  LaunchLayout layout;
  PLANNER_RETURN_IF_ERROR(CheckLaunch(L, model, world.size(), opt, &layout));
  SetCpuThreads(static_cast<int>(L.run.threads));
  // A resumed run: every process checks its own part of the checkpoint first, then one agreement
  // step, so that when any refuses, all end now with its line (not at a later collective's timeout).
  ResumePoint resume;
  if (!opt.resume_from.empty())
    PLANNER_RETURN_IF_ERROR(AgreeOnStatus(world, VerifyResume(L, model, world.rank(), opt, &resume)));
  DpSyncComms sync;
  PLANNER_RETURN_IF_ERROR(OpenDpSync(L, world, &sync));
  if (sync.server) return ServeRank(L, world, sync, out);
  RankRun run(L, model, layout, sync.workers ? *sync.workers : world, world, sync.client.get(), opt,
              opt.resume_from.empty() ? nullptr : &resume);
  PLANNER_RETURN_IF_ERROR(run.Setup());
  PLANNER_RETURN_IF_ERROR(run.Train());
  if (sync.client) PLANNER_RETURN_IF_ERROR(sync.client->Done());  // the servers' loops end
  return run.Finish(out);
}

}  // namespace planner
