#include "runtime/summation_service.h"

#include <algorithm>
#include <cstring>
#include <thread>

#include <fmt/format.h>

namespace planner {

namespace {

// A header travels as 4 floats holding two int64 bit patterns (op, count): op 1 = a sync, 0 = done.
constexpr int64_t kHeaderFloats = 4;

void EncodeHeader(int64_t op, int64_t count, float* h) {
  const int64_t v[2] = {op, count};
  std::memcpy(h, v, sizeof v);
}

void DecodeHeader(const float* h, int64_t* op, int64_t* count) {
  int64_t v[2];
  std::memcpy(v, h, sizeof v);
  *op = v[0];
  *count = v[1];
}

// Near-equal cut of [begin, begin + total) into `parts` (the first total % parts one longer).
std::vector<SyncPart> Cut(int64_t begin, int64_t total, int64_t parts) {
  std::vector<SyncPart> out;
  for (int64_t i = 0; i < parts; ++i) {
    const int64_t len = total / parts + (i < total % parts ? 1 : 0);
    out.push_back({begin, len});
    begin += len;
  }
  return out;
}

// Sums `n` blocks of `len` floats (block w at blocks[w]) in order 0..n-1 into out.
void SumInOrder(const std::vector<const float*>& blocks, int64_t len, float* out) {
  std::vector<float> acc(blocks[0], blocks[0] + len);
  for (size_t w = 1; w < blocks.size(); ++w) {
    for (int64_t x = 0; x < len; ++x) acc[static_cast<size_t>(x)] += blocks[w][x];
  }
  std::memcpy(out, acc.data(), static_cast<size_t>(len) * sizeof(float));
}

// One server's loop for one group: headers, pushes, the sum in worker order, the pull.
Status ServeOne(Communicator* g, DpComm mode, int64_t n, int64_t k, SyncTraffic* t) {
  const int64_t c = g->rank() - n;
  std::vector<float> headers(static_cast<size_t>(n * kHeaderFloats)), buf, sum;
  while (true) {
    std::vector<P2POp> ops;
    for (int64_t w = 0; w < n; ++w)
      ops.push_back({false, static_cast<int>(w), headers.data() + w * kHeaderFloats, kHeaderFloats});
    PLANNER_RETURN_IF_ERROR(g->GroupSendRecv(ops));
    int64_t op0 = 0, count = 0;
    DecodeHeader(headers.data(), &op0, &count);
    for (int64_t w = 1; w < n; ++w) {
      int64_t op = 0, cw = 0;
      DecodeHeader(headers.data() + w * kHeaderFloats, &op, &cw);
      if (op != op0 || cw != count) {
        return Status::CommError(
            fmt::format("summation server {}: worker 0 sent ({}, {} floats) but worker {} ({}, {} floats)", c, op0,
                        count, w, op, cw));
      }
    }
    if (op0 == 0) return Status::OK();
    const SyncPart part = SplitForSync(mode, count, n, k).server[static_cast<size_t>(c)];
    if (part.count == 0) continue;
    buf.resize(static_cast<size_t>(n * part.count));
    sum.resize(static_cast<size_t>(part.count));
    ops.clear();
    std::vector<const float*> blocks;
    for (int64_t w = 0; w < n; ++w) {
      ops.push_back({false, static_cast<int>(w), buf.data() + w * part.count, part.count});
      blocks.push_back(buf.data() + w * part.count);
    }
    PLANNER_RETURN_IF_ERROR(g->GroupSendRecv(ops));
    SumInOrder(blocks, part.count, sum.data());
    ops.clear();
    for (int64_t w = 0; w < n; ++w) ops.push_back({true, static_cast<int>(w), sum.data(), part.count});
    PLANNER_RETURN_IF_ERROR(g->GroupSendRecv(ops));
    const double bytes = static_cast<double>(n * part.count) * sizeof(float);
    t->received_bytes += bytes;
    t->sent_bytes += bytes;
    ++t->syncs;
  }
}

}  // namespace

SyncParts SplitForSync(DpComm mode, int64_t count, int64_t n, int64_t k) {
  SyncParts p;
  if (mode == DpComm::kParameterServer && k == 0) {  // co-located: worker i owns contiguous shard i
    p.worker = Cut(0, count, n);
    return p;
  }
  if (mode == DpComm::kParameterServer) {
    p.server = Cut(0, count, std::max<int64_t>(1, k));
    p.worker.assign(static_cast<size_t>(n), SyncPart{count, 0});
    return p;
  }
  const BytePsSplit s = BytePsOptimalSplit(n, k);
  const int64_t per_server = k > 0 ? static_cast<int64_t>(s.cpu_share * static_cast<double>(count)) : 0;
  for (int64_t c = 0; c < k; ++c) p.server.push_back({c * per_server, per_server});
  p.worker = Cut(k * per_server, count - k * per_server, n);
  return p;
}

Status SummationClient::Push(float* data, const SyncParts& p, int64_t count, std::vector<float>* others) {
  const int64_t me = group_->rank();
  const SyncPart mine = p.worker[static_cast<size_t>(me)];
  std::vector<float> headers(static_cast<size_t>(k_ * kHeaderFloats));
  others->resize(static_cast<size_t>(n_ * mine.count));
  std::vector<P2POp> ops;
  for (int64_t c = 0; c < k_; ++c) {
    EncodeHeader(1, count, headers.data() + c * kHeaderFloats);
    ops.push_back({true, static_cast<int>(n_ + c), headers.data() + c * kHeaderFloats, kHeaderFloats});
    const SyncPart s = p.server[static_cast<size_t>(c)];
    if (s.count > 0) ops.push_back({true, static_cast<int>(n_ + c), data + s.begin, s.count});
    traffic_.sent_bytes += static_cast<double>(s.count) * sizeof(float);
  }
  for (int64_t j = 0; j < n_; ++j) {
    const SyncPart w = p.worker[static_cast<size_t>(j)];
    if (j == me) continue;
    if (w.count > 0) ops.push_back({true, static_cast<int>(j), data + w.begin, w.count});
    if (mine.count > 0) ops.push_back({false, static_cast<int>(j), others->data() + j * mine.count, mine.count});
    traffic_.sent_bytes += static_cast<double>(w.count) * sizeof(float);
    traffic_.received_bytes += static_cast<double>(mine.count) * sizeof(float);
  }
  return group_->GroupSendRecv(ops);
}

Status SummationClient::Reduce(float* data, int64_t count) {
  if (count <= 0) return Status::OK();
  const int64_t me = group_->rank();
  const SyncParts p = SplitForSync(mode_, count, n_, k_);
  const SyncPart mine = p.worker[static_cast<size_t>(me)];
  PLANNER_RETURN_IF_ERROR(Push(data, p, count, &scratch_));
  if (mine.count > 0) {  // this worker's summation service: part `me` of every worker, in worker order
    std::vector<const float*> blocks;
    for (int64_t j = 0; j < n_; ++j) blocks.push_back(j == me ? data + mine.begin : scratch_.data() + j * mine.count);
    SumInOrder(blocks, mine.count, data + mine.begin);
  }
  std::vector<P2POp> ops;
  for (int64_t j = 0; j < n_; ++j) {
    const SyncPart w = p.worker[static_cast<size_t>(j)];
    if (j == me) continue;
    if (mine.count > 0) ops.push_back({true, static_cast<int>(j), data + mine.begin, mine.count});
    if (w.count > 0) ops.push_back({false, static_cast<int>(j), data + w.begin, w.count});
    traffic_.sent_bytes += static_cast<double>(mine.count) * sizeof(float);
    traffic_.received_bytes += static_cast<double>(w.count) * sizeof(float);
  }
  for (int64_t c = 0; c < k_; ++c) {
    const SyncPart s = p.server[static_cast<size_t>(c)];
    if (s.count > 0) ops.push_back({false, static_cast<int>(n_ + c), data + s.begin, s.count});
    traffic_.received_bytes += static_cast<double>(s.count) * sizeof(float);
  }
  ++traffic_.syncs;
  return group_->GroupSendRecv(ops);
}

Status SummationClient::Done() {
  if (k_ == 0) return Status::OK();
  std::vector<float> headers(static_cast<size_t>(k_ * kHeaderFloats));
  std::vector<P2POp> ops;
  for (int64_t c = 0; c < k_; ++c) {
    EncodeHeader(0, 0, headers.data() + c * kHeaderFloats);
    ops.push_back({true, static_cast<int>(n_ + c), headers.data() + c * kHeaderFloats, kHeaderFloats});
  }
  return group_->GroupSendRecv(ops);
}

Status OpenDpSync(const LaunchPlan& L, Communicator& world, DpSyncComms* out) {
  if (!DpCommUsesServers(L.dp_comm)) return Status::OK();
  const int64_t workers = static_cast<int64_t>(L.ranks.size()), k = static_cast<int64_t>(L.servers.size());
  const int64_t me = world.rank();
  out->server = me >= workers;
  if (k > 0) PLANNER_RETURN_IF_ERROR(world.Split(out->server ? 1 : 0, static_cast<int>(me), &out->workers));
  for (const auto& g : L.dp_groups) {
    if (g.size() < 2) continue;  // nothing to sum
    const int64_t n = static_cast<int64_t>(g.size());
    const auto it = std::find(g.begin(), g.end(), me);
    const bool member = it != g.end() || out->server;
    const int64_t key = it != g.end() ? it - g.begin() : out->server ? n + me - workers : me;
    std::unique_ptr<Communicator> c;
    PLANNER_RETURN_IF_ERROR(world.Split(member ? 0 : 1, static_cast<int>(key), &c));
    if (!member) continue;
    c->set_timeout_seconds(L.run.timeout_s);
    if (out->server) {
      out->served.push_back(std::move(c));
      out->served_workers.push_back(n);
    } else {
      out->client = std::make_unique<SummationClient>(std::move(c), L.dp_comm, n, k);
    }
  }
  return Status::OK();
}

Status ServeGroups(DpSyncComms& sync, DpComm mode, int64_t servers, SyncTraffic* out) {
  const size_t groups = sync.served.size();
  std::vector<SyncTraffic> t(groups);
  std::vector<Status> st(groups);
  if (groups > 1 && !ConcurrentCommunicatorsSafe(*sync.served[0])) {
    return Status::NotSupported(
        "a summation server serves each data-parallel group on its own thread, which needs MPI_THREAD_MULTIPLE; "
        "this MPI library did not grant it: use one data-parallel group (pp 1, tp 1) or an all-reduce dp_comm");
  }
  std::vector<std::thread> threads;
  for (size_t i = 0; i < groups; ++i) {
    auto serve = [&, i] { st[i] = ServeOne(sync.served[i].get(), mode, sync.served_workers[i], servers, &t[i]); };
    if (groups == 1) serve();
    else threads.emplace_back(serve);
  }
  for (auto& th : threads) th.join();
  for (const SyncTraffic& x : t) {
    out->sent_bytes += x.sent_bytes;
    out->received_bytes += x.received_bytes;
    out->syncs += x.syncs;
  }
  for (const Status& s : st) PLANNER_RETURN_IF_ERROR(s);
  return Status::OK();
}

}  // namespace planner
