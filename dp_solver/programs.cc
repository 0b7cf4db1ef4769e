#include "dp_solver/programs.h"

#include <algorithm>
#include <deque>
#include <functional>
#include <map>
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
  int64_t stages = 1;                                  // Q, virtual stages
  std::function<int32_t(int64_t, int64_t)> peer;      // (stage, microbatch) -> replica of that stage, or kSameReplica
  bool async = false;                                  // per-backward AR<stage> (when replicated) and OPT
  bool reduce_after_backward = false;                  // async: the stage has more than one replica

  void Append(const SimEvent& e, std::vector<Action>* out) const {
    const int64_t q = e.stage, j = e.microbatch;
    if (e.kind == 'F') {
      if (q > 0) out->push_back(Act(ActionKind::kRecvActivation, q, j, peer(q - 1, j)));
      out->push_back(Act(ActionKind::kForward, q, j));
      if (q + 1 < stages) out->push_back(Act(ActionKind::kSendActivation, q, j, peer(q + 1, j)));
    } else if (e.kind == 'B') {
      if (q + 1 < stages) out->push_back(Act(ActionKind::kRecvGrad, q, j, peer(q + 1, j)));
      out->push_back(Act(ActionKind::kBackwardInput, q, j));
      // The input gradient leaves before the replicas' reduce: a replica still waiting for its
      // next activation (which the previous stage sends only after this gradient) must not be
      // needed in the reduce first (a replicated stage after a single one would deadlock).
      if (q > 0) out->push_back(Act(ActionKind::kSendGrad, q, j, peer(q - 1, j)));
      if (async) {
        if (reduce_after_backward) out->push_back(Act(ActionKind::kGradReduce, q, 0));
        out->push_back(Act(ActionKind::kOptimizerStep, -1, 0));
      }
    } else {
      out->push_back(Act(ActionKind::kBackwardWeight, q, j));
    }
  }
};

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
    if (L.dp > 1) prog.actions.push_back(Act(ActionKind::kGradReduce, -1, 0));
    prog.actions.push_back(Act(ActionKind::kOptimizerStep, -1, 0));
    out->push_back(std::move(prog));
  }
  return Status::OK();
}

Status BuildReplicated(const LaunchPlan& L, std::vector<RankProgram>* out) {
  const bool async = L.schedule == Schedule::kPipeDream;
  if (L.microbatch_size < 1) return Status::InvalidArgument("launch plan: microbatch_size must be positive");
  const int64_t m = L.global_batch / L.microbatch_size;
  const int64_t microbatches = async ? std::max<int64_t>(1, L.run.iterations) * m : m;
  // Devices go stage by stage, replica by replica; each keeps PipeDream's NOAM microbatches in flight.
  std::vector<int64_t> reps, in_flight, offset;
  int64_t after = 0;
  for (const auto& x : L.stages) after += x.replicas;
  for (const auto& x : L.stages) {
    offset.push_back(reps.empty() ? 0 : offset.back() + reps.back());
    reps.push_back(x.replicas);
    in_flight.push_back((after + x.replicas - 1) / x.replicas);
    after -= x.replicas;
  }
  SimResult r;
  PLANNER_RETURN_IF_ERROR(SimulateReplicated(SimStagesOf(L), reps, in_flight, microbatches, true, &r));
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

// ---------------------------------------------------------------------------
// The checker.

namespace {

using MessageKey = std::tuple<int32_t, int32_t, int64_t>;  // sender, receiver, tag

std::string StepText(const std::vector<CheckProcess>& procs, const std::vector<std::vector<int32_t>>& groups, const CheckStep& s) {
  switch (s.kind) {
    case CheckStep::Kind::kSend: return fmt::format("{} (to {})", s.label, procs[static_cast<size_t>(s.peer)].name);
    case CheckStep::Kind::kRecv: return fmt::format("{} (from {})", s.label, procs[static_cast<size_t>(s.peer)].name);
    case CheckStep::Kind::kCollective: {
      const auto& g = groups[static_cast<size_t>(s.tag)];
      return fmt::format("{} (a collective of {} rank{}, group {})", s.label, g.size(), g.size() == 1 ? "" : "s", s.tag);
    }
    case CheckStep::Kind::kLocal: break;
  }
  return s.label;
}

// Every send has exactly one receive and every receive exactly one send.
Status CheckMatching(const std::vector<CheckProcess>& procs, const std::vector<std::vector<int32_t>>& groups) {
  std::map<MessageKey, std::pair<int, int>> count;  // key -> (sends, receives)
  std::map<MessageKey, std::pair<size_t, size_t>> where;  // key -> (process, step) of its first occurrence
  const int32_t n = static_cast<int32_t>(procs.size());
  for (int32_t p = 0; p < n; ++p) {
    const auto& steps = procs[static_cast<size_t>(p)].steps;
    for (size_t i = 0; i < steps.size(); ++i) {
      const CheckStep& s = steps[i];
      if (s.kind == CheckStep::Kind::kCollective) {
        const bool member = s.tag >= 0 && s.tag < static_cast<int64_t>(groups.size()) &&
                            std::count(groups[static_cast<size_t>(s.tag)].begin(), groups[static_cast<size_t>(s.tag)].end(), p) == 1;
        if (!member) return Status::InvalidArgument(fmt::format("{}: {} is a collective of a group it is not in", procs[static_cast<size_t>(p)].name, s.label));
        continue;
      }
      if (s.kind == CheckStep::Kind::kLocal) continue;
      if (s.peer < 0 || s.peer >= n) {
        return Status::InvalidArgument(fmt::format("{}: {} names no rank", procs[static_cast<size_t>(p)].name, s.label));
      }
      const bool send = s.kind == CheckStep::Kind::kSend;
      MessageKey k = send ? MessageKey{p, s.peer, s.tag} : MessageKey{s.peer, p, s.tag};
      auto& c = count[k];
      (send ? c.first : c.second) += 1;
      where.emplace(k, std::make_pair(static_cast<size_t>(p), i));
    }
  }
  for (const auto& [k, c] : count) {
    if (c.first == 1 && c.second == 1) continue;
    const auto [p, i] = where[k];
    const std::string at = fmt::format("{}: {}", procs[p].name, StepText(procs, groups, procs[p].steps[i]));
    if (c.first == 0) return Status::InvalidArgument(at + ": no rank sends it");
    if (c.second == 0) return Status::InvalidArgument(at + ": no rank receives it");
    return Status::InvalidArgument(fmt::format("{}: sent {} times and received {} times; each message goes once", at, c.first, c.second));
  }
  return Status::OK();
}

// The processes that cannot move, each with the step it waits at (at most 8 named).
Status Deadlock(const std::vector<CheckProcess>& procs, const std::vector<std::vector<int32_t>>& groups, const std::vector<size_t>& pc,
                size_t finished) {
  std::string why;
  int named = 0, stuck = 0;
  for (size_t p = 0; p < procs.size(); ++p) {
    if (pc[p] >= procs[p].steps.size()) continue;
    ++stuck;
    if (named++ < 8) why += fmt::format("; {} waits at action {}: {}", procs[p].name, pc[p] + 1, StepText(procs, groups, procs[p].steps[pc[p]]));
  }
  if (named > 8) why += fmt::format("; and {} more", named - 8);
  return Status::InvalidArgument(fmt::format("deadlock: {} of {} ranks cannot finish ({} finished){}", stuck, procs.size(), finished, why));
}

}  // namespace

// Plays the processes with a work queue: a process runs until it blocks, and a send or a
// completed collective wakes the processes it may unblock.
Status CheckDeadlockFree(const std::vector<CheckProcess>& procs, const std::vector<std::vector<int32_t>>& groups) {
  PLANNER_RETURN_IF_ERROR(CheckMatching(procs, groups));
  const size_t n = procs.size();
  std::vector<size_t> pc(n, 0);
  std::vector<bool> arrived(n, false), queued(n, true);
  std::vector<size_t> waiting(groups.size(), 0);
  std::map<MessageKey, int> mailbox;
  std::deque<size_t> queue;
  for (size_t p = 0; p < n; ++p) queue.push_back(p);
  auto wake = [&](size_t p) {
    if (!queued[p]) {
      queued[p] = true;
      queue.push_back(p);
    }
  };
  while (!queue.empty()) {
    const size_t p = queue.front();
    queue.pop_front();
    queued[p] = false;
    const auto& steps = procs[p].steps;
    while (pc[p] < steps.size()) {
      const CheckStep& s = steps[pc[p]];
      if (s.kind == CheckStep::Kind::kLocal) {
        ++pc[p];
      } else if (s.kind == CheckStep::Kind::kSend) {
        ++mailbox[{static_cast<int32_t>(p), s.peer, s.tag}];
        wake(static_cast<size_t>(s.peer));
        ++pc[p];
      } else if (s.kind == CheckStep::Kind::kRecv) {
        auto it = mailbox.find({s.peer, static_cast<int32_t>(p), s.tag});
        if (it == mailbox.end() || it->second == 0) break;
        --it->second;
        ++pc[p];
      } else {
        if (arrived[p]) break;
        arrived[p] = true;
        const auto& members = groups[static_cast<size_t>(s.tag)];
        if (++waiting[static_cast<size_t>(s.tag)] < members.size()) break;
        waiting[static_cast<size_t>(s.tag)] = 0;
        for (int32_t q : members) {
          arrived[static_cast<size_t>(q)] = false;
          ++pc[static_cast<size_t>(q)];
          wake(static_cast<size_t>(q));
        }
        break;
      }
    }
  }
  size_t finished = 0;
  for (size_t p = 0; p < n; ++p) finished += pc[p] >= procs[p].steps.size();
  if (finished == n) return Status::OK();
  return Deadlock(procs, groups, pc, finished);
}

// ---------------------------------------------------------------------------
// Programs to processes.
//
// Which ranks the check plays. A tensor-parallel group runs one program in
// lockstep (its all-reduces sit inside the compute actions and involve only
// that group), and its ranks' peers are the same tensor-parallel rank of the
// neighbour stages, so one tensor-parallel rank per (position, replica)
// stands for the others. In a uniform plan whose programs all have replica
// -1 and name no peer replica, replica k's ranks talk only to replica k's ranks, every replica
// runs the same programs, and replicas meet only in AR, which every replica
// reaches after the same actions: so the replicas' executions are copies of
// one another and replica 0's chain (one process per position, AR a
// collective of one) completes exactly when the whole set does. Otherwise
// every (position, replica) is a process and AR is a collective of the
// position's replicas.

namespace {

struct Expansion {
  const LaunchPlan& L;
  bool replicated = false;
  int64_t positions = 0, stages = 0;
  std::vector<std::vector<int32_t>> process_of;  // [position][replica] -> process, -1 when not played
  std::vector<CheckProcess> procs;
  std::vector<std::vector<int32_t>> groups;
  std::map<std::pair<int64_t, int64_t>, int64_t> group_of;  // (position, AR stage) -> collective id

  explicit Expansion(const LaunchPlan& l) : L(l) {}
  int64_t Replicas(int64_t pos) const { return replicated ? L.stages[static_cast<size_t>(pos)].replicas : L.dp; }
  int64_t PositionOf(int64_t q) const { return replicated ? q : q % positions; }
  std::string Name(int64_t pos, int64_t k) const {
    for (const auto& r : L.ranks) {
      if (r.stage == pos && r.replica == k && r.tp_rank == 0) return fmt::format("rank {} (stage {}, replica {})", r.rank, pos, k);
    }
    return fmt::format("stage {} replica {}", pos, k);
  }
  Status Step(int64_t pos, int64_t k, const Action& a, CheckStep* out);
};

// One action of (pos, replica k) as a checker step.
Status Expansion::Step(int64_t pos, int64_t k, const Action& a, CheckStep* out) {
  out->label = ActionToString(a);
  const std::string who = Name(pos, k);
  if (a.kind == ActionKind::kOptimizerStep) return Status::OK();
  if (a.stage >= stages || (a.stage >= 0 && PositionOf(a.stage) != pos) || (a.stage < 0 && a.kind != ActionKind::kGradReduce)) {
    return Status::InvalidArgument(fmt::format("{}: {} names stage {}, which does not run on this rank", who, out->label, a.stage));
  }
  if (a.kind == ActionKind::kGradReduce) {
    auto [it, fresh] = group_of.try_emplace({pos, a.stage}, static_cast<int64_t>(groups.size()));
    if (fresh) {
      std::vector<int32_t> members;
      for (int32_t p : process_of[static_cast<size_t>(pos)]) if (p >= 0) members.push_back(p);
      groups.push_back(members);
    }
    out->kind = CheckStep::Kind::kCollective;
    out->tag = it->second;
    return Status::OK();
  }
  const bool send = a.kind == ActionKind::kSendActivation || a.kind == ActionKind::kSendGrad;
  const bool grad = a.kind == ActionKind::kRecvGrad || a.kind == ActionKind::kSendGrad;
  if (!send && !grad && a.kind != ActionKind::kRecvActivation) return Status::OK();  // F, B, W
  // The peer's stage: activations flow to q + 1, gradients to q - 1.
  const int64_t to = (a.kind == ActionKind::kSendActivation || a.kind == ActionKind::kRecvGrad) ? a.stage + 1 : a.stage - 1;
  if (to < 0 || to >= stages) return Status::InvalidArgument(fmt::format("{}: {} has no peer stage {}", who, out->label, to));
  const int64_t peer_pos = PositionOf(to), peer_k = a.peer_replica == Action::kSameReplica ? k : a.peer_replica;
  const int32_t peer = peer_k < Replicas(peer_pos) ? process_of[static_cast<size_t>(peer_pos)][static_cast<size_t>(peer_k)] : -1;
  if (peer < 0) return Status::InvalidArgument(fmt::format("{}: {} names replica {} of stage {}, which does not exist", who, out->label, peer_k, peer_pos));
  out->kind = send ? CheckStep::Kind::kSend : CheckStep::Kind::kRecv;
  out->peer = peer;
  // The message: direction, the stage it enters (activation) or leaves (gradient), microbatch.
  const int64_t boundary = std::max<int64_t>(a.stage, to);
  out->tag = ((boundary * 2 + (grad ? 1 : 0)) << 31) + a.microbatch;
  return Status::OK();
}

}  // namespace

Status CheckPrograms(const LaunchPlan& L) {
  Expansion x(L);
  x.replicated = PerStageReplication(L);
  x.stages = static_cast<int64_t>(L.stages.size());
  x.positions = x.replicated ? x.stages : L.pp;
  if (x.positions < 1 || x.stages % x.positions != 0) return Status::InvalidArgument(fmt::format("launch plan: {} stages for pp {}", x.stages, L.pp));
  bool shared = true;  // every program is shared by all replicas of its position and names no peer replica
  for (const auto& g : L.programs) {
    shared = shared && g.replica == -1;
    for (const auto& a : g.actions) shared = shared && a.peer_replica == Action::kSameReplica;
  }
  const bool one_chain = !x.replicated && shared;
  for (const auto& r : L.ranks) {
    const int64_t idx = FindProgram(L, r);
    if (idx < 0) return Status::InvalidArgument(fmt::format("rank {} (stage {}, replica {}) has {} program", r.rank, r.stage, r.replica, idx == -1 ? "no" : "more than one"));
  }
  x.process_of.resize(static_cast<size_t>(x.positions));
  for (int64_t pos = 0; pos < x.positions; ++pos) {
    for (int64_t k = 0; k < x.Replicas(pos); ++k) {
      const bool played = !one_chain || k == 0;
      x.process_of[static_cast<size_t>(pos)].push_back(played ? static_cast<int32_t>(x.procs.size()) : -1);
      if (played) x.procs.push_back({x.Name(pos, k), {}});
    }
  }
  for (int64_t pos = 0; pos < x.positions; ++pos) {
    for (int64_t k = 0; k < x.Replicas(pos); ++k) {
      const int32_t p = x.process_of[static_cast<size_t>(pos)][static_cast<size_t>(k)];
      if (p < 0) continue;
      LaunchRank key;
      key.stage = pos;
      key.replica = k;
      const int64_t idx = FindProgram(L, key);
      if (idx < 0) return Status::InvalidArgument(fmt::format("{} has {} program", x.Name(pos, k), idx == -1 ? "no" : "more than one"));
      for (const Action& a : L.programs[static_cast<size_t>(idx)].actions) {
        CheckStep s;
        PLANNER_RETURN_IF_ERROR(x.Step(pos, k, a, &s));
        x.procs[static_cast<size_t>(p)].steps.push_back(std::move(s));
      }
    }
  }
  return CheckDeadlockFree(x.procs, x.groups);
}

}  // namespace planner
