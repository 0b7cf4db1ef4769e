#include "runtime/transfers.h"

#include <algorithm>
#include <map>
#include <tuple>

#include <fmt/format.h>

#include "common/timing.h"
#include "common/units.h"

namespace planner {

namespace {

// Doubles travel as two floats (the communicators move floats): x = hi + lo to about 1e-14.
void Put(std::vector<float>* v, double x) {
  const float hi = static_cast<float>(x);
  v->push_back(hi);
  v->push_back(static_cast<float>(x - static_cast<double>(hi)));
}
double Get(const float* p) { return static_cast<double>(p[0]) + static_cast<double>(p[1]); }

// Every rank's doubles, on every rank (counts first, then one padded all-gather).
Status GatherDoubles(Communicator& world, const std::vector<double>& mine, std::vector<std::vector<double>>* all) {
  const int n = world.size();
  float count = static_cast<float>(mine.size());
  std::vector<float> counts(static_cast<size_t>(n));
  PLANNER_RETURN_IF_ERROR(world.AllGather(&count, counts.data(), 1));
  const size_t most = static_cast<size_t>(*std::max_element(counts.begin(), counts.end()));
  std::vector<float> packed;
  packed.reserve(2 * most);
  for (double x : mine) Put(&packed, x);
  packed.resize(2 * most, 0.0f);
  std::vector<float> every(2 * most * static_cast<size_t>(n));
  if (most > 0) PLANNER_RETURN_IF_ERROR(world.AllGather(packed.data(), every.data(), static_cast<int64_t>(2 * most)));
  all->assign(static_cast<size_t>(n), {});
  for (int r = 0; r < n; ++r) {
    for (size_t i = 0; i < static_cast<size_t>(counts[static_cast<size_t>(r)]); ++i) {
      (*all)[static_cast<size_t>(r)].push_back(Get(&every[(static_cast<size_t>(r) * most + i) * 2]));
    }
  }
  return Status::OK();
}

std::string Share(double predicted_s, double measured_s) {
  if (predicted_s <= 0 || measured_s <= 0) return "n/a (no prediction)";
  return fmt::format("{:.0f}%", 100 * predicted_s / measured_s);
}

}  // namespace

Status ClockOffset(Communicator& world, int rounds, double* offset_s, double* error_s) {
  *offset_s = 0;
  *error_s = 0;
  const int n = world.size(), me = world.rank();
  for (int peer = 1; peer < n; ++peer) {
    if (me == 0) {
      double best_rtt = 1e30, offset = 0;
      for (int k = 0; k < rounds; ++k) {
        float ping = static_cast<float>(k), back[2];
        const double t0 = MonotonicSeconds();
        PLANNER_RETURN_IF_ERROR(world.GroupSendRecv({{true, peer, &ping, 1}}));
        PLANNER_RETURN_IF_ERROR(world.GroupSendRecv({{false, peer, back, 2}}));
        const double t1 = MonotonicSeconds();
        if (t1 - t0 < best_rtt) {
          best_rtt = t1 - t0;
          offset = Get(back) - (t0 + t1) / 2;
        }
      }
      std::vector<float> result;
      Put(&result, offset);
      Put(&result, best_rtt / 2);
      PLANNER_RETURN_IF_ERROR(world.GroupSendRecv({{true, peer, result.data(), 4}}));
    } else if (me == peer) {
      for (int k = 0; k < rounds; ++k) {
        float ping = 0;
        PLANNER_RETURN_IF_ERROR(world.GroupSendRecv({{false, 0, &ping, 1}}));
        std::vector<float> t;
        Put(&t, MonotonicSeconds());
        PLANNER_RETURN_IF_ERROR(world.GroupSendRecv({{true, 0, t.data(), 2}}));
      }
      float result[4];
      PLANNER_RETURN_IF_ERROR(world.GroupSendRecv({{false, 0, result, 4}}));
      *offset_s = Get(result);
      *error_s = Get(result + 2);
    }
  }
  float worst = static_cast<float>(*error_s);
  PLANNER_RETURN_IF_ERROR(world.AllReduce(&worst, 1, ReduceOp::kMax));
  *error_s = worst;
  return Status::OK();
}

namespace {

// Every rank's log, flattened to doubles (tp all-reduces before `first_iteration` left out).
struct GatheredLogs {
  std::vector<std::vector<double>> sends, recvs, allreduces, tp;  // per rank
};

Status GatherLogs(Communicator& world, const TransferLog& mine, int64_t first_iteration, GatheredLogs* out) {
  std::vector<double> s, r, a, tp;
  for (const auto& x : mine.sends) {
    for (double v : {static_cast<double>(x.tag), static_cast<double>(x.iteration), static_cast<double>(x.stage),
                     static_cast<double>(x.bytes), static_cast<double>(x.dir), static_cast<double>(x.peer), x.post_s}) {
      s.push_back(v);
    }
  }
  for (const auto& x : mine.recvs) {
    for (double v : {static_cast<double>(x.tag), static_cast<double>(x.peer), x.start_s, x.end_s}) r.push_back(v);
  }
  for (const auto& x : mine.allreduces) {
    for (double v : {static_cast<double>(x.iteration), static_cast<double>(x.bytes), x.start_s, x.dur_s})
      a.push_back(v);
  }
  for (const auto& x : mine.tp_allreduces) {
    if (x.iteration < first_iteration) continue;
    for (double v : {static_cast<double>(x.iteration), static_cast<double>(x.seq), static_cast<double>(x.bytes),
                     x.dur_s, static_cast<double>(x.kind)}) {
      tp.push_back(v);
    }
  }
  PLANNER_RETURN_IF_ERROR(GatherDoubles(world, s, &out->sends));
  PLANNER_RETURN_IF_ERROR(GatherDoubles(world, r, &out->recvs));
  PLANNER_RETURN_IF_ERROR(GatherDoubles(world, a, &out->allreduces));
  return GatherDoubles(world, tp, &out->tp);
}

// Pipeline messages: paired by (tag, sender, receiver); transfer times grouped by (sender stage, direction, bytes).
using P2PTimes = std::map<std::tuple<int64_t, int64_t, int64_t>, std::vector<double>>;

P2PTimes PairMessages(const GatheredLogs& g, int64_t first_iteration) {
  struct SendAt {
    int64_t iteration, stage, bytes, dir;
    double post_s;
  };
  const int n = static_cast<int>(g.sends.size());
  std::map<std::tuple<int64_t, int64_t, int64_t>, SendAt> sends;
  for (int src = 0; src < n; ++src) {
    const auto& v = g.sends[static_cast<size_t>(src)];
    for (size_t i = 0; i + 7 <= v.size(); i += 7) {
      sends[{static_cast<int64_t>(v[i]), src, static_cast<int64_t>(v[i + 5])}] =
          SendAt{static_cast<int64_t>(v[i + 1]), static_cast<int64_t>(v[i + 2]), static_cast<int64_t>(v[i + 3]),
                 static_cast<int64_t>(v[i + 4]), v[i + 6]};
    }
  }
  P2PTimes p2p;
  for (int dst = 0; dst < n; ++dst) {
    const auto& v = g.recvs[static_cast<size_t>(dst)];
    for (size_t i = 0; i + 4 <= v.size(); i += 4) {
      auto it = sends.find({static_cast<int64_t>(v[i]), static_cast<int64_t>(v[i + 1]), dst});
      if (it == sends.end() || it->second.iteration < first_iteration) continue;
      const SendAt& x = it->second;
      p2p[{x.stage, x.dir, x.bytes}].push_back(std::max(0.0, v[i + 3] - std::max(x.post_s, v[i + 2])));
    }
  }
  return p2p;
}

// Collectives of a group kind, grouped by (stage, bytes) (bytes 0 for the data-parallel ones: one size per stage).
struct GroupTimes {
  std::map<std::pair<int64_t, int64_t>, std::vector<double>> times;
  std::map<int64_t, int64_t> bytes, size;  // per stage: the data-parallel all-reduce's bytes; the group's ranks
};

// Data-parallel all-reduce: per replica group and iteration the fastest rank (the last to arrive waits for nobody).
GroupTimes DpAllReduces(const LaunchPlan& plan, const GatheredLogs& g, int64_t first_iteration) {
  GroupTimes out;
  const int64_t n = static_cast<int64_t>(g.allreduces.size());
  for (const auto& group : plan.dp_groups) {
    if (group.size() < 2) continue;
    std::map<int64_t, double> fastest;  // iteration -> time
    int64_t stage = -1;
    for (int64_t rank : group) {
      if (rank < 0 || rank >= n) continue;
      stage = plan.ranks[static_cast<size_t>(rank)].stage;
      const auto& v = g.allreduces[static_cast<size_t>(rank)];
      for (size_t i = 0; i + 4 <= v.size(); i += 4) {
        const int64_t iteration = static_cast<int64_t>(v[i]);
        if (iteration < first_iteration) continue;
        auto f = fastest.find(iteration);
        fastest[iteration] = f == fastest.end() ? v[i + 3] : std::min(f->second, v[i + 3]);
        out.bytes[stage] = static_cast<int64_t>(v[i + 1]);
      }
    }
    for (const auto& [iteration, t] : fastest) out.times[{stage, 0}].push_back(t);
    out.size[stage] = static_cast<int64_t>(group.size());
  }
  return out;
}

// Collectives inside layers of one kind: per TP (CP) group and call (iteration, number) the fastest rank.
GroupTimes TpAllReduces(const LaunchPlan& plan, const GatheredLogs& g, int kind) {
  GroupTimes out;
  const int64_t n = static_cast<int64_t>(g.tp.size());
  const bool cp = kind == TransferLog::kCpRingShift || kind == TransferLog::kCpAllReduce;
  for (const auto& group : cp ? plan.cp_groups : plan.tp_groups) {
    if (group.size() < 2) continue;
    std::map<std::pair<int64_t, int64_t>, std::pair<int64_t, double>> fastest;  // (iteration, seq) -> (bytes, time)
    int64_t stage = -1;
    for (int64_t rank : group) {
      if (rank < 0 || rank >= n) continue;
      stage = plan.ranks[static_cast<size_t>(rank)].stage;
      const auto& v = g.tp[static_cast<size_t>(rank)];
      for (size_t i = 0; i + 5 <= v.size(); i += 5) {
        if (static_cast<int>(v[i + 4]) != kind) continue;
        const std::pair<int64_t, int64_t> call{static_cast<int64_t>(v[i]), static_cast<int64_t>(v[i + 1])};
        auto f = fastest.find(call);
        if (f == fastest.end()) fastest[call] = {static_cast<int64_t>(v[i + 2]), v[i + 3]};
        else f->second.second = std::min(f->second.second, v[i + 3]);
      }
    }
    for (const auto& [call, bt] : fastest) out.times[{stage, bt.first}].push_back(bt.second);
    out.size[stage] = static_cast<int64_t>(group.size());
  }
  return out;
}

std::string P2PRows(const LaunchPlan& plan, const P2PTimes& p2p) {
  std::string md;
  for (const auto& [key, times] : p2p) {
    const auto [stage, dir, bytes] = key;
    const int64_t to = dir == 0 ? stage + 1 : stage - 1;
    // The plan's p2p time of stage q is the send of q's output (an activation of q -> q + 1, or the
    // gradient of q + 1 -> q, of the same size).
    const int64_t predicted_from = dir == 0 ? stage : stage - 1;
    double predicted = 0;
    if (predicted_from >= 0 && predicted_from < static_cast<int64_t>(plan.stages.size())) {
      predicted = plan.stages[static_cast<size_t>(predicted_from)].predicted_p2p_s;
    }
    const double med = Median(times);
    md += fmt::format("| {} stage {} -> {} | {} | {} | {} | {:.2f} GB/s | {} | {} |\n",
                      dir == 0 ? "activation" : "gradient", stage, to, FormatBytes(static_cast<double>(bytes)),
                      times.size(), FormatSeconds(med), med > 0 ? static_cast<double>(bytes) / med / 1e9 : 0.0,
                      predicted > 0 ? FormatSeconds(predicted) : "n/a", Share(predicted, med));
  }
  return md;
}

// The busiest machine's bytes per byte of gradient in one sync of a group of g workers: the
// all-reduce's 2 (g - 1) / g (nccl-tests' busbw), a parameter server's max(1, g / k) (a server
// receives g M / k), BytePS's BytePsTrafficFactor(g, k); ps co-located (k = 0): 2 (g - 1) / g.
double SyncTrafficFactor(const LaunchPlan& plan, double g) {
  const int64_t k = static_cast<int64_t>(plan.servers.size());
  if (plan.dp_comm == DpComm::kParameterServer && plan.ps_colocated) return 2 * (g - 1) / g;
  if (plan.dp_comm == DpComm::kParameterServer) return std::max(1.0, g / static_cast<double>(std::max<int64_t>(1, k)));
  if (plan.dp_comm == DpComm::kBytePS) return BytePsTrafficFactor(static_cast<int64_t>(g), k);
  return 2 * (g - 1) / g;
}

// The data-parallel gradient sync of the launch's architecture, e.g. "dp all-reduce" or "dp ps (1 server)".
std::string DpSyncName(const LaunchPlan& plan) {
  if (!DpCommUsesServers(plan.dp_comm)) return "dp all-reduce";
  if (plan.ps_colocated) return "dp ps (colocated)";
  return fmt::format("dp {} ({} server{})", DpCommName(plan.dp_comm), plan.servers.size(),
                     plan.servers.size() == 1 ? "" : "s");
}

// Per stage: the measured sync seconds per iteration (median of the fastest rank per group and
// iteration) against the plan's prediction for its architecture, in plain seconds.
std::string DpSyncTable(const LaunchPlan& plan, const GroupTimes& dp) {
  if (dp.times.empty()) return "";
  std::string md = fmt::format(
      "Data-parallel gradient sync per iteration, dp_comm {}{} (the all-reduce family runs as the MPI library's "
      "MPI_Allreduce, which picks its own algorithm; the prediction is the plan's for the named architecture).\n\n",
      DpCommName(plan.dp_comm),
      plan.servers.empty()
          ? ""
          : fmt::format(" with {} server rank{}", plan.servers.size(), plan.servers.size() == 1 ? "" : "s"));
  md +=
      "| stage | workers | gradient bytes per sync (B) | measured (s/iteration) | predicted (s/iteration) | measured / "
      "predicted |\n|---|---|---|---|---|---|\n";
  for (const auto& [key, times] : dp.times) {
    const int64_t stage = key.first;
    const double med = Median(times), predicted = plan.stages[static_cast<size_t>(stage)].predicted_dp_allreduce_s;
    md += fmt::format("| {} | {} | {} | {:.6f} | {} | {} |\n", stage, dp.size.at(stage), dp.bytes.at(stage), med,
                      predicted > 0 ? fmt::format("{:.6f}", predicted) : "n/a",
                      predicted > 0 ? fmt::format("{:.2f}", med / predicted) : "n/a");
  }
  return md + "\n";
}

// Collective rows, bandwidth as nccl-tests' busbw (a ring shift: its message over its time; a
// parameter server's or BytePS's sync: the busiest machine's bytes over its time).
std::string CollectiveRows(const LaunchPlan& plan, const GroupTimes& dp, const std::vector<GroupTimes>& in_layers) {
  std::string md;
  for (const auto& [key, times] : dp.times) {
    const int64_t stage = key.first;
    const double med = Median(times), bytes = static_cast<double>(dp.bytes.at(stage)),
                 g = static_cast<double>(dp.size.at(stage));
    const double predicted = plan.stages[static_cast<size_t>(stage)].predicted_dp_allreduce_s;
    md += fmt::format("| {} stage {} ({} ranks) | {} | {} | {} | {:.2f} GB/s | {} | {} |\n", DpSyncName(plan), stage,
                      dp.size.at(stage), FormatBytes(bytes), times.size(), FormatSeconds(med),
                      med > 0 ? bytes / med * SyncTrafficFactor(plan, g) / 1e9 : 0.0,
                      predicted > 0 ? FormatSeconds(predicted) : "n/a", Share(predicted, med));
  }
  static const char* const kNames[] = {"tp all-reduce", "sp all-gather", "sp reduce-scatter", "cp ring shift",
                                       "cp all-reduce"};
  for (size_t kind = 0; kind < in_layers.size(); ++kind) {
    const GroupTimes& tp = in_layers[kind];
    for (const auto& [key, times] : tp.times) {
      const auto [stage, bytes] = key;
      const double med = Median(times), g = static_cast<double>(tp.size.at(stage));
      const double bus =
          kind == TransferLog::kCpRingShift
              ? 1.0
              : (kind == TransferLog::kSpAllGather || kind == TransferLog::kSpReduceScatter ? 1.0 : 2.0) * (g - 1) / g;
      md += fmt::format("| {} stage {} ({} ranks) | {} | {} | {} | {:.2f} GB/s | n/a | n/a |\n", kNames[kind], stage,
                        tp.size.at(stage), FormatBytes(static_cast<double>(bytes)), times.size(), FormatSeconds(med),
                        med > 0 ? static_cast<double>(bytes) / med * bus / 1e9 : 0.0);
    }
  }
  return md;
}

}  // namespace

Status SummariseTransfers(Communicator& world, const LaunchPlan& plan, const TransferLog& mine, int64_t first_iteration,
                          std::string* markdown) {
  markdown->clear();
  GatheredLogs g;
  PLANNER_RETURN_IF_ERROR(GatherLogs(world, mine, first_iteration, &g));
  if (world.rank() != 0) return Status::OK();
  const P2PTimes p2p = PairMessages(g, first_iteration);
  const GroupTimes dp = DpAllReduces(plan, g, first_iteration);
  std::vector<GroupTimes> in_layers;
  bool any = !p2p.empty() || !dp.times.empty();
  for (int kind = 0; kind < TransferLog::kKinds; ++kind) {
    in_layers.push_back(TpAllReduces(plan, g, kind));
    any = any || !in_layers.back().times.empty();
  }
  if (!any) return Status::OK();
  std::string& md = *markdown;
  md +=
      "Transfers after warm-up against the plan's predictions (from the comm profile when the plan was solved with "
      "`--comm-profile`, else the cluster's datasheet). Pipeline message: the receive's end minus the later of the "
      "send's "
      "and the receive's post, all ranks on rank 0's clock. Data-parallel all-reduce: per replica group and iteration "
      "the "
      "fastest rank (the last to arrive waits for nobody); bandwidth as nccl-tests' busbw. Collectives inside layers "
      "(tensor-"
      "parallel all-reduce, sequence parallelism's all-gather and reduce-scatter, context parallelism's ring shift and "
      "loss "
      "all-reduce): per TP or CP group and call the fastest rank, per stage and size (the plan predicts their sum per "
      "layer, "
      "not each call).\n\n";
  md +=
      "| transfer | size | count | measured median | achieved | predicted | share of the predicted rate "
      "|\n|---|---|---|---|---|---|---|\n";
  md += P2PRows(plan, p2p) + CollectiveRows(plan, dp, in_layers) + "\n" + DpSyncTable(plan, dp);
  return Status::OK();
}

}  // namespace planner
