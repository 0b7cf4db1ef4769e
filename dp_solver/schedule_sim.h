// Event simulator of pipeline schedules: given per-stage forward (F),
// backward-input (B) and backward-weight (W) times and the p2p time of each
// stage boundary, it plays the exact operation order of a schedule on every
// device and returns the makespan, per-device busy time and the timeline.
// GPipe, 1F1B (PipeDream-Flush), interleaved 1F1B (Megatron's order), ZB-H1
// (list scheduling under the ZB-H1 memory caps) and PipeDream's asynchronous
// 1F1B (no flush), and DualPipeV (DeepSeek-V3's V-shaped bidirectional schedule,
// torch's ScheduleDualPipeV). docs/cost_model.md section 4. Pure; thread-safe.
#pragma once

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "common/status.h"
#include "spec/kinds.h"

namespace planner {

struct SimStage {
  double forward_s = 0;
  double backward_input_s = 0;
  double backward_weight_s = 0;
  double send_s =
      0;  // overlapped p2p of this stage's output to the next (link latency only); the gradient costs the same
  double exposed_send_s = 0;  // exposed p2p: the sender is busy ('C' event) after F of this stage, and
                              // the next stage's device after its B, sending the gradient back
};

struct SimEvent {
  int32_t device = 0;
  int32_t stage = 0;  // virtual stage
  int32_t microbatch = 0;
  char kind = 'F';  // 'F', 'B' (backward-input, or the whole backward), 'W', 'C' (exposed send)
  double start_s = 0, end_s = 0;
  bool held = false;  // its output (activation or gradient) leaves with the device's next event that is not
                      // held: DualPipeV's overlapped F&B pairs and full backwards (B, then its W) send at their end
};

struct SimResult {
  double makespan_s = 0;
  std::vector<double> busy_s;    // per device
  double bubble_fraction = 0;    // 1 - sum(busy) / (devices x makespan)
  std::vector<SimEvent> events;  // filled when requested
  // The simulation stopped early: some device was bound to end after the cutoff given (its free time
  // plus the compute it had left). makespan_s is then that bound, a lower bound of the whole run's,
  // above the cutoff; busy_s and bubble_fraction cover the part played.
  bool cut = false;
  bool closed_form = false;  // from UniformMakespan, not played
};

// `stages` holds p * v virtual stages; virtual stage q runs on device
// StagePosition(schedule, q, p): q % p (Megatron's interleaved placement; v = 1
// for the single-chunk schedules), or DualPipeV's V (v = 2: device r runs stages
// r and 2p - 1 - r; no transfer between stages p - 1 and p). Returns
// InvalidArgument when the schedule's preconditions fail (interleaved: m % p ==
// 0; dualpipev: CheckDualPipeV). With a finite cutoff_s (and no events
// recorded) the simulation stops as soon as the makespan is bound to exceed
// it (SimResult::cut): the search's k-th best, for candidates that cannot rank.
Status SimulateSchedule(Schedule schedule, const std::vector<SimStage>& stages, int64_t devices, int64_t microbatches,
                        bool record_events, SimResult* out, double cutoff_s = std::numeric_limits<double>::infinity());

// A lower bound on SimulateSchedule's makespan, for pruning: on device r,
// every operation waits for the first microbatch's forward through the
// earlier stages (head), the device then works m x its per-microbatch load,
// and for the fixed-order schedules (GPipe, 1F1B, interleaved, PipeDream),
// whose last operation on every device is the chunk-0 backward of the last
// microbatch, that backward still has to flow through the earlier stages
// (tail). ZB-H1 gets no tail (its W may come last).
// DualPipeV's preconditions (torch's ScheduleDualPipeV): v = 2 chunks per device and at least as
// many microbatches as stages, m >= 2p. InvalidArgument naming the rule otherwise.
Status CheckDualPipeV(int64_t p, int64_t v, int64_t m);

double MakespanLowerBound(Schedule schedule, const std::vector<SimStage>& stages, int64_t devices,
                          int64_t microbatches);

// PipeDream's asynchronous 1F1B over replicated stages: stage s has
// replicas[s] devices (numbered stage by stage), microbatch j runs on replica
// j mod replicas[s] of every stage (round robin), and each device keeps
// in_flight[s] microbatches between forward and backward (warm-up of
// in_flight[s] - 1 forwards, then one forward one backward). `stages` holds
// one entry per stage (no interleaving).
Status SimulateReplicated(const std::vector<SimStage>& stages, const std::vector<int64_t>& replicas,
                          const std::vector<int64_t>& in_flight, int64_t microbatches, bool record_events,
                          SimResult* out);

// Closed forms on uniform stages (tests compare the simulator with them):
// GPipe/1F1B: (m + p - 1)(F + B + W); interleaved: (m + (p - 1)/v)(F + B + W)
// with per-device F, B, W; ZB-H1: m (F + B + W) + (p - 1)(F + B - W); DualPipeV (per-chunk F, B, W;
// for F = B, W <= B): 2m (F + B + W) + (p - 1)(F + 2B - W).
double ClosedFormMakespan(Schedule schedule, double f, double b, double w, int64_t p, int64_t m, int64_t v);

// The search's shortcut (docs/cost_model.md section 5): where every virtual stage costs the same and
// no p2p time is charged (one stage, or sends of zero seconds), GPipe, 1F1B and interleaved 1F1B take
// their closed form above, exact for any F, B, W (tests/dp_solver/schedule_sim_test.cc holds the
// simulator to it on random instances); *out gets the makespan, each device's busy time and the
// bubble, as SimulateSchedule would. False, *out untouched, where the stages differ, a send costs
// time, the schedule has no closed form here (ZB-H1, DualPipeV, PipeDream) or its preconditions fail.
bool UniformMakespan(Schedule schedule, const std::vector<SimStage>& stages, int64_t devices, int64_t microbatches,
                     SimResult* out);

}  // namespace planner
