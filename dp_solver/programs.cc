#include "dp_solver/programs.h"

#include <algorithm>
#include <deque>
#include <functional>
#include <map>
#include <set>
#include <tuple>

#include <fmt/format.h>

#include "dp_solver/schedule_sim.h"

namespace planner {

namespace {

// The plan's predicted stage times as simulator stages (as the runtime derived them).
std::vector<SimStage> SimStagesOf(const LaunchPlan& L) {
  std::vector<SimStage> st;
  for (const auto& s : L.stages) {
    SimStage x;
    // Plans from older codegen carry only the total: split it 1:1:1.
    const bool split = s.predicted_forward_s + s.predicted_backward_input_s + s.predicted_backward_weight_s > 0;
    x.forward_s = split ? s.predicted_forward_s : s.predicted_compute_s / 3;
    x.backward_input_s = split ? s.predicted_backward_input_s : s.predicted_compute_s / 3;
    x.backward_weight_s = split ? s.predicted_backward_weight_s : s.predicted_compute_s / 3;
    x.send_s = s.predicted_p2p_s;
    if (x.forward_s + x.backward_input_s + x.backward_weight_s <= 0)
      x.forward_s = x.backward_input_s = x.backward_weight_s = 1;
    st.push_back(x);
  }
  return st;
}

// Device `device`'s compute operations of a simulated schedule, in simulated start order.
std::vector<SimEvent> DeviceOrder(const SimResult& r, int64_t device) {
  std::vector<SimEvent> out;
  for (const auto& e : r.events) {
    if (e.device == device && e.kind != 'C') out.push_back(e);
  }
  std::stable_sort(out.begin(), out.end(), [](const SimEvent& x, const SimEvent& y) { return x.start_s < y.start_s; });
  return out;
}

Action Act(ActionKind k, int64_t stage, int64_t mb, int32_t peer = Action::kSameReplica) {
  Action a;
  a.kind = k;
  a.stage = static_cast<int32_t>(stage);
  a.microbatch = static_cast<int32_t>(mb);
  a.peer_replica = peer;
  return a;
}

// How one device's compute events become actions.
struct Emitter {
  int64_t stages = 1;                             // Q, virtual stages
  std::function<int32_t(int64_t, int64_t)> peer;  // (stage, microbatch) -> replica of that stage, or kSameReplica
  bool async = false;                             // per-backward AR<stage> (when replicated) and OPT
  bool reduce_after_backward = false;             // async: the stage has more than one replica
  std::vector<Action> held;  // sends of held events (SimEvent::held), posted after the next unheld one

  void Append(const SimEvent& e, std::vector<Action>* out) {
    const int64_t q = e.stage, j = e.microbatch;
    std::vector<Action>* sends = e.held ? &held : out;
    if (e.kind == 'F') {
      if (q > 0) out->push_back(Act(ActionKind::kRecvActivation, q, j, peer(q - 1, j)));
      out->push_back(Act(ActionKind::kForward, q, j));
      if (q + 1 < stages) sends->push_back(Act(ActionKind::kSendActivation, q, j, peer(q + 1, j)));
    } else if (e.kind == 'B') {
      if (q + 1 < stages) out->push_back(Act(ActionKind::kRecvGrad, q, j, peer(q + 1, j)));
      out->push_back(Act(ActionKind::kBackwardInput, q, j));
      // The input gradient leaves before the replicas' reduce: a replica still waiting for its
      // next activation (which the previous stage sends only after this gradient) must not be
      // needed in the reduce first (a replicated stage after a single one would deadlock).
      if (q > 0) sends->push_back(Act(ActionKind::kSendGrad, q, j, peer(q - 1, j)));
      if (async) {
        if (reduce_after_backward) out->push_back(Act(ActionKind::kGradReduce, q, 0));
        out->push_back(Act(ActionKind::kOptimizerStep, -1, 0));
      }
    } else {
      out->push_back(Act(ActionKind::kBackwardWeight, q, j));
    }
    if (!e.held) {
      out->insert(out->end(), held.begin(), held.end());
      held.clear();
    }
  }
};

// The message a transfer action sends or receives: (activation?, the stage it enters or leaves, microbatch).
std::tuple<bool, int64_t, int64_t> MessageOf(const Action& a) {
  const bool act = a.kind == ActionKind::kSendActivation || a.kind == ActionKind::kRecvActivation;
  return {act, std::max<int64_t>(a.stage, PeerStage(a)), a.microbatch};
}

// NCCL matches a pair of ranks' messages in posting order (spec/program_check.h). DualPipeV's ranks
// exchange two streams per pair (chunk 0's activations one way, chunk 1's gradients the same way,
// and back), so each program's receives from a peer are put in the order the peer sends them: a
// receive only moves earlier, to just before the receive that needed it first (the checker then
// proves the result deadlock-free). Uniform programs, one per position (index = position).
void AlignReceives(const LaunchPlan& L, std::vector<RankProgram>* progs) {
  const int64_t p = static_cast<int64_t>(progs->size());
  for (int64_t b = 0; b < p; ++b) {
    for (int64_t a = 0; a < p; ++a) {
      if (a == b) continue;
      std::vector<std::tuple<bool, int64_t, int64_t>> order;  // a's sends to b, in a's order
      for (const Action& x : (*progs)[static_cast<size_t>(a)].actions) {
        const bool send = x.kind == ActionKind::kSendActivation || x.kind == ActionKind::kSendGrad;
        if (send && StagePosition(L.schedule, PeerStage(x), L.pp) == b) order.push_back(MessageOf(x));
      }
      std::map<std::tuple<bool, int64_t, int64_t>, Action> recv;
      auto& acts = (*progs)[static_cast<size_t>(b)].actions;
      auto from_a = [&](const Action& x) {
        const bool r = x.kind == ActionKind::kRecvActivation || x.kind == ActionKind::kRecvGrad;
        return r && StagePosition(L.schedule, PeerStage(x), L.pp) == a;
      };
      for (const Action& x : acts)
        if (from_a(x)) recv[MessageOf(x)] = x;
      std::vector<Action> out;
      size_t k = 0;
      std::set<std::tuple<bool, int64_t, int64_t>> done;
      for (const Action& x : acts) {
        if (!from_a(x)) {
          out.push_back(x);
          continue;
        }
        const auto key = MessageOf(x);
        while (!done.count(key) && k < order.size()) {  // a's sends up to this one, in a's order
          if (recv.count(order[k])) out.push_back(recv[order[k]]), done.insert(order[k]);
          ++k;
        }
        if (!done.count(key)) out.push_back(x), done.insert(key);
      }
      acts = std::move(out);
    }
  }
}

Status BuildUniform(const LaunchPlan& L, std::vector<RankProgram>* out) {
  SimResult r;
  PLANNER_RETURN_IF_ERROR(SimulateSchedule(L.schedule, SimStagesOf(L), L.pp, L.num_microbatches, true, &r));
  Emitter em;
  em.stages = static_cast<int64_t>(L.stages.size());
  em.peer = [](int64_t, int64_t) { return Action::kSameReplica; };
  for (int64_t pos = 0; pos < L.pp; ++pos) {
    RankProgram prog;
    prog.position = pos;
    prog.replica = -1;
    for (const SimEvent& e : DeviceOrder(r, pos)) em.Append(e, &prog.actions);
    if (L.dp * L.cp > 1) prog.actions.push_back(Act(ActionKind::kGradReduce, -1, 0));  // gradients summed over dp x cp
    prog.actions.push_back(Act(ActionKind::kOptimizerStep, -1, 0));
    out->push_back(std::move(prog));
  }
  if (L.schedule == Schedule::kDualPipeV) AlignReceives(L, out);
  return Status::OK();
}

// Per-stage replication simulated: devices go stage by stage, replica by replica (offset[q]: stage q's
// first), each keeping PipeDream's NOAM microbatches in flight; the asynchronous schedule over the run.
Status SimulateReplicatedLaunch(const LaunchPlan& L, std::vector<int64_t>* reps, std::vector<int64_t>* offset,
                                int64_t* microbatches, SimResult* r) {
  const bool async = L.schedule == Schedule::kPipeDream;
  if (L.microbatch_size < 1) return Status::InvalidArgument("launch plan: microbatch_size must be positive");
  const int64_t m = L.global_batch / L.microbatch_size;
  *microbatches = async ? std::max<int64_t>(1, L.run.iterations) * m : m;
  std::vector<int64_t> in_flight;
  int64_t after = 0;
  for (const auto& x : L.stages) after += x.replicas;
  for (const auto& x : L.stages) {
    offset->push_back(reps->empty() ? 0 : offset->back() + reps->back());
    reps->push_back(x.replicas);
    in_flight.push_back((after + x.replicas - 1) / x.replicas);
    after -= x.replicas;
  }
  return SimulateReplicated(SimStagesOf(L), *reps, in_flight, *microbatches, true, r);
}

Status BuildReplicated(const LaunchPlan& L, std::vector<RankProgram>* out) {
  const bool async = L.schedule == Schedule::kPipeDream;
  std::vector<int64_t> reps, offset;
  int64_t microbatches = 0;
  SimResult r;
  PLANNER_RETURN_IF_ERROR(SimulateReplicatedLaunch(L, &reps, &offset, &microbatches, &r));
  Emitter em;
  em.stages = static_cast<int64_t>(L.stages.size());
  em.peer = [&reps](int64_t q, int64_t j) { return static_cast<int32_t>(j % reps[static_cast<size_t>(q)]); };
  em.async = async;
  for (size_t q = 0; q < L.stages.size(); ++q) {
    em.reduce_after_backward = reps[q] > 1;
    for (int64_t k = 0; k < reps[q]; ++k) {
      RankProgram prog;
      prog.position = static_cast<int64_t>(q);
      prog.replica = k;
      for (const SimEvent& e : DeviceOrder(r, offset[q] + k)) em.Append(e, &prog.actions);
      // The last round's reduce for replicas without a microbatch in it (programs.h).
      if (async && reps[q] > 1 && k >= microbatches % reps[q] && microbatches % reps[q] != 0) {
        prog.actions.push_back(Act(ActionKind::kGradReduce, static_cast<int64_t>(q), 0));
        prog.actions.push_back(Act(ActionKind::kOptimizerStep, -1, 0));
      }
      if (!async) {
        if (reps[q] > 1) prog.actions.push_back(Act(ActionKind::kGradReduce, -1, 0));
        prog.actions.push_back(Act(ActionKind::kOptimizerStep, -1, 0));
      }
      out->push_back(std::move(prog));
    }
  }
  return Status::OK();
}

}  // namespace

Status PredictedTimeline(const LaunchPlan& L, SimResult* out, std::vector<int64_t>* stage_first_device) {
  stage_first_device->clear();
  if (L.stages.empty()) return Status::InvalidArgument("launch plan: no stages");
  if (PerStageReplication(L)) {
    std::vector<int64_t> reps;
    int64_t microbatches = 0;
    return SimulateReplicatedLaunch(L, &reps, stage_first_device, &microbatches, out);
  }
  return SimulateSchedule(L.schedule, SimStagesOf(L), L.pp, L.num_microbatches, true, out);
}

Status BuildPrograms(const LaunchPlan& L, std::vector<RankProgram>* out) {
  if (L.stages.empty()) return Status::InvalidArgument("launch plan: no stages");
  std::vector<RankProgram> progs;
  if (PerStageReplication(L)) {
    PLANNER_RETURN_IF_ERROR(BuildReplicated(L, &progs));
  } else {
    PLANNER_RETURN_IF_ERROR(BuildUniform(L, &progs));
  }
  *out = std::move(progs);
  return Status::OK();
}

}  // namespace planner
