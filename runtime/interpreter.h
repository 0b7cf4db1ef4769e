// The program interpreter: runs a rank's program (spec/program.h) on its
// stage, one pass at a time (an iteration; PipeDream's one pass covers the
// rest of the run). It depends on the action list only, plus launch.yaml's
// rank table for the peers: the rank at the peer stage's pipeline position,
// the action's peer replica (this rank's without one) and this rank's tp rank.
//   F   forward of every layer of the chunk, keeping a Saved per layer and
//       microbatch; stage 0 reads the teacher's inputs, the last stage its
//       targets and sums the per-sample losses.
//   B   backward-input of every layer in reverse (and backward-weight unless
//       the program has W actions: then W does it); the last stage seeds the
//       gradient of the global batch's mean loss (1/B per sample).
//   RA, RG  blocking receives into reused buffers; SA, SG  non-blocking sends
//       of what F / B produced (buffers live until the pass's flush). A transfer
//       whose peer is this rank (DualPipeV: stages p - 1 and p share the last
//       rank) is handed over in memory, by tag, and never posted.
//   AR  the data-parallel reduce of the stage's segment of the gradient bucket
//       (AR without a stage: the whole bucket, one message); with the
//       overlapped reducer the layers' segments were queued during each
//       covered chunk's last backward before it, and AR waits for them.
//   OPT the optimizer step; the next backward accumulates from zero.
// Weight stashing is on when the program steps the optimizer before its end
// (PipeDream), so that a microbatch's forward and backward may meet different
// weight versions: runtime/weight_stash.h. With launch.yaml's vertical_sync,
// every activation and gradient message carries one more element, its
// minibatch's version tag (made at stage 0: its latest version at F0.j); each
// stage runs F and B of j on its own version of that tag.
// Every message's tag is unique in the run and computed alike on both sides:
// ((first iteration of the pass x (Q + 1) + the receiving stage of an
// activation / the sending stage of a gradient) x the pass's microbatches +
// microbatch) x 2 + direction. docs/runtime.md ("The executor's parts").
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <utility>
#include <vector>

#include "common/status.h"
#include "runtime/dp_reducer.h"
#include "runtime/kernels/mixed_precision.h"
#include "runtime/kernels/optimizer.h"
#include "runtime/launch_layout.h"
#include "runtime/rank_comms.h"
#include "runtime/run_record.h"
#include "runtime/stage.h"
#include "runtime/weight_stash.h"
#include "spec/program.h"

namespace planner {

struct PassSpec {
  int64_t first_iteration = 0;
  int64_t iterations = 1;  // that its microbatches span (microbatch j belongs to first_iteration + j / m)
};

struct PassFigures {
  double start_s = 0;            // MonotonicSeconds() when the pass started
  std::vector<double> loss_sum;  // per iteration of the pass: this rank's per-sample losses summed (last stage)
  std::vector<double> done_s;    // per iteration: when stage 0 finished its last microbatch's backward, from start_s
  double compute_s = 0, comm_s = 0;
};

struct InterpreterContext {
  const LaunchPlan* launch = nullptr;
  const ModelSpec* model = nullptr;
  LaunchLayout layout;
  int64_t rank = 0;
  Stage* stage = nullptr;
  Communicator* pipe = nullptr;
  CommTpGroup* tp_group = nullptr;
  DataParallelReducer* reducer = nullptr;
  Communicator* edp = nullptr;  // MoE: the expert-data-parallel group, summing the expert bucket before the step
  Optimizer* optimizer = nullptr;
  RunRecord* record = nullptr;
  double clock_offset_s = 0;
  bool comm_only = false;  // zeros instead of every layer, no optimizer step
  // fp16 runs: dynamic loss scaling. The loss gradient's seed is multiplied by scaler->scale(); before
  // the step the (reduced) gradients are unscaled and checked, and one all-reduce over `workers` (every
  // worker rank; each steps once per iteration) agrees whether any rank overflowed: all skip or all step.
  LossScaler* scaler = nullptr;
  Communicator* workers = nullptr;
};

// Receive buffers reused once nothing else holds them (a freshly allocated buffer costs page
// faults while the transport copies into it).
class BufferPool {
 public:
  Tensor Get(const std::vector<int64_t>& shape, Device dev, DType dtype = DType::kFp32);

 private:
  std::vector<Tensor> pool_;
};

class ProgramInterpreter {
 public:
  // Checks `program` against the rank (every stage it computes is one of its chunks, every
  // transfer has a neighbour stage and a peer rank) and reads what it implies: W split from B,
  // weight stashing, each reduce's last backward per chunk.
  Status Init(const InterpreterContext& context, std::vector<Action> program);
  // The weight stash, when the program needs one.
  const WeightStash* stash() const { return stash_.get(); }
  // Copies the gradients the next optimizer step applies into *out (every parameter of the rank).
  void CaptureNextStep(std::vector<NamedGradient>* out) { capture_ = out; }
  Status RunPass(const PassSpec& pass, PassFigures* figures);

 private:
  using Key = std::pair<int64_t, int64_t>;  // (virtual stage, microbatch)

  Status CheckAction(size_t index, const Action& a, const RankTable& ranks);
  void PlanReduces();
  Status Execute(size_t index, const Action& a);
  Status Forward(const Action& a);
  Status Backward(size_t index, const Action& a);
  Status Weight(size_t index, const Action& a);
  Status Receive(size_t index, const Action& a, bool activation);
  Status Send(size_t index, const Action& a, bool activation);
  Status Reduce(size_t index, const Action& a);
  Status UnscaleAgreed(bool* apply);
  Status Step();
  Status FinishPass();
  void Keep(bool activation, int64_t q, int64_t j, const std::vector<int64_t>& shape, Tensor t);
  static int64_t TakeTag(std::map<Key, int64_t>* tags, int64_t q, int64_t j);
  Status SaveWeights(int64_t q, int64_t j);

  void TeacherBatch(int64_t j, std::vector<float>* inputs, std::vector<float>* targets) const;
  std::vector<Saved>& SavedOf(int64_t q, int64_t j);
  void ZeroGradsIfStepped();
  int64_t Tag(int64_t stage, int dir, int64_t j) const;
  int64_t IterationOf(int64_t j) const { return pass_.first_iteration + j / ctx_.layout.microbatches; }

  InterpreterContext ctx_;
  std::vector<Action> program_;
  std::vector<int> peer_;            // per action: the peer rank of a transfer
  std::vector<bool> last_backward_;  // per action: queue its layers' segments (overlapped reducer)
  std::map<size_t, std::vector<BucketSegment>> reduce_now_;  // per reduce: the segments it sums itself
  bool split_w_ = false;
  int64_t microbatches_ = 0;  // the program's: its largest microbatch + 1
  bool zero_grads_ = true;    // the optimizer stepped since the gradients were last zeroed
  std::unique_ptr<WeightStash> stash_;
  int64_t forwards_left_ = 0;                    // F actions still to run in the pass
  bool vsync_ = false;                           // vertical sync: messages carry their minibatch's version tag
  std::map<Key, int64_t> act_tags_, grad_tags_;  // vertical sync: the tags received with activations_in_ / grads_in_
  std::vector<NamedGradient>* capture_ = nullptr;
  int64_t sample_offset_ = 0;  // microbatches of the lower replicas (data parallelism)
  // The pass being run.
  PassSpec pass_;
  PassFigures* fig_ = nullptr;
  std::map<Key, std::vector<Saved>> saved_;
  std::map<Key, Tensor> activations_in_, activations_out_, grads_in_, grads_out_;
  std::vector<Tensor> sent_;         // alive until FlushSends
  std::map<int64_t, Tensor> local_;  // by tag: sent to this rank itself (DualPipeV's stages p - 1 and p share a rank)
  BufferPool pool_;
};

}  // namespace planner
