#include "spec/program_check.h"

#include <algorithm>
#include <deque>
#include <map>
#include <tuple>

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace planner {

namespace {

using MessageKey = std::tuple<int32_t, int32_t, int64_t>;  // sender, receiver, tag

std::string StepText(const std::vector<CheckProcess>& procs, const std::vector<std::vector<int32_t>>& groups,
                     const CheckStep& s) {
  switch (s.kind) {
    case CheckStep::Kind::kSend: return fmt::format("{} (to {})", s.label, procs[static_cast<size_t>(s.peer)].name);
    case CheckStep::Kind::kRecv: return fmt::format("{} (from {})", s.label, procs[static_cast<size_t>(s.peer)].name);
    case CheckStep::Kind::kCollective: {
      const auto& g = groups[static_cast<size_t>(s.tag)];
      return fmt::format("{} (a collective of {} rank{}, group {})", s.label, g.size(), g.size() == 1 ? "" : "s",
                         s.tag);
    }
    case CheckStep::Kind::kLocal: break;
  }
  return s.label;
}

// Two ranks exchange their messages in one order: the k-th message one sends the other is the
// k-th it receives from it. NCCL matches point-to-point messages in posting order, not by tag,
// so on GPUs another order would hand a stage another microbatch's tensor.
Status CheckPairOrder(const std::vector<CheckProcess>& procs, const std::vector<std::vector<int32_t>>& groups) {
  std::map<std::pair<int32_t, int32_t>, std::vector<std::pair<int64_t, size_t>>> sent,
      received;  // (from, to) -> (tag, step)
  for (int32_t p = 0; p < static_cast<int32_t>(procs.size()); ++p) {
    const auto& steps = procs[static_cast<size_t>(p)].steps;
    for (size_t i = 0; i < steps.size(); ++i) {
      if (steps[i].kind == CheckStep::Kind::kSend) sent[{p, steps[i].peer}].emplace_back(steps[i].tag, i);
      if (steps[i].kind == CheckStep::Kind::kRecv) received[{steps[i].peer, p}].emplace_back(steps[i].tag, i);
    }
  }
  for (const auto& [pair, sends] : sent) {
    if (pair.first == pair.second)
      continue;  // a rank's message to itself (DualPipeV's stages p - 1 -> p) is handed over locally, never posted
    const auto& recvs = received[pair];
    for (size_t k = 0; k < sends.size() && k < recvs.size(); ++k) {
      if (sends[k].first == recvs[k].first) continue;
      const CheckProcess& from = procs[static_cast<size_t>(pair.first)];
      const CheckProcess& to = procs[static_cast<size_t>(pair.second)];
      return Status::InvalidArgument(
          fmt::format("{}: message {} to {} is {}, but {} receives {} as its message {} from it; a pair of ranks "
                      "must exchange messages in one order (NCCL matches them in posting order)",
                      from.name, k + 1, to.name, StepText(procs, groups, from.steps[sends[k].second]), to.name,
                      StepText(procs, groups, to.steps[recvs[k].second]), k + 1));
    }
  }
  return Status::OK();
}

// Every send has exactly one receive and every receive exactly one send.
Status CheckMatching(const std::vector<CheckProcess>& procs, const std::vector<std::vector<int32_t>>& groups) {
  std::map<MessageKey, std::pair<int, int>> count;        // key -> (sends, receives)
  std::map<MessageKey, std::pair<size_t, size_t>> where;  // key -> (process, step) of its first occurrence
  const int32_t n = static_cast<int32_t>(procs.size());
  for (int32_t p = 0; p < n; ++p) {
    const auto& steps = procs[static_cast<size_t>(p)].steps;
    for (size_t i = 0; i < steps.size(); ++i) {
      const CheckStep& s = steps[i];
      if (s.kind == CheckStep::Kind::kCollective) {
        const bool member =
            s.tag >= 0 && s.tag < static_cast<int64_t>(groups.size()) &&
            std::count(groups[static_cast<size_t>(s.tag)].begin(), groups[static_cast<size_t>(s.tag)].end(), p) == 1;
        if (!member)
          return Status::InvalidArgument(fmt::format("{}: {} is a collective of a group it is not in",
                                                     procs[static_cast<size_t>(p)].name, s.label));
        continue;
      }
      if (s.kind == CheckStep::Kind::kLocal) continue;
      if (s.peer < 0 || s.peer >= n) {
        return Status::InvalidArgument(
            fmt::format("{}: {} names no rank", procs[static_cast<size_t>(p)].name, s.label));
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
    return Status::InvalidArgument(
        fmt::format("{}: sent {} times and received {} times; each message goes once", at, c.first, c.second));
  }
  return Status::OK();
}

// The processes that cannot move, each with the step it waits at (at most 8 named).
Status Deadlock(const std::vector<CheckProcess>& procs, const std::vector<std::vector<int32_t>>& groups,
                const std::vector<size_t>& pc, size_t finished) {
  std::string why;
  int named = 0, stuck = 0;
  for (size_t p = 0; p < procs.size(); ++p) {
    if (pc[p] >= procs[p].steps.size()) continue;
    ++stuck;
    if (named++ < 8)
      why += fmt::format("; {} waits at action {}: {}", procs[p].name, pc[p] + 1,
                         StepText(procs, groups, procs[p].steps[pc[p]]));
  }
  if (named > 8) why += fmt::format("; and {} more", named - 8);
  return Status::InvalidArgument(
      fmt::format("deadlock: {} of {} ranks cannot finish ({} finished){}", stuck, procs.size(), finished, why));
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
  int64_t PositionOf(int64_t q) const { return replicated ? q : StagePosition(L.schedule, q, positions); }
  std::string Name(int64_t pos, int64_t k) const {
    for (const auto& r : L.ranks) {
      if (r.stage == pos && r.replica == k && r.tp_rank == 0)
        return fmt::format("rank {} (stage {}, replica {})", r.rank, pos, k);
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
  if (a.stage >= stages || (a.stage >= 0 && PositionOf(a.stage) != pos) ||
      (a.stage < 0 && a.kind != ActionKind::kGradReduce)) {
    return Status::InvalidArgument(
        fmt::format("{}: {} names stage {}, which does not run on this rank", who, out->label, a.stage));
  }
  if (a.kind == ActionKind::kGradReduce) {
    auto [it, fresh] = group_of.try_emplace({pos, a.stage}, static_cast<int64_t>(groups.size()));
    if (fresh) {
      std::vector<int32_t> members;
      for (int32_t p : process_of[static_cast<size_t>(pos)])
        if (p >= 0) members.push_back(p);
      groups.push_back(members);
    }
    out->kind = CheckStep::Kind::kCollective;
    out->tag = it->second;
    return Status::OK();
  }
  if (!IsTransfer(a)) return Status::OK();  // F, B, W
  const bool send = a.kind == ActionKind::kSendActivation || a.kind == ActionKind::kSendGrad;
  const bool grad = a.kind == ActionKind::kRecvGrad || a.kind == ActionKind::kSendGrad;
  const int64_t to = PeerStage(a);
  if (to < 0 || to >= stages)
    return Status::InvalidArgument(fmt::format("{}: {} has no peer stage {}", who, out->label, to));
  const int64_t peer_pos = PositionOf(to), peer_k = a.peer_replica == Action::kSameReplica ? k : a.peer_replica;
  const int32_t peer =
      peer_k < Replicas(peer_pos) ? process_of[static_cast<size_t>(peer_pos)][static_cast<size_t>(peer_k)] : -1;
  if (peer < 0)
    return Status::InvalidArgument(
        fmt::format("{}: {} names replica {} of stage {}, which does not exist", who, out->label, peer_k, peer_pos));
  out->kind = send ? CheckStep::Kind::kSend : CheckStep::Kind::kRecv;
  out->peer = peer;
  // The message: direction, the stage it enters (activation) or leaves (gradient), microbatch.
  const int64_t boundary = std::max<int64_t>(a.stage, to);
  out->tag = ((boundary * 2 + (grad ? 1 : 0)) << 31) + a.microbatch;
  return Status::OK();
}

}  // namespace

namespace {

// Where the actions of one (stage, microbatch) stand in a program: index + 1, 0 when absent.
struct Slots {
  size_t f = 0, b = 0, w = 0, ra = 0, sa = 0, rg = 0, sg = 0;
  int fs = 0, bs = 0, ws = 0;  // counts of F, B, W
  int64_t program = -1;
};

// The microbatches a program numbers: one iteration's (this replica's, or the whole batch's
// under per-stage replication), or the run's for the asynchronous schedule; -1 on overflow.
int64_t ProgramMicrobatches(const LaunchPlan& L, bool replicated) {
  if (!replicated) return L.num_microbatches;
  const int64_t per_iteration = L.microbatch_size > 0 ? L.global_batch / L.microbatch_size : 0;
  if (L.schedule != Schedule::kPipeDream) return per_iteration;
  int64_t m = 0;
  return __builtin_mul_overflow(L.run.iterations, per_iteration, &m) ? -1 : m;
}

// Records program `g`'s compute and transfer actions of stage q's microbatches.
Status Record(const LaunchPlan& L, int64_t g, int64_t m, std::map<std::pair<int64_t, int64_t>, Slots>* at) {
  const auto& actions = L.programs[static_cast<size_t>(g)].actions;
  for (size_t i = 0; i < actions.size(); ++i) {
    const Action& a = actions[i];
    if (!HasMicrobatch(a)) continue;
    if (a.microbatch < 0 || a.microbatch >= m) {
      return Status::InvalidArgument(
          fmt::format("program {} action {} ({}): microbatch {} is outside the {} this launch runs (0..{})", g, i + 1,
                      ActionToString(a), a.microbatch, m, m - 1));
    }
    Slots& x = (*at)[{a.stage, a.microbatch}];
    if (x.program >= 0 && x.program != g) {
      return Status::InvalidArgument(
          fmt::format("program {} action {} ({}): stage {} microbatch {} already runs in program {}; a microbatch "
                      "of a stage runs on one replica",
                      g, i + 1, ActionToString(a), a.stage, a.microbatch, x.program));
    }
    x.program = g;
    switch (a.kind) {
      case ActionKind::kForward:
        x.f = i + 1;
        ++x.fs;
        break;
      case ActionKind::kBackwardInput:
        x.b = i + 1;
        ++x.bs;
        break;
      case ActionKind::kBackwardWeight:
        x.w = i + 1;
        ++x.ws;
        break;
      case ActionKind::kRecvActivation: x.ra = i + 1; break;
      case ActionKind::kSendActivation: x.sa = i + 1; break;
      case ActionKind::kRecvGrad: x.rg = i + 1; break;
      case ActionKind::kSendGrad: x.sg = i + 1; break;
      default: break;
    }
  }
  return Status::OK();
}

// One (stage, microbatch): one F, one B and at most one W, in that order, each receive before
// the compute that needs it and each send after the compute that produces it.
Status CheckSlot(int64_t q, int64_t j, int64_t stages, const Slots& x, bool split_w) {
  const std::string what = fmt::format("stage {} microbatch {}", q, j);
  if (x.fs != 1 || x.bs != 1)
    return Status::InvalidArgument(
        fmt::format("{} has {} forward and {} backward actions; it needs one of each", what, x.fs, x.bs));
  if (x.ws != (split_w ? 1 : 0)) {
    return Status::InvalidArgument(fmt::format("{} has {} backward-weight actions where every other microbatch has {}",
                                               what, x.ws, split_w ? 1 : 0));
  }
  if (x.b < x.f || (split_w && x.w < x.b))
    return Status::InvalidArgument(fmt::format("{}: its backward comes before its forward, or W before B", what));
  if (q > 0 && (x.ra == 0 || x.ra > x.f || x.sg < x.b)) {
    return Status::InvalidArgument(
        fmt::format("{}: needs RA{}.{} before its forward and SG{}.{} after its backward", what, q, j, q, j));
  }
  if (q + 1 < stages && (x.rg == 0 || x.rg > x.b || x.sa < x.f)) {
    return Status::InvalidArgument(
        fmt::format("{}: needs SA{}.{} after its forward and RG{}.{} before its backward", what, q, j, q, j));
  }
  return Status::OK();
}

// Every stage a rank holds runs each microbatch once: per distinct program for shared
// (uniform) programs, over the replicas' programs together under per-stage replication.
Status CheckCompleteness(const LaunchPlan& L, bool replicated, int64_t positions) {
  const int64_t stages = static_cast<int64_t>(L.stages.size()), m = ProgramMicrobatches(L, replicated);
  if (m < 0)
    return Status::InvalidArgument(fmt::format("{}: run.iterations x microbatches per iteration overflows", L.path));
  std::vector<std::vector<int64_t>> sets;  // program indices that together cover a position's stages
  for (int64_t pos = 0; pos < positions; ++pos) {
    std::vector<int64_t> mine;
    for (const auto& r : L.ranks) {
      if (r.stage == pos && std::find(mine.begin(), mine.end(), r.program) == mine.end()) mine.push_back(r.program);
    }
    if (replicated) sets.push_back(mine);
    else
      for (int64_t g : mine) sets.push_back({g});
  }
  bool any_w = false;
  for (const auto& g : L.programs) {
    for (const auto& a : g.actions) any_w = any_w || a.kind == ActionKind::kBackwardWeight;
  }
  for (const auto& set : sets) {
    std::map<std::pair<int64_t, int64_t>, Slots> at;
    for (int64_t g : set) PLANNER_RETURN_IF_ERROR(Record(L, g, m, &at).WithContext(fmt::format("{}", L.path)));
    const int64_t pos = L.programs[static_cast<size_t>(set.front())].position;
    for (int64_t c = 0; c * positions < stages; ++c) {
      const int64_t q = replicated ? pos : ChunkStage(L.schedule, c, pos, positions);
      // Stops at the first microbatch never run, so a huge m in an edited file costs no more than
      // the actions the file holds.
      for (int64_t j = 0; j < m; ++j) {
        auto it = at.find({q, j});
        Status st = it == at.end()
                        ? Status::InvalidArgument(fmt::format(
                              "stage {} microbatch {} is never run; every microbatch of a stage runs once", q, j))
                        : CheckSlot(q, j, stages, it->second, any_w);
        if (!st.ok()) return st.WithContext(fmt::format("{}: program {} (position {})", L.path, set.front(), pos));
      }
    }
  }
  return Status::OK();
}

// Each program's optimizer steps (issue 32: a program without its OPT trains that stage wrong with exit 0).
// Synchronous schedules: exactly one OPT, the program's last action, after one AR when the program's
// gradient group has more than one member (dp x cp for uniform plans, the stage's replicas under per-stage
// replication) and none otherwise. The asynchronous schedule: after every backward an OPT before the next
// compute, with an AR between them on a replicated stage; a replica without a microbatch in the last round
// ends with one more AR and OPT (dp_solver/programs.cc).
Status CheckOptimizerSteps(const LaunchPlan& L, bool replicated) {
  const bool async = L.schedule == Schedule::kPipeDream;
  const int64_t m = ProgramMicrobatches(L, replicated);
  for (size_t g = 0; g < L.programs.size(); ++g) {
    const RankProgram& prog = L.programs[g];
    const auto& a = prog.actions;
    const int64_t group = replicated ? L.stages[static_cast<size_t>(prog.position)].replicas : L.dp * L.cp;
    const std::string where = fmt::format("{}: program {} (position {})", L.path, g, prog.position);
    auto count = [&](ActionKind k) {
      return std::count_if(a.begin(), a.end(), [k](const Action& x) { return x.kind == k; });
    };
    if (!async) {
      const int64_t want_ar = group > 1 ? 1 : 0;
      if (count(ActionKind::kOptimizerStep) != 1 || a.empty() || a.back().kind != ActionKind::kOptimizerStep)
        return Status::InvalidArgument(fmt::format(
            "{}: {} optimizer steps; a synchronous program ends with exactly one OPT after its last backward "
            "(regenerate with planner codegen)",
            where, count(ActionKind::kOptimizerStep)));
      if (count(ActionKind::kGradReduce) != want_ar ||
          (want_ar == 1 && (a.size() < 2 || a[a.size() - 2].kind != ActionKind::kGradReduce)))
        return Status::InvalidArgument(fmt::format(
            "{}: {} gradient reduces; its {} replicas need {} AR right before the OPT (regenerate with planner "
            "codegen)",
            where, count(ActionKind::kGradReduce), group, want_ar));
      continue;
    }
    int64_t pending = -1;  // index of a backward still waiting for its OPT
    bool reduced = false;
    for (size_t i = 0; i < a.size(); ++i) {
      const ActionKind k = a[i].kind;
      const bool compute =
          k == ActionKind::kForward || k == ActionKind::kBackwardInput || k == ActionKind::kBackwardWeight;
      if (compute && pending >= 0)
        return Status::InvalidArgument(fmt::format(
            "{}: action {} ({}) runs before the OPT of the backward at action {}; the asynchronous schedule "
            "steps after every backward (regenerate with planner codegen)",
            where, i + 1, ActionToString(a[i]), pending + 1));
      if (k == ActionKind::kBackwardInput) pending = static_cast<int64_t>(i), reduced = false;
      if (k == ActionKind::kGradReduce) reduced = true;
      if (k == ActionKind::kOptimizerStep && pending >= 0) {
        if (group > 1 && !reduced)
          return Status::InvalidArgument(
              fmt::format("{}: the OPT at action {} follows no AR; the stage's {} replicas reduce before every step",
                          where, i + 1, group));
        pending = -1;
      }
    }
    const int64_t reps = std::max<int64_t>(1, group), extra = reps > 1 && m % reps != 0 && prog.replica >= m % reps;
    const int64_t want = count(ActionKind::kBackwardInput) + extra;
    if (pending >= 0 || count(ActionKind::kOptimizerStep) != want)
      return Status::InvalidArgument(fmt::format(
          "{}: {} optimizer steps for {} backwards; the asynchronous schedule steps once after each{} (regenerate "
          "with planner codegen)",
          where, count(ActionKind::kOptimizerStep), count(ActionKind::kBackwardInput),
          extra ? ", and once more at the end for a replica without a microbatch in the last round" : ""));
  }
  return Status::OK();
}

// Every rank's prev / next: the ranks of its neighbouring pipeline stage, as codegen lays them out
// (uniform: the pp group's neighbours, wrapping for the interleaved schedule; per-stage replication: every
// replica of the neighbouring stage at its tp rank). A rank naming itself or another rank is refused; a
// rank that states neither (programmatic plans) is not checked.
Status CheckNeighbours(const LaunchPlan& L) {
  std::vector<std::vector<int64_t>> prev, next;
  PipelineNeighbours(L, &prev, &next);
  for (size_t i = 0; i < L.ranks.size(); ++i) {
    const LaunchRank& r = L.ranks[i];
    // Both omitted: not stated (the runtime takes its peers from the programs and the stages).
    if ((r.prev.empty() && r.next.empty()) || (r.prev == prev[i] && r.next == next[i])) continue;
    return Status::InvalidArgument(fmt::format(
        "{}: rank {} (stage {}, replica {}) has prev [{}] next [{}]; the rank table gives prev [{}] next [{}] "
        "(regenerate with planner codegen)",
        L.path, r.rank, r.stage, r.replica, fmt::join(r.prev, ", "), fmt::join(r.next, ", "), fmt::join(prev[i], ", "),
        fmt::join(next[i], ", ")));
  }
  return Status::OK();
}

}  // namespace

Status CheckPrograms(const LaunchPlan& L) {
  Expansion x(L);
  x.replicated = PerStageReplication(L);
  x.stages = static_cast<int64_t>(L.stages.size());
  x.positions = x.replicated ? x.stages : L.pp;
  if (x.positions < 1 || x.stages % x.positions != 0)
    return Status::InvalidArgument(fmt::format("launch plan: {} stages for pp {}", x.stages, L.pp));
  bool shared = true;  // every program is shared by all replicas of its position and names no peer replica
  for (const auto& g : L.programs) {
    shared = shared && g.replica == -1;
    for (const auto& a : g.actions) shared = shared && a.peer_replica == Action::kSameReplica;
  }
  const bool one_chain = !x.replicated && shared;
  for (const auto& r : L.ranks) {
    const int64_t idx = FindProgram(L, r);
    if (idx < 0)
      return Status::InvalidArgument(fmt::format("rank {} (stage {}, replica {}) has {} program", r.rank, r.stage,
                                                 r.replica, idx == -1 ? "no" : "more than one"));
    if (idx != r.program)
      return Status::InvalidArgument(fmt::format("rank {}: its program is not assigned; call AssignPrograms", r.rank));
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
      if (idx < 0)
        return Status::InvalidArgument(
            fmt::format("{} has {} program", x.Name(pos, k), idx == -1 ? "no" : "more than one"));
      for (const Action& a : L.programs[static_cast<size_t>(idx)].actions) {
        CheckStep s;
        PLANNER_RETURN_IF_ERROR(x.Step(pos, k, a, &s));
        x.procs[static_cast<size_t>(p)].steps.push_back(std::move(s));
      }
    }
  }
  PLANNER_RETURN_IF_ERROR(CheckNeighbours(L));
  PLANNER_RETURN_IF_ERROR(CheckDeadlockFree(x.procs, x.groups));
  PLANNER_RETURN_IF_ERROR(CheckCompleteness(L, x.replicated, x.positions));
  PLANNER_RETURN_IF_ERROR(CheckOptimizerSteps(L, x.replicated));
  return CheckPairOrder(x.procs, x.groups);
}

}  // namespace planner
