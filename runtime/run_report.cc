#include "runtime/run_report.h"

#include <algorithm>

#include <fmt/format.h>

#include "common/units.h"

namespace planner {

namespace {

// What the CPU kernels compute in, from the weights' measured element size (docs/runtime.md, "Running
// in the plan's precision"): 4-byte weights mean the run stored and computed everything in fp32.
std::string CpuComputeNote(const ReportInputs& in) {
  double weights = 0, params = 0;
  for (const RankFigures& f : in.ranks) weights += f.weight_bytes, params += f.params;
  const double per = params > 0 ? weights / params : 4;
  if (per >= 4) {
    return in.precision == "fp32"
               ? "Every tensor is stored and computed in fp32."
               : fmt::format(
                     "Every tensor was stored and computed in fp32, not in the plan's {}: the measured "
                     "bytes per parameter are fp32's.",
                     in.precision);
  }
  const std::string gemm = in.precision == "fp8"
                               ? "their GEMM operands quantised to FP8 e4m3 with per-tensor scaling (emulated), "
                               : fmt::format("their GEMM operands rounded to {}, ", in.precision);
  return fmt::format(
      "Weights are stored in {} ({:.0f} B per element); the CPU kernels decode them and compute in fp32 with {}fp32 "
      "accumulation; gradients, masters and optimizer moments are fp32.",
      in.precision == "fp8" ? "bf16" : in.precision, per, gemm);
}

std::string Heading(const LaunchPlan& L, const ReportInputs& in) {
  const size_t n = L.ranks.size(), iterations = in.loss.size(), warm = static_cast<size_t>(in.warmup);
  std::string seq = L.cp > 1 ? fmt::format(", cp {} (ring attention)", L.cp) : "";
  if (L.ep > 1) seq += fmt::format(", ep {}", L.ep);
  if (L.sequence_parallel) seq += ", sequence parallel";
  std::string rep =
      fmt::format("# Run of {} on {} ranks (tp-pp-dp {}-{}-{}{}, {}, b={} x m={})\n\n", in.model_name, n, L.tp, L.pp,
                  L.dp, seq, ScheduleName(in.layout.schedule), L.microbatch_size, in.layout.microbatches);
  rep += fmt::format("| figure | measured (median of {} iterations after {} warm-up) | predicted |\n|---|---|---|\n",
                     iterations - warm, warm);
  rep += fmt::format("| iteration | {} | {} |\n", FormatSeconds(in.median_iteration_s),
                     FormatSeconds(L.predicted_iteration_s));
  rep += fmt::format("| bubble fraction | {:.1f}% | {:.1f}% |\n", 100 * in.bubble_fraction,
                     100 * L.predicted_bubble_fraction);
  if (in.comm_only) {
    rep += "| loss | n/a: communication only (`--comm-only`: zeros instead of every layer, no optimizer) | |\n\n";
  } else {
    rep += fmt::format("| loss first -> last | {:.4f} -> {:.4f} | falls |\n\n", in.loss.front(), in.loss.back());
  }
  if (!in.loss_scaling.empty()) rep += in.loss_scaling + "\n\n";
  return rep;
}

std::string RankRows(const LaunchPlan& L, const ReportInputs& in) {
  std::string rep =
      "Memory: measured = the allocator's peak on the rank's device (parameters, gradients, optimizer state, "
      "activations, workspaces); predicted = the plan's, in the plan's dtype and bytes per parameter.\n\n";
  rep +=
      "| rank | stage | compute per iteration | communication | idle | predicted compute (m x stage) | peak memory | "
      "predicted memory |\n"
      "|---|---|---|---|---|---|---|---|\n";
  for (size_t r = 0; r < in.ranks.size(); ++r) {
    const RankFigures& f = in.ranks[r];
    double rs_pred = 0, mem_pred = 0;  // the rank's chunks
    for (int64_t c = 0; c * in.layout.positions < static_cast<int64_t>(L.stages.size()); ++c) {
      const int64_t q = ChunkStage(L.schedule, c, L.ranks[r].stage, in.layout.positions);
      rs_pred += L.stages[static_cast<size_t>(q)].predicted_compute_s;
      mem_pred = std::max(mem_pred, L.stages[static_cast<size_t>(q)].predicted_peak_memory_bytes);
    }
    rep += fmt::format(
        "| {} | {} | {} | {} | {} | {} | {:.4f} GiB | {:.4f} GiB |\n", r, L.ranks[r].stage, FormatSeconds(f.compute_s),
        FormatSeconds(f.comm_s), FormatSeconds(std::max(0.0, in.median_iteration_s - f.compute_s - f.comm_s)),
        FormatSeconds(rs_pred * static_cast<double>(in.layout.microbatches)), f.peak_gib, mem_pred / kGiB);
  }
  return rep;
}

// Per rank: the model state it holds (weights + gradients + masters + optimizer moments, from the
// tensors' element sizes) and its bytes per parameter against the plan's. The runtime keeps every
// replica's whole optimizer state (ZeRO-0), so the plan's figure is StateBytesPerParam at stage 0.
std::string StateRows(const ReportInputs& in) {
  if (in.comm_only) return "";
  std::string rep = fmt::format(
      "\nModel state ({} run): measured = the rank's weights, gradients, fp32 masters and fp32 optimizer moments, "
      "counted from "
      "the tensors' element sizes at the run's end; predicted = the plan's bytes per parameter (ZeRO-0, as this "
      "runtime keeps it). "
      "{}{}{}\n\n",
      in.precision, CpuComputeNote(in), in.state_note.empty() ? "" : " ", in.state_note);
  rep +=
      "| rank | parameters | model state | bytes per parameter | predicted bytes per parameter "
      "|\n|---|---|---|---|---|\n";
  for (size_t r = 0; r < in.ranks.size(); ++r) {
    const RankFigures& f = in.ranks[r];
    rep += fmt::format("| {} | {:.0f} | {:.4f} MiB | {:.2f} | {:.2f} |\n", r, f.params, f.state_bytes / kMiB,
                       f.params > 0 ? f.state_bytes / f.params : 0.0, in.plan_bytes_per_param);
  }
  return rep;
}

// Per pipeline position (a stage; its chunks when interleaved): the all-to-alls of its MoE layers (token
// dispatch and combine, forward and backward, and the row counts' exchange), the slowest rank's median
// seconds per iteration, against the plan's exposed all-to-all time (ep_comm_seconds x m) when it has one.
std::string AllToAllRows(const LaunchPlan& L, const ReportInputs& in) {
  if (in.a2a.empty()) return "";
  std::string rep = fmt::format(
      "\nExpert parallelism (ep {}): all-to-alls per iteration (the slowest rank of each stage).\n\n", L.ep);
  rep += "| stage | all-to-alls per iteration | measured | predicted |\n|---|---|---|---|\n";
  for (int64_t pos = 0; pos < in.layout.positions; ++pos) {
    double calls = 0, worst = 0, pred = 0;
    for (size_t r = 0; r < L.ranks.size() && r < in.a2a.size(); ++r) {
      if (L.ranks[r].stage != pos) continue;
      calls = std::max(calls, in.a2a[r].calls);
      worst = std::max(worst, in.a2a[r].seconds);
    }
    for (int64_t c = 0; c * in.layout.positions < static_cast<int64_t>(L.stages.size());
         ++c) {  // its chunks (DualPipeV: the V)
      pred += L.stages[static_cast<size_t>(ChunkStage(L.schedule, c, pos, in.layout.positions))].predicted_ep_comm_s;
    }
    rep += fmt::format("| {} | {:.0f} | {} | {} |\n", pos, calls, FormatSeconds(worst),
                       pred > 0 ? FormatSeconds(pred) : std::string("n/a"));
  }
  return rep;
}

// dp_comm ps / byteps: each process's data bytes per gradient sync, against the split's (worker:
// M - own part + (n - 1) own part; server: n x its part), M the largest group's gradient bytes of a sync.
std::string DpTrafficRows(const LaunchPlan& L, const ReportInputs& in) {
  if (in.dp_traffic.empty()) return "";
  const size_t workers = L.ranks.size();
  std::string rep = fmt::format(
      "\nSummation traffic (dp_comm {}, {} server ranks): data bytes per gradient sync of each process (headers not "
      "counted).\n\n",
      DpCommName(L.dp_comm), L.servers.size());
  rep += "| rank | role | syncs | sent per sync (B) | received per sync (B) |\n|---|---|---|---|---|\n";
  for (size_t r = 0; r < in.dp_traffic.size(); ++r) {
    const SyncTraffic& t = in.dp_traffic[r];
    rep += fmt::format("| {} | {} | {} | {:.0f} | {:.0f} |\n", r,
                       r < workers ? fmt::format("worker (stage {})", L.ranks[r].stage) : "server", t.syncs,
                       t.sent_bytes, t.received_bytes);
  }
  return rep;
}

}  // namespace

std::string RunReportMarkdown(const LaunchPlan& L, const ReportInputs& in) {
  std::string rep = Heading(L, in) + RankRows(L, in) + StateRows(in) + AllToAllRows(L, in) + DpTrafficRows(L, in);
  if (!in.transfers_md.empty()) {
    rep += "\n" + in.transfers_md;
    if (L.ranks.size() > 1) {
      rep += fmt::format("(Clock offsets to rank 0 estimated within {} at start.)\n\nTransport: {}.\n",
                         FormatSeconds(in.clock_error_s), in.transport);
    }
  }
  return rep;
}

}  // namespace planner
