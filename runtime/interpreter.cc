#include "runtime/interpreter.h"

#include <algorithm>
#include <cstring>

#include <fmt/format.h>

#include "common/timing.h"
#include "runtime/kernels/cuda_api.h"
#include "runtime/teacher.h"

namespace planner {

namespace {

const char* KindName(ActionKind k) {
  switch (k) {
    case ActionKind::kForward: return "F";
    case ActionKind::kBackwardInput: return "B";
    case ActionKind::kBackwardWeight: return "W";
    case ActionKind::kRecvActivation: return "RA";
    case ActionKind::kSendActivation: return "SA";
    case ActionKind::kRecvGrad: return "RG";
    case ActionKind::kSendGrad: return "SG";
    case ActionKind::kGradReduce: return "AR";
    case ActionKind::kOptimizerStep: return "OPT";
  }
  return "?";
}

std::string Describe(size_t index, const Action& a) {
  return fmt::format("program action {} ({}{}.{})", index, KindName(a.kind), a.stage, a.microbatch);
}

// Whether the optimizer steps inside the program, before its last action (PipeDream): a
// microbatch's forward and its backward may then meet different weight versions.
bool StepsInside(const std::vector<Action>& program) {
  for (size_t i = 0; i + 1 < program.size(); ++i) {
    if (program[i].kind == ActionKind::kOptimizerStep) return true;
  }
  return false;
}

// Vertical sync: a message between stages is the tensor's values and then its minibatch's version
// tag (a float: exact below 2^24, checked where the tag is made).
Tensor WithTag(const Tensor& x, int64_t tag) {
  std::vector<float> v = x.ToVector();
  v.push_back(static_cast<float>(tag));
  return Tensor::FromVector({static_cast<int64_t>(v.size())}, v).To(x.device());
}

Tensor SplitTag(const Tensor& msg, const std::vector<int64_t>& shape, int64_t* tag) {
  std::vector<float> v = msg.ToVector();
  *tag = static_cast<int64_t>(v.back());
  v.pop_back();
  return Tensor::FromVector(shape, v).To(msg.device());
}

int64_t Elements(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

// A pipeline message's 4-byte words: a tensor's real bytes rounded up to a word (a 16-bit tensor of n
// elements: ceil(n / 2) words; the transports move words as opaque bits, docs/runtime.md).
int64_t MessageWords(const Tensor& t) { return (t.bytes() + 3) / 4; }

// A 16-bit tensor with an odd element count, copied into a buffer one element longer so that its last
// word is whole (the padding element is zero); any other tensor as it is.
Tensor WordAligned(const Tensor& t) {
  if (t.bytes() % 4 == 0) return t;
  Tensor padded = Tensor::Zeros({t.numel() + 1}, t.device(), t.dtype());
  if (t.device() == Device::kCpu) std::memcpy(padded.raw(), t.raw(), static_cast<size_t>(t.bytes()));
  else {  // through the host: a rare shape (activations have even element counts in practice)
    std::vector<char> host(static_cast<size_t>(t.bytes()));
    CudaCopyToHost(host.data(), t.raw(), t.bytes());
    CudaCopyToDevice(padded.raw(), host.data(), t.bytes());
  }
  return padded;
}

}  // namespace

Tensor BufferPool::Get(const std::vector<int64_t>& shape, Device dev, DType dtype) {
  for (auto& t : pool_) {
    if (t.use_count() == 1 && t.shape() == shape && t.device() == dev && t.dtype() == dtype) return t;
  }
  pool_.push_back(AllocateTensor(shape, dev, dtype));
  return pool_.back();
}

Status ProgramInterpreter::Init(const InterpreterContext& context, std::vector<Action> program) {
  ctx_ = context;
  program_ = std::move(program);
  const LaunchRank& me = ctx_.launch->ranks[static_cast<size_t>(ctx_.rank)];
  sample_offset_ = ctx_.layout.replicated ? 0 : me.replica * ctx_.layout.microbatches;
  peer_.assign(program_.size(), -1);
  split_w_ = false;
  microbatches_ = 0;
  const RankTable ranks(*ctx_.launch);
  for (size_t i = 0; i < program_.size(); ++i) {
    PLANNER_RETURN_IF_ERROR(CheckAction(i, program_[i], ranks));
    split_w_ = split_w_ || program_[i].kind == ActionKind::kBackwardWeight;
    microbatches_ = std::max<int64_t>(microbatches_, program_[i].microbatch + 1);
  }
  vsync_ = ctx_.launch->vertical_sync;
  if (StepsInside(program_)) {
    const int64_t q = ctx_.stage->chunks().front().q, r = ctx_.launch->stages[static_cast<size_t>(q)].replicas;
    stash_ = std::make_unique<WeightStash>(ctx_.stage->params(), vsync_, q, me.replica, std::max<int64_t>(1, r));
  } else if (vsync_) {
    return Status::InvalidArgument(
        fmt::format("{}: vertical_sync: rank {}'s program does not step inside the pass (the pipedream schedule's "
                    "programs do); remove vertical_sync or codegen a pipedream plan",
                    ctx_.launch->path, ctx_.rank));
  }
  PlanReduces();
  return Status::OK();
}

// A compute or transfer names one of this rank's chunks and a neighbour that exists; a transfer's
// peer is resolved here, once.
Status ProgramInterpreter::CheckAction(size_t index, const Action& a, const RankTable& ranks) {
  const int64_t Q = ctx_.layout.stages, q = a.stage;
  if (a.kind == ActionKind::kOptimizerStep) return Status::OK();
  if (a.kind == ActionKind::kGradReduce && q == -1) return Status::OK();
  if (q < 0 || q >= Q || !ctx_.stage->Holds(q) || a.microbatch < 0) {
    return Status::InvalidArgument(
        fmt::format("{}: stage {} is not one of rank {}'s", Describe(index, a), q, ctx_.rank));
  }
  if (!IsTransfer(a)) return Status::OK();
  const int64_t peer_stage = PeerStage(a);
  if (peer_stage < 0 || peer_stage >= Q)
    return Status::InvalidArgument(fmt::format("{}: stage {} has no neighbour there", Describe(index, a), q));
  const LaunchRank& me = ctx_.launch->ranks[static_cast<size_t>(ctx_.rank)];
  const int64_t replica = a.peer_replica == Action::kSameReplica ? me.replica : a.peer_replica;
  const int64_t position = StagePosition(ctx_.layout.schedule, peer_stage, ctx_.layout.positions);
  const int64_t peer = ranks.At(position, replica, me.tp_rank, me.cp_rank);
  if (peer < 0) {
    return Status::InvalidArgument(
        fmt::format("{}: launch.yaml has no rank at pipeline position {}, replica {}, tp rank {}", Describe(index, a),
                    position, replica, me.tp_rank));
  }
  peer_[index] = static_cast<int>(peer);
  return Status::OK();
}

// What each reduce sums at once: without the overlapped reducer, the whole bucket (AR without a
// stage: one message) or the stage's segment; with it, the last backward (B, or W when split) of
// each chunk a reduce covers, after that chunk's previous reduce, queues its layers' segments as
// their gradients become final, and a chunk without one is summed at the reduce.
void ProgramInterpreter::PlanReduces() {
  last_backward_.assign(program_.size(), false);
  reduce_now_.clear();
  std::map<int64_t, size_t> since;  // chunk -> first action index after its previous reduce
  for (size_t a = 0; a < program_.size(); ++a) {
    const Action& ar = program_[a];
    if (ar.kind != ActionKind::kGradReduce) continue;
    if (!ctx_.reducer->overlapped()) {
      reduce_now_[a].push_back(ar.stage == -1 ? BucketSegment{0, ctx_.stage->grad_elems()}
                                              : ctx_.stage->ChunkOf(ar.stage).segment);
      continue;
    }
    for (const Stage::Chunk& c : ctx_.stage->chunks()) {
      if (ar.stage != -1 && ar.stage != c.q) continue;
      bool found = false;
      for (size_t i = a; i-- > since[c.q] && !found;) {
        const Action& x = program_[i];
        found = x.stage == c.q &&
                (x.kind == ActionKind::kBackwardWeight || (x.kind == ActionKind::kBackwardInput && !split_w_));
        if (found) last_backward_[i] = true;
      }
      if (!found) reduce_now_[a].push_back(c.segment);
      since[c.q] = a + 1;
    }
  }
}

int64_t ProgramInterpreter::Tag(int64_t stage, int dir, int64_t j) const {
  const int64_t pass_microbatches = pass_.iterations * ctx_.layout.microbatches;
  return ((pass_.first_iteration * (ctx_.layout.stages + 1) + stage) * pass_microbatches + j) * 2 + dir;
}

std::vector<Saved>& ProgramInterpreter::SavedOf(int64_t q, int64_t j) {
  auto it = saved_.find({q, j});
  if (it == saved_.end())
    it = saved_.emplace(Key{q, j}, std::vector<Saved>(ctx_.stage->ChunkOf(q).kernels.size())).first;
  return it->second;
}

void ProgramInterpreter::ZeroGradsIfStepped() {
  if (!zero_grads_) return;
  ctx_.stage->ZeroGrads();
  zero_grads_ = false;
}

Status ProgramInterpreter::RunPass(const PassSpec& pass, PassFigures* figures) {
  if (microbatches_ > pass.iterations * ctx_.layout.microbatches) {
    return Status::InvalidArgument(
        fmt::format("the program of rank {} names microbatch {}, but a pass of {} iteration(s) has {}", ctx_.rank,
                    microbatches_ - 1, pass.iterations, pass.iterations * ctx_.layout.microbatches));
  }
  pass_ = pass;
  fig_ = figures;
  *fig_ = PassFigures();
  fig_->loss_sum.assign(static_cast<size_t>(pass.iterations), 0.0);
  fig_->done_s.assign(static_cast<size_t>(pass.iterations), 0.0);
  ZeroGradsIfStepped();
  if (stash_)
    stash_->Begin(pass.first_iteration *
                  ctx_.layout.microbatches);  // a resumed run's weights hold the earlier minibatches
  forwards_left_ =
      std::count_if(program_.begin(), program_.end(), [](const Action& x) { return x.kind == ActionKind::kForward; });
  fig_->start_s = MonotonicSeconds();
  for (size_t i = 0; i < program_.size(); ++i) {
    Status s = Execute(i, program_[i]);
    if (!s.ok()) return s.WithContext(Describe(i, program_[i]));  // every failure names the action it stopped at
  }
  return FinishPass();
}

Status ProgramInterpreter::Execute(size_t index, const Action& a) {
  switch (a.kind) {
    case ActionKind::kForward: return Forward(a);
    case ActionKind::kBackwardInput: return Backward(index, a);
    case ActionKind::kBackwardWeight: return Weight(index, a);
    case ActionKind::kRecvActivation: return Receive(index, a, true);
    case ActionKind::kRecvGrad: return Receive(index, a, false);
    case ActionKind::kSendActivation: return Send(index, a, true);
    case ActionKind::kSendGrad: return Send(index, a, false);
    case ActionKind::kGradReduce: return Reduce(index, a);
    case ActionKind::kOptimizerStep: return Step();
  }
  return Status::Internal("unknown action kind");
}

// The sends' buffers are released once posted sends complete; nothing may be left half done.
Status ProgramInterpreter::FinishPass() {
  const double c0 = MonotonicSeconds();
  PLANNER_RETURN_IF_ERROR(ctx_.pipe->FlushSends());
  fig_->comm_s += MonotonicSeconds() - c0;
  ctx_.record->Trace("flush sends", c0, MonotonicSeconds() - c0, 1);
  sent_.clear();
  saved_.clear();
  if (!local_.empty())
    return Status::Internal(
        "the program leaves a transfer between this rank's own chunks unpaired (a send without its receive)");
  for (const auto* box : {&activations_in_, &activations_out_, &grads_in_, &grads_out_}) {
    if (!box->empty()) {
      const Key k = box->begin()->first;
      return Status::Internal(fmt::format(
          "the program leaves a transfer of stage {} microbatch {} unpaired (a receive without its compute, or "
          "a computed output without its send)",
          k.first, k.second));
    }
  }
  return Status::OK();
}

void ProgramInterpreter::TeacherBatch(int64_t j, std::vector<float>* inputs, std::vector<float>* targets) const {
  const int64_t b = ctx_.launch->microbatch_size, m = ctx_.layout.microbatches;
  const int64_t first_sample = IterationOf(j) * ctx_.launch->global_batch + (sample_offset_ + j % m) * b;
  std::vector<float> in, tg;
  for (int64_t smp = 0; smp < b; ++smp) {
    TeacherSample(*ctx_.model, ctx_.launch->run.seed, first_sample + smp, &in, &tg);
    inputs->insert(inputs->end(), in.begin(), in.end());
    targets->insert(targets->end(), tg.begin(), tg.end());
  }
  const SeqParallel& seq = ctx_.stage->seq();
  if (seq.cp > 1) {  // the CP rank's chunks of every sample (token ids and next-token targets)
    const int64_t s = ctx_.model->layers.front().in_shape[0];
    *inputs = CpSliceTokens(*inputs, s, seq.cp, seq.cp_rank);
    *targets = CpSliceTokens(*targets, s, seq.cp, seq.cp_rank);
  }
}

Status ProgramInterpreter::Forward(const Action& a) {
  const int64_t q = a.stage, j = a.microbatch, Q = ctx_.layout.stages;
  Stage::Chunk& ch = ctx_.stage->ChunkOf(q);
  std::vector<Saved>& sv = SavedOf(q, j);
  ctx_.tp_group->SetIteration(
      IterationOf(j));  // PipeDream's pass spans iterations: label each microbatch's calls with its own
  std::vector<float> inputs, targets;
  if (q == 0 || q == Q - 1) TeacherBatch(j, &inputs, &targets);
  Tensor x;
  if (q == 0) {
    x = Tensor::FromVector(ctx_.stage->InShape(q), inputs).To(ctx_.stage->device());
  } else {
    auto it = activations_in_.find({q, j});
    if (it == activations_in_.end()) return Status::Internal("forward before the receive of its activation");
    x = std::move(it->second);
    activations_in_.erase(it);
  }
  if (q == Q - 1) ch.kernels.back()->SetTargets(Tensor::FromVector({static_cast<int64_t>(targets.size())}, targets));
  if (stash_) PLANNER_RETURN_IF_ERROR(SaveWeights(q, j));
  const double c0 = MonotonicSeconds();
  if (ctx_.comm_only) {
    x = Tensor::Zeros(ctx_.stage->OutShape(q), ctx_.stage->device(),
                      ctx_.stage->storage());  // what the stage would send, without computing it
  } else {
    for (size_t i = 0; i < ch.kernels.size(); ++i) {
      Tensor y;
      PLANNER_RETURN_IF_ERROR(ch.kernels[i]->Forward(x, &y, &sv[i]));
      x = y;
    }
  }
  if (stash_) stash_->AfterForward(--forwards_left_ == 0);
  fig_->compute_s += MonotonicSeconds() - c0;
  ctx_.record->Trace(fmt::format("F{}", j), c0, MonotonicSeconds() - c0, 0);
  if (q == Q - 1 && !ctx_.comm_only) {
    const std::vector<float> per_sample = x.ToVector();
    for (int64_t smp = 0; smp < ctx_.launch->microbatch_size; ++smp)
      fig_->loss_sum[static_cast<size_t>(IterationOf(j) - pass_.first_iteration)] +=
          per_sample[static_cast<size_t>(smp)];
  } else if (q < Q - 1) {
    activations_out_[{q, j}] = x;
  }
  return Status::OK();
}

Status ProgramInterpreter::Backward(size_t index, const Action& a) {
  const int64_t q = a.stage, j = a.microbatch, Q = ctx_.layout.stages, b = ctx_.launch->microbatch_size;
  Stage::Chunk& ch = ctx_.stage->ChunkOf(q);
  std::vector<Saved>& sv = SavedOf(q, j);
  ctx_.tp_group->SetIteration(IterationOf(j));
  Tensor dy;
  if (q == Q - 1) {
    dy = Tensor::Zeros({b, 1});
    const double scale = ctx_.scaler != nullptr ? ctx_.scaler->scale() : 1.0;  // fp16: the loss scale
    for (int64_t smp = 0; smp < b; ++smp)
      dy.data()[smp] =
          static_cast<float>(scale / static_cast<double>(ctx_.launch->global_batch));  // d(mean loss) / d(sample loss)
    dy = dy.To(ctx_.stage->device());
  } else {
    auto it = grads_in_.find({q, j});
    if (it == grads_in_.end()) return Status::Internal("backward before the receive of its output's gradient");
    dy = std::move(it->second);
    grads_in_.erase(it);
    if (vsync_ && TakeTag(&grad_tags_, q, j) != stash_->TagOf(j)) {
      return Status::Internal(fmt::format(
          "vertical sync: the gradient of microbatch {} came back without the version tag its forward ran with ({})", j,
          stash_->TagOf(j)));
    }
  }
  if (stash_) PLANNER_RETURN_IF_ERROR(stash_->Enter(j));  // backward on the weights its forward used
  ZeroGradsIfStepped();
  const double c0 = MonotonicSeconds();
  if (ctx_.comm_only) {
    dy = q > 0 ? Tensor::Zeros(ctx_.stage->InShape(q), ctx_.stage->device(), ctx_.stage->storage()) : Tensor();
    if (last_backward_[index])
      for (const BucketSegment& s : ch.layer_segments) ctx_.reducer->Enqueue(s);
  } else {
    for (size_t i = ch.kernels.size(); i-- > 0;) {
      Tensor dx;
      PLANNER_RETURN_IF_ERROR(ch.kernels[i]->BackwardInput(dy, &dx, &sv[i]));
      if (!split_w_) {
        PLANNER_RETURN_IF_ERROR(ch.kernels[i]->BackwardWeight(&sv[i]));
        if (last_backward_[index]) ctx_.reducer->Enqueue(ch.layer_segments[i]);
      }
      dy = dx;
    }
  }
  fig_->compute_s += MonotonicSeconds() - c0;
  if (stash_) stash_->Leave(j);  // the latest weights back
  ctx_.record->Trace(fmt::format("B{}", j), c0, MonotonicSeconds() - c0, 0);
  if (!split_w_) saved_.erase({q, j});
  const int64_t m = ctx_.layout.microbatches;
  if (q == 0 && j % m == m - 1)
    fig_->done_s[static_cast<size_t>(IterationOf(j) - pass_.first_iteration)] = MonotonicSeconds() - fig_->start_s;
  if (q > 0) grads_out_[{q, j}] = dy;
  return Status::OK();
}

// W: the weight gradients ZB-H1 deferred.
Status ProgramInterpreter::Weight(size_t index, const Action& a) {
  Stage::Chunk& ch = ctx_.stage->ChunkOf(a.stage);
  std::vector<Saved>& sv = SavedOf(a.stage, a.microbatch);
  ctx_.tp_group->SetIteration(IterationOf(a.microbatch));
  ZeroGradsIfStepped();
  const double c0 = MonotonicSeconds();
  for (size_t i = ch.kernels.size(); i-- > 0;) {
    if (!ctx_.comm_only) PLANNER_RETURN_IF_ERROR(ch.kernels[i]->BackwardWeight(&sv[i]));
    if (last_backward_[index]) ctx_.reducer->Enqueue(ch.layer_segments[i]);
  }
  fig_->compute_s += MonotonicSeconds() - c0;
  ctx_.record->Trace(fmt::format("W{}", a.microbatch), c0, MonotonicSeconds() - c0, 0);
  saved_.erase({a.stage, a.microbatch});
  return Status::OK();
}

// RA q.j: the activation entering stage q (tag of (q, 0)); RG q.j: the gradient of q's output,
// sent back by stage q + 1 (tag of (q + 1, 1)).
Status ProgramInterpreter::Receive(size_t index, const Action& a, bool activation) {
  const int64_t q = a.stage, j = a.microbatch;
  const int peer = peer_[index];
  const int64_t tag = activation ? Tag(q, 0, j) : Tag(q + 1, 1, j);
  const std::vector<int64_t> shape = activation ? ctx_.stage->InShape(q) : ctx_.stage->OutShape(q);
  if (peer == ctx_.rank) {  // from this rank's other chunk (DualPipeV's stages p - 1 and p): handed over, never posted
    auto it = local_.find(tag);
    if (it == local_.end())
      return Status::Internal("a receive from this rank's own chunk before the send that produces it");
    Keep(activation, q, j, shape, std::move(it->second));
    local_.erase(it);
    return Status::OK();
  }
  // Activations and their gradients travel in the stage's storage dtype, as 4-byte words of their real
  // bytes (a 16-bit message of an odd element count lands in a buffer one element longer).
  const DType dt = vsync_ ? DType::kFp32 : ctx_.stage->storage();
  const int64_t n = vsync_ ? Elements(shape) + 1 : Elements(shape);
  const bool pad = DTypeBytes(dt) == 2 && n % 2 == 1;
  Tensor t = pool_.Get(vsync_ ? std::vector<int64_t>{n}
                       : pad  ? std::vector<int64_t>{n + 1}
                              : shape,
                       ctx_.stage->device(), dt);
  const double c0 = MonotonicSeconds();
  PLANNER_RETURN_IF_ERROR(ctx_.pipe->Recv(static_cast<float*>(t.raw()), MessageWords(t), peer, tag));
  if (pad) t = t.View(0, shape);
  const double c1 = MonotonicSeconds();
  ctx_.record->transfers().recvs.push_back({tag, peer, c0 - ctx_.clock_offset_s, c1 - ctx_.clock_offset_s});
  fig_->comm_s += c1 - c0;
  ctx_.record->Trace(fmt::format("recv {}{}.{}", activation ? 'F' : 'B', q, j), c0, c1 - c0, 1);
  Keep(activation, q, j, shape, t);
  return Status::OK();
}

// A received message kept for its compute (vertical sync: the tag split off and kept beside it).
void ProgramInterpreter::Keep(bool activation, int64_t q, int64_t j, const std::vector<int64_t>& shape, Tensor t) {
  if (vsync_) {
    int64_t tag = -1;
    t = SplitTag(t, shape, &tag);
    (activation ? act_tags_ : grad_tags_)[{q, j}] = tag;
  }
  (activation ? activations_in_ : grads_in_)[{q, j}] = std::move(t);
}

int64_t ProgramInterpreter::TakeTag(std::map<Key, int64_t>* tags, int64_t q, int64_t j) {
  auto it = tags->find({q, j});
  if (it == tags->end()) return -1;
  const int64_t tag = it->second;
  tags->erase(it);
  return tag;
}

// Before F q.j: the weights it runs on (weight stashing; vertical sync: the tag's version, the input
// stage's latest at stage 0, else the one that came with the activation).
Status ProgramInterpreter::SaveWeights(int64_t q, int64_t j) {
  int64_t tag = stash_->version();
  if (vsync_ && q > 0) {
    tag = TakeTag(&act_tags_, q, j);
    if (tag < 0)
      return Status::Internal(
          fmt::format("vertical sync: the activation of microbatch {} came without its version tag", j));
  }
  if (vsync_ && tag >= (int64_t{1} << 24)) {
    return Status::NotSupported(fmt::format(
        "vertical sync: version {} does not fit the tag's float (2^24 minibatches); run fewer iterations", tag));
  }
  return stash_->Save(j, tag);
}

// SA q.j: F's output to stage q + 1 (tag of (q + 1, 0)); SG q.j: B's input gradient to stage
// q - 1 (tag of (q, 1)). The call's own time counts as communication: an eager transport copies
// the message into shared memory here (runtime/comm/mpi_comm.cc).
Status ProgramInterpreter::Send(size_t index, const Action& a, bool activation) {
  const int64_t q = a.stage, j = a.microbatch;
  auto& box = activation ? activations_out_ : grads_out_;
  auto it = box.find({q, j});
  if (it == box.end())
    return Status::Internal(activation ? "send before the forward that computes it"
                                       : "send before the backward that computes it");
  Tensor t = std::move(it->second);
  box.erase(it);
  if (vsync_) t = WithTag(t, stash_->TagOf(j));  // the minibatch's version travels with it
  const int peer = peer_[index];
  const int64_t tag = activation ? Tag(q + 1, 0, j) : Tag(q, 1, j);
  if (peer == ctx_.rank) {
    local_[tag] = std::move(t);
    return Status::OK();
  }
  const double s0 = MonotonicSeconds();
  if (t.dtype() != (vsync_ ? DType::kFp32 : ctx_.stage->storage())) {
    return Status::Internal(fmt::format("a pipeline message in {} where the run's transfers are {}",
                                        DTypeName(t.dtype()), DTypeName(ctx_.stage->storage())));
  }
  t = WordAligned(t);
  ctx_.record->transfers().sends.push_back(
      {tag, IterationOf(j), q, t.bytes(), activation ? 0 : 1, peer, s0 - ctx_.clock_offset_s});
  PLANNER_RETURN_IF_ERROR(ctx_.pipe->Send(static_cast<const float*>(t.raw()), MessageWords(t), peer, tag));
  const double s1 = MonotonicSeconds();
  ctx_.record->Trace(fmt::format("send {}{}.{} {}B", activation ? 'F' : 'B', activation ? q + 1 : q - 1, j, t.bytes()),
                     s0, s1 - s0, 1);
  fig_->comm_s += s1 - s0;
  sent_.push_back(std::move(t));
  return Status::OK();
}

Status ProgramInterpreter::Reduce(size_t index, const Action& a) {
  DataParallelReducer& red = *ctx_.reducer;
  if (red.group_size() <= 1) return Status::OK();
  const double c0 = MonotonicSeconds();
  if (red.overlapped()) PLANNER_RETURN_IF_ERROR(red.Wait());  // the segments still in flight: the exposed part
  for (const BucketSegment& s : reduce_now_[index]) PLANNER_RETURN_IF_ERROR(red.AllReduce(s));
  const double dur = MonotonicSeconds() - c0;
  fig_->comm_s += dur;
  // The transfer table times the iteration's reduce of the whole bucket.
  if (a.stage == -1 && !red.overlapped() && ctx_.stage->grad_elems() > 0) {
    ctx_.record->transfers().allreduces.push_back(
        {pass_.first_iteration, ctx_.stage->grad_elems() * 4, c0 - ctx_.clock_offset_s, dur});
  }
  ctx_.record->Trace(red.overlapped() ? "dp all-reduce (exposed wait)" : "dp all-reduce", c0, dur, 1);
  if (red.overlapped())
    ctx_.record->Trace("dp all-reduce busy", c0, red.TakeBusySeconds(),
                       2);  // summed segment time on the reducer thread
  return Status::OK();
}

// fp16: the gradients (after the data-parallel reduce, as Megatron unscales in its optimizer) divided
// by the loss scale; whether any worker's overflowed, agreed in one all-reduce (max of a flag); the
// scaler then skips the step (and halves the scale past its hysteresis) or applies it.
Status ProgramInterpreter::UnscaleAgreed(bool* apply) {
  float found = UnscaleAndCheck(ctx_.stage->params(), 1.0 / ctx_.scaler->scale()) ? 1.0f : 0.0f;
  if (ctx_.workers != nullptr && ctx_.workers->size() > 1)
    PLANNER_RETURN_IF_ERROR(ctx_.workers->AllReduce(&found, 1, ReduceOp::kMax));
  *apply = ctx_.scaler->Update(found > 0);
  return Status::OK();
}

Status ProgramInterpreter::Step() {
  Stage& st = *ctx_.stage;
  if (ctx_.edp != nullptr && ctx_.edp->size() > 1 &&
      st.expert_grad_elems() > 0) {  // expert gradients: over the EDP group
    const double e0 = MonotonicSeconds();
    PLANNER_RETURN_IF_ERROR(ctx_.edp->AllReduce(st.expert_bucket(), st.expert_grad_elems(), ReduceOp::kSum));
    fig_->comm_s += MonotonicSeconds() - e0;
    ctx_.record->Trace("edp all-reduce (experts)", e0, MonotonicSeconds() - e0, 1);
  }
  if (capture_ != nullptr) {
    capture_->clear();
    for (Param* prm : ctx_.stage->params())
      capture_->push_back({prm->name, prm->tp_sharded, prm->grad.ToVector(), prm->expert});
    capture_ = nullptr;
  }
  const double c0 = MonotonicSeconds();
  bool apply = true;
  if (!ctx_.comm_only && ctx_.scaler != nullptr) PLANNER_RETURN_IF_ERROR(UnscaleAgreed(&apply));
  if (!ctx_.comm_only && apply) PLANNER_RETURN_IF_ERROR(ctx_.optimizer->Step(ctx_.stage->params()));
  if (stash_) stash_->Stepped();  // the new latest version (kept under vertical sync)
  fig_->compute_s += MonotonicSeconds() - c0;
  zero_grads_ = true;
  return Status::OK();
}

}  // namespace planner
