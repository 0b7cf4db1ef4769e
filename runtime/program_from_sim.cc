// TEMPORARY ADAPTER (runtime/program_from_sim.h): the only file of runtime/ that uses dp_solver/.
#include "runtime/program_from_sim.h"

#include <algorithm>

#include "dp_solver/schedule_sim.h"
#include "runtime/launch_layout.h"

namespace planner {

namespace {

// The plan's predicted stage times as simulator stages; plans from older codegen carry only the
// total: split 1:1:1.
std::vector<SimStage> SimStagesOf(const LaunchPlan& L) {
  std::vector<SimStage> st;
  for (const auto& s : L.stages) {
    SimStage x;
    const bool split = s.predicted_forward_s + s.predicted_backward_input_s + s.predicted_backward_weight_s > 0;
    x.forward_s = split ? s.predicted_forward_s : s.predicted_compute_s / 3;
    x.backward_input_s = split ? s.predicted_backward_input_s : s.predicted_compute_s / 3;
    x.backward_weight_s = split ? s.predicted_backward_weight_s : s.predicted_compute_s / 3;
    x.send_s = s.predicted_p2p_s;
    if (x.forward_s + x.backward_input_s + x.backward_weight_s <= 0) x.forward_s = x.backward_input_s = x.backward_weight_s = 1;
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

// The simulator's round-robin order over `microbatches` with per-stage replication; device ids go
// stage by stage, replica by replica; each replica keeps PipeDream's NOAM microbatches in flight.
Status ReplicatedOrder(const LaunchPlan& L, const LaunchRank& me, int64_t microbatches, std::vector<SimEvent>* out) {
  std::vector<int64_t> reps, in_flight;
  int64_t after = 0, device = -1, offset = 0;
  for (const auto& x : L.stages) after += x.replicas;
  for (size_t q = 0; q < L.stages.size(); ++q) {
    const int64_t r = L.stages[q].replicas;
    reps.push_back(r);
    in_flight.push_back((after + r - 1) / r);
    if (static_cast<int64_t>(q) == me.stage) device = offset + me.replica;
    offset += r;
    after -= r;
  }
  SimResult res;
  PLANNER_RETURN_IF_ERROR(SimulateReplicated(SimStagesOf(L), reps, in_flight, microbatches, true, &res));
  *out = DeviceOrder(res, device);
  return Status::OK();
}

Action Make(ActionKind kind, int64_t q, int64_t j, int64_t peer_replica = Action::kSameReplica) {
  Action a;
  a.kind = kind;
  a.stage = static_cast<int32_t>(q);
  a.microbatch = static_cast<int32_t>(j);
  a.peer_replica = static_cast<int32_t>(peer_replica);
  return a;
}

// The actions of one compute event with its transfers (and PipeDream's reduce and step).
void AppendEvent(const LaunchPlan& L, const LaunchLayout& y, const SimEvent& ev, std::vector<Action>* out) {
  const int64_t q = ev.stage, j = ev.microbatch, Q = y.stages;
  // Per-stage replication: microbatch j runs on replica j mod r of every stage.
  auto replica_of = [&](int64_t stage) { return y.replicated ? j % L.stages[static_cast<size_t>(stage)].replicas : Action::kSameReplica; };
  if (ev.kind == 'F') {
    if (q > 0) out->push_back(Make(ActionKind::kRecvActivation, q, j, replica_of(q - 1)));
    out->push_back(Make(ActionKind::kForward, q, j));
    if (q < Q - 1) out->push_back(Make(ActionKind::kSendActivation, q, j, replica_of(q + 1)));
  } else if (ev.kind == 'B') {
    if (q < Q - 1) out->push_back(Make(ActionKind::kRecvGrad, q, j, replica_of(q + 1)));
    out->push_back(Make(ActionKind::kBackwardInput, q, j));
    if (q > 0) out->push_back(Make(ActionKind::kSendGrad, q, j, replica_of(q - 1)));
    if (y.async) {
      if (L.stages[static_cast<size_t>(q)].replicas > 1) out->push_back(Make(ActionKind::kGradReduce, q, 0));
      out->push_back(Make(ActionKind::kOptimizerStep, -1, 0));
    }
  } else {
    out->push_back(Make(ActionKind::kBackwardWeight, q, j));
  }
}

}  // namespace

Status ProgramForRank(const LaunchPlan& L, int64_t rank, int64_t iterations, std::vector<Action>* out) {
  LaunchLayout y;
  PLANNER_RETURN_IF_ERROR(LayoutOf(L, &y));
  const LaunchRank& me = L.ranks[static_cast<size_t>(rank)];
  std::vector<SimEvent> order;
  if (!y.replicated) {
    SimResult r;
    PLANNER_RETURN_IF_ERROR(SimulateSchedule(y.schedule, SimStagesOf(L), L.pp, L.num_microbatches, true, &r));
    order = DeviceOrder(r, me.stage);
  } else {
    PLANNER_RETURN_IF_ERROR(ReplicatedOrder(L, me, (y.async ? iterations : 1) * y.microbatches, &order));
  }
  out->clear();
  for (const SimEvent& ev : order) AppendEvent(L, y, ev, out);
  if (!y.async) {
    const int64_t group = y.replicated ? L.stages[static_cast<size_t>(me.stage)].replicas : L.dp;
    if (group > 1) out->push_back(Make(ActionKind::kGradReduce, -1, 0));
    out->push_back(Make(ActionKind::kOptimizerStep, -1, 0));
  }
  return Status::OK();
}

}  // namespace planner
