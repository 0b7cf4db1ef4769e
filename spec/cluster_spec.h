// ClusterSpec: the GPUs and the network a plan is made for, read from
// cluster.yaml (docs/formats.md). Topology levels go innermost first: level 0
// groups `size` GPUs (a node), level 1 groups `size` level-0 units, and so on.
// Bandwidths are per-GPU bus bandwidths (nccl-tests busbw, decimal GB/s) on
// that level. Plain value type.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "common/status.h"
#include "spec/layer.h"

namespace planner {

// Measured times (bytes, seconds) from a comm profile, in increasing size, and the number of
// ranks they were measured on.
struct MeasuredCurve {
  std::vector<std::pair<double, double>> points;
  int64_t group = 0;
  bool usable() const { return !points.empty() && group > 1; }
};

struct TopologyLevel {
  std::string name;
  int64_t size = 1;               // units of the level below in one unit of this level
  double bandwidth_GBps = 0;      // per-GPU bus bandwidth of a collective on this level
  double p2p_bandwidth_GBps = 0;  // per-GPU send/recv bandwidth (0: same as bandwidth_GBps)
  double latency_us = 0;          // per-step latency (alpha) on this level
  // Measured curves from a comm profile (planner solve --comm-profile); when present the cost
  // model interpolates them instead of the alpha-beta line (docs/cost_model.md section 3).
  MeasuredCurve measured_allreduce;
  // The all-reduce as a gradient all-reduce meets it, after a backward's compute (a cold curve
  // taken with --gap-ms): used for data-parallel gradients when present, else measured_allreduce.
  MeasuredCurve measured_grad_allreduce;
  // The all-reduce of data just computed (a warm curve, when the profile also has cold ones): used
  // for tensor-parallel all-reduces when present, else measured_allreduce.
  MeasuredCurve measured_tp_allreduce;
  std::vector<std::pair<double, double>> measured_p2p;  // send/recv (bytes, seconds), increasing size
  // The all-to-all (bytes each rank sends in all, seconds), for expert parallelism's dispatch and combine.
  MeasuredCurve measured_alltoall;
};

// Spare CPU machines on the GPU nodes' network (BytePS's setting; `cpu_machines:` in cluster.yaml):
// the summation servers of a parameter server or of BytePS (docs/cost_model.md, "Data-parallel
// communication architectures"). count 0: the cluster declares none.
struct CpuMachines {
  int64_t count = 0;
  double bandwidth_GBps = 0;  // network bandwidth of one CPU machine, each way
  double sum_GBps = 0;        // memory bandwidth its summation streams at (bytes of summands read per second)
};

// How a node's GPUs are connected (topology[0]'s `intra_node`): NVLink (all GPUs peers) or
// PCIe-only (GPUs behind PCIe switches, BytePS's CPU-assisted aggregation applies).
enum class IntraNode { kNvlink, kPcie };

struct ClusterSpec {
  std::string name;
  std::string path;
  std::string digest;
  std::string gpu_name;
  std::map<std::string, double> peak_tflops;  // by dtype name ("fp16", "bf16", "fp32", "tf32")
  double memory_GiB = 0;
  double usable_memory_GiB = 0;
  double hbm_bandwidth_GBps = 0;
  double power_cap_W = 0;   // gpu.power_cap_W: the GPUs' power limit below their TDP (nvidia-smi -pl); 0: none
  double efficiency = 0.5;  // sustained fraction of peak for matrix FLOPs (analytic costs), every precision
  std::map<std::string, double>
      efficiency_by_dtype;      // `efficiency: {bf16: x, fp8: y}`: per precision, else `efficiency`
  double hbm_efficiency = 0.8;  // sustained fraction of HBM bandwidth for memory-bound work
  // host_op_scale: the nodes' host CPU seconds per eager framework op over an x86 DGX host's (the reference the
  // engines' host figures were measured on, e.g. megatron-core's moe_host.launch_us); 1: such a host. Grace: 2.75.
  double host_op_scale = 1;
  std::vector<TopologyLevel> levels;
  CpuMachines cpu_machines;
  // The node (topology[0]'s unit): its intra-node topology, for pcie the bandwidth of one PCIe
  // switch's link to the CPU (GPU<->CPU copies) and the GPUs behind one switch, and its network
  // bandwidth (0: not given; NodeNetworkGBps derives it).
  IntraNode intra_node = IntraNode::kNvlink;
  double pcie_GBps = 0;
  int64_t gpus_per_pcie_switch = 0;  // 0: half the node (two switches), at least 1
  double network_GBps = 0;

  int64_t TotalGpus() const;
  // GPUs of one machine for the data-parallel architectures: topology[0]'s size when the cluster
  // has more than one level, else 1 (a one-level cluster's ranks are each a machine: local-cpu).
  int64_t GpusPerMachine() const;
  // One machine's network bandwidth each way: topology[0]'s network_GBps when given, else the
  // per-GPU bandwidth of level 1 x GPUs per node (one NIC per GPU, as DGX nodes); one level: its bandwidth.
  double NodeNetworkGBps() const;
  // Latency of one message between machines: level 1's latency_us (one level: level 0's), seconds.
  double NetworkLatencySeconds() const;
  // GPUs in one unit of level `level` (level 0: a node).
  int64_t GpusPerUnit(size_t level) const;
  // Peak FLOP/s for `dtype` (falls back to fp16 for bf16 and the reverse).
  double PeakFlops(DType dtype) const;
  double UsableMemoryBytes() const;
  // The GEMM efficiency for `dtype`: its entry of an `efficiency:` map (fp16 and bf16 stand in for
  // each other, and for fp8 when it has none), else the scalar.
  double Efficiency(DType dtype) const;
};

Status LoadClusterSpec(const std::string& path, ClusterSpec* out);
Status ParseClusterSpec(const std::string& path, const std::string& text, ClusterSpec* out);

}  // namespace planner
