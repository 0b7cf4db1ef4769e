#include "runtime/checkpoint.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include <fmt/format.h>

#include "common/crc32c.h"
#include "common/digest.h"
#include "common/file_writer.h"
#include "runtime/stage.h"

namespace planner {

namespace {

namespace fs = std::filesystem;

constexpr char kMagic[8] = {'P', 'L', 'N', 'C', 'K', 'P', 'T', '2'};
constexpr int64_t kMaxIteration = 10000000;  // planner run --iterations' bound

struct Header {
  char magic[8];
  int64_t iteration, rank, ranks, param_floats, state_floats;
  char model_digest[16], layout_digest[16];
};
static_assert(sizeof(Header) == 80, "the documented 80-byte header");

int64_t ParameterFloats(const std::vector<Param*>& params) {
  int64_t n = 0;
  for (Param* prm : params) n += prm->value.numel();
  return n;
}

void CopyDigest(const std::string& hex, char (&out)[16]) {
  std::memset(out, '0', sizeof out);
  std::memcpy(out, hex.data(), std::min(hex.size(), sizeof out));
}

std::string DigestField(const char (&d)[16]) {
  std::string s(d, sizeof d);
  for (char& c : s)
    if (!std::isxdigit(static_cast<unsigned char>(c))) c = '?';
  return s;
}

// The bytes of `path`; false when it cannot be read.
bool ReadBytes(const std::string& path, std::string* out) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return false;
  std::stringstream ss;
  ss << in.rdbuf();
  *out = ss.str();
  return !in.bad();
}

// An AtomicFile that keeps the CRC-32C and size of what it has written.
struct ChecksummedFile {
  AtomicFile file;
  CheckpointFile sum;
  Status Write(const void* p, size_t n) {
    sum.crc32c = Crc32c(p, n, sum.crc32c);
    sum.bytes += static_cast<int64_t>(n);
    return file.Write(p, n);
  }
};

}  // namespace

CheckpointIdentity IdentityOf(const LaunchPlan& L, const ModelSpec& model) {
  CheckpointIdentity id;
  id.model_digest = !L.model_digest.empty() ? L.model_digest : model.digest;
  std::string layout = fmt::format(
      "tp {} pp {} dp {} cp {} sp {} ep {} etp {} interleave {} schedule {} optimizer {} ranks {} servers {} stages",
      L.tp, L.pp, L.dp, L.cp, L.sequence_parallel, L.ep, L.etp, L.interleave, static_cast<int>(L.schedule),
      L.run.optimizer, L.ranks.size(), L.servers.size());
  for (const LaunchStage& s : L.stages)
    layout += fmt::format(" {}-{}x{}c{}", s.first_layer, s.last_layer, s.replicas, s.chunk);
  id.layout_digest = DigestHex(layout);
  id.ranks = static_cast<int64_t>(L.ranks.size());
  return id;
}

std::string CheckpointDirectory(const std::string& run_dir) { return (fs::path(run_dir) / "ckpt").string(); }
std::string ManifestPath(const std::string& run_dir) { return (fs::path(run_dir) / "ckpt" / "manifest.yaml").string(); }
std::string RankFilePath(const std::string& run_dir, int64_t iteration, int64_t rank) {
  return (fs::path(run_dir) / "ckpt" / fmt::format("iter-{}", iteration) / fmt::format("rank{}.bin", rank)).string();
}

Status WriteCheckpoint(const std::string& run_dir, const CheckpointIdentity& id, int64_t rank, int64_t iteration,
                       const std::vector<Param*>& params, const Optimizer& optimizer, CheckpointFile* written,
                       const LossScaler* scaler) {
  const std::string path = RankFilePath(run_dir, iteration, rank);
  PLANNER_RETURN_IF_ERROR(MakeDirectories(fs::path(path).parent_path().string()));
  std::vector<float> state = optimizer.State();
  if (scaler != nullptr) {
    const std::vector<float> s = scaler->State();
    state.insert(state.end(), s.begin(), s.end());
  }
  Header h{};
  std::memcpy(h.magic, kMagic, sizeof kMagic);
  h.iteration = iteration, h.rank = rank, h.ranks = id.ranks;
  h.param_floats = ParameterFloats(params), h.state_floats = static_cast<int64_t>(state.size());
  CopyDigest(id.model_digest, h.model_digest);
  CopyDigest(id.layout_digest, h.layout_digest);
  ChecksummedFile f;
  PLANNER_RETURN_IF_ERROR(f.file.Open(path));
  PLANNER_RETURN_IF_ERROR(f.Write(&h, sizeof h));
  for (Param* prm : params) {
    // Mixed precision: the fp32 master, not its rounded 16-bit copy (a resume continues exactly).
    const std::vector<float> v = (prm->master.empty() ? prm->value : prm->master).ToVector();
    PLANNER_RETURN_IF_ERROR(f.Write(v.data(), v.size() * 4));
  }
  PLANNER_RETURN_IF_ERROR(f.Write(state.data(), state.size() * 4));
  PLANNER_RETURN_IF_ERROR(f.file.Commit());
  *written = f.sum;
  return Status::OK();
}

std::string ManifestText(const CheckpointManifest& m) {
  std::string t =
      "# planner checkpoint manifest, written after every rank file was durable (docs/runtime.md, \"Checkpoints\")\n";
  t += fmt::format("format: 1\niteration: {}\ndirectory: {}\nmodel_digest: {}\nlayout_digest: {}\nranks: {}\n",
                   m.iteration, m.directory, m.model_digest, m.layout_digest, m.files.size());
  for (size_t r = 0; r < m.files.size(); ++r)
    t += fmt::format("rank{}: {{bytes: {}, crc32c: {:08x}}}\n", r, m.files[r].bytes, m.files[r].crc32c);
  return t;
}

namespace {

bool ParseInt(std::string_view s, int64_t* out, int base = 10) {
  if (s.empty()) return false;
  const auto r = std::from_chars(s.data(), s.data() + s.size(), *out, base);
  return r.ec == std::errc() && r.ptr == s.data() + s.size();
}

bool IsDigest(const std::string& s) {
  if (s.size() != 16) return false;
  for (char c : s)
    if (!std::isxdigit(static_cast<unsigned char>(c))) return false;
  return true;
}

// "{bytes: N, crc32c: XXXXXXXX}"
bool ParseFileEntry(std::string_view v, CheckpointFile* f) {
  constexpr std::string_view kA = "{bytes: ", kB = ", crc32c: ";
  if (v.substr(0, kA.size()) != kA || v.empty() || v.back() != '}') return false;
  v = v.substr(kA.size(), v.size() - kA.size() - 1);
  const size_t comma = v.find(kB);
  int64_t crc = 0;
  if (comma == std::string_view::npos || v.size() - comma - kB.size() != 8) return false;
  if (!ParseInt(v.substr(0, comma), &f->bytes) || f->bytes < static_cast<int64_t>(sizeof(Header)) ||
      !ParseInt(v.substr(comma + kB.size()), &crc, 16) || crc < 0)
    return false;
  f->crc32c = static_cast<uint32_t>(crc);
  return true;
}

struct Field {
  std::string value;
  int line = 0;
};

Status ReadFields(const std::string& path, const std::string& text, std::map<std::string, Field>* fields) {
  std::istringstream in(text);
  std::string line;
  for (int n = 1; std::getline(in, line); ++n) {
    if (line.empty() || line[0] == '#') continue;
    const size_t colon = line.find(": ");
    if (colon == std::string::npos || colon == 0) {
      return Status::InvalidArgument(
          fmt::format("{}:{}: not 'key: value': {}; the manifest is damaged", path, n, line.substr(0, 80)));
    }
    const std::string key = line.substr(0, colon);
    if (fields->count(key))
      return Status::InvalidArgument(fmt::format("{}:{}: {} appears twice (first on line {}); the manifest is damaged",
                                                 path, n, key, (*fields)[key].line));
    (*fields)[key] = {line.substr(colon + 2), n};
  }
  return Status::OK();
}

}  // namespace

Status ParseManifest(const std::string& path, const std::string& text, CheckpointManifest* out) {
  std::map<std::string, Field> f;
  PLANNER_RETURN_IF_ERROR(ReadFields(path, text, &f));
  auto need = [&](const std::string& key) -> Status {
    return f.count(key) ? Status::OK()
                        : Status::InvalidArgument(fmt::format("{}: no '{}' field; the manifest is damaged", path, key));
  };
  auto bad = [&](const std::string& key, const std::string& want) {
    return Status::InvalidArgument(fmt::format("{}:{}: {}: '{}' is not {}; the manifest is damaged", path, f[key].line,
                                               key, f[key].value.substr(0, 80), want));
  };
  for (const char* k : {"format", "iteration", "directory", "model_digest", "layout_digest", "ranks"})
    PLANNER_RETURN_IF_ERROR(need(k));
  if (f["format"].value != "1") return bad("format", "1 (a manifest of another planner version)");
  CheckpointManifest m;
  int64_t ranks = 0;
  if (!ParseInt(f["iteration"].value, &m.iteration) || m.iteration < 1 || m.iteration > kMaxIteration)
    return bad("iteration", "an iteration from 1 to 10000000");
  m.directory = f["directory"].value;
  if (m.directory != fmt::format("iter-{}", m.iteration)) return bad("directory", fmt::format("iter-{}", m.iteration));
  m.model_digest = f["model_digest"].value, m.layout_digest = f["layout_digest"].value;
  if (!IsDigest(m.model_digest)) return bad("model_digest", "16 hex digits");
  if (!IsDigest(m.layout_digest)) return bad("layout_digest", "16 hex digits");
  if (!ParseInt(f["ranks"].value, &ranks) || ranks < 1 || ranks > 1000000)
    return bad("ranks", "a rank count from 1 to 1000000");
  for (int64_t r = 0; r < ranks; ++r) {
    const std::string key = fmt::format("rank{}", r);
    PLANNER_RETURN_IF_ERROR(need(key));
    CheckpointFile file;
    if (!ParseFileEntry(f[key].value, &file)) return bad(key, "'{bytes: N, crc32c: 8 hex digits}'");
    m.files.push_back(file);
  }
  if (f.size() != static_cast<size_t>(6 + ranks)) {
    for (const auto& [key, field] : f) {
      int64_t r = -1;
      if (key.rfind("rank", 0) == 0 && ParseInt(std::string_view(key).substr(4), &r) && r >= 0 && r < ranks) continue;
      if (key == "format" || key == "iteration" || key == "directory" || key == "model_digest" ||
          key == "layout_digest" || key == "ranks")
        continue;
      return Status::InvalidArgument(
          fmt::format("{}:{}: unknown field '{}'; the manifest is damaged", path, field.line, key.substr(0, 40)));
    }
  }
  *out = std::move(m);
  return Status::OK();
}

namespace {

// Whether `name` is iter-<n>, n decimal without a leading zero: the only checkpoint directory names the
// planner writes.
bool IsIterationDirectoryName(const std::string& name) {
  if (name.rfind("iter-", 0) != 0 || name.size() == 5 || name.size() > 13 || name[5] == '0') return false;
  return std::all_of(name.begin() + 5, name.end(), [](char c) { return c >= '0' && c <= '9'; });
}

// Whether `name` is rank<k>.bin, k decimal.
bool IsRankFileName(const std::string& name) {
  if (name.rfind("rank", 0) != 0 || name.size() <= 8 || name.compare(name.size() - 4, 4, ".bin") != 0) return false;
  return std::all_of(name.begin() + 4, name.end() - 4, [](char c) { return c >= '0' && c <= '9'; });
}

// Whether the regular file `path` starts with a planner checkpoint's magic.
bool HasCheckpointMagic(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  char magic[sizeof kMagic] = {};
  return in.read(magic, sizeof magic) && std::memcmp(magic, kMagic, sizeof kMagic) == 0;
}

// Removes an older checkpoint directory's planner files: rank<k>.bin files with the checkpoint magic and
// AtomicFile's temporaries; then the directory if nothing else is left. A symbolic link, another file
// or a subdirectory is the user's: kept, and named in *kept.
void RemoveOwnCheckpointFiles(const fs::path& dir, std::vector<std::string>* kept) {
  std::error_code ec;
  std::vector<fs::path> own;
  bool foreign = false;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    std::error_code st;
    const bool regular = it->symlink_status(st).type() == fs::file_type::regular;
    // A temporary of a rank file (rank<k>.bin.tmp.<pid>.<n>), or a rank file with the checkpoint magic.
    const size_t tmp = name.find(".tmp.");
    const bool rank_temporary =
        IsAtomicFileTemporary(name) && tmp != std::string::npos && IsRankFileName(name.substr(0, tmp));
    if (regular && (rank_temporary || (IsRankFileName(name) && HasCheckpointMagic(it->path())))) {
      own.push_back(it->path());
    } else {
      foreign = true;
      if (kept->size() < 3) kept->push_back((dir / name).string());
    }
  }
  if (ec) return;
  for (const fs::path& p : own) {
    std::error_code rm;
    fs::remove(p, rm);
  }
  std::error_code rm;
  if (!foreign) fs::remove(dir, rm);  // empty now: remove, not remove_all
}

}  // namespace

Status CommitCheckpoint(const std::string& run_dir, const CheckpointManifest& m, std::vector<std::string>* kept) {
  PLANNER_RETURN_IF_ERROR(WriteFileAtomic(ManifestPath(run_dir), ManifestText(m)));
  // The new checkpoint is complete: the older ones (or half-written ones of a killed job) go, the planner's
  // files only: iter-<n> directories that are directories (not links), their rank files and temporaries.
  std::error_code ec;
  std::vector<std::string> unused;
  if (kept == nullptr) kept = &unused;
  for (fs::directory_iterator it(CheckpointDirectory(run_dir), ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    std::error_code st;
    if (!IsIterationDirectoryName(name) || name == m.directory ||
        it->symlink_status(st).type() != fs::file_type::directory)
      continue;
    RemoveOwnCheckpointFiles(it->path(), kept);
  }
  return Status::OK();
}

namespace {

// The header against the manifest and this launch; `bytes`: the file's size.
Status CheckHeader(const std::string& path, const Header& h, const CheckpointManifest& m, const CheckpointIdentity& id,
                   int64_t rank, int64_t bytes) {
  auto refuse = [&](const std::string& why) { return Status::InvalidArgument(fmt::format("{}: {}", path, why)); };
  if (std::memcmp(h.magic, kMagic, sizeof kMagic) != 0)
    return refuse("not a planner checkpoint file (no PLNCKPT2 magic): corrupt, or from an older planner");
  if (h.iteration != m.iteration) {
    return refuse(
        fmt::format("holds iteration {}, the manifest names {}: a rank file of another checkpoint (ranks would train "
                    "on different iterations)",
                    h.iteration, m.iteration));
  }
  if (h.rank != rank || h.ranks != id.ranks)
    return refuse(fmt::format("is rank {} of {}, wanted rank {} of {}: files swapped or copied", h.rank, h.ranks, rank,
                              id.ranks));
  if (DigestField(h.model_digest) != m.model_digest)
    return refuse(fmt::format("holds model digest {}, the manifest {}: a file of another model",
                              DigestField(h.model_digest), m.model_digest));
  if (DigestField(h.layout_digest) != m.layout_digest)
    return refuse(fmt::format("holds layout digest {}, the manifest {}: a file of another launch",
                              DigestField(h.layout_digest), m.layout_digest));
  const int64_t room = (bytes - static_cast<int64_t>(sizeof h)) / 4;
  if (h.param_floats < 0 || h.state_floats < 0 || h.param_floats > room || h.state_floats > room ||
      h.param_floats + h.state_floats != room || (bytes - static_cast<int64_t>(sizeof h)) % 4 != 0) {
    return refuse(fmt::format(
        "header counts {} parameters and {} optimizer values, the file holds {} bytes of values: corrupt header",
        h.param_floats, h.state_floats, bytes - static_cast<int64_t>(sizeof h)));
  }
  return Status::OK();
}

// Every value finite: a NaN or an infinity would be trained on without a word.
Status CheckFinite(const std::string& path, const std::vector<float>& v, const char* what) {
  for (size_t i = 0; i < v.size(); ++i) {
    if (!std::isfinite(v[i])) {
      return Status::InvalidArgument(fmt::format(
          "{}: {} value {} of {} is {}: the checkpoint is not usable; resume from another run or start again", path,
          what, i, v.size(), std::isnan(v[i]) ? "NaN" : "infinite"));
    }
  }
  return Status::OK();
}

Status ReadManifest(const std::string& run_dir, CheckpointManifest* m) {
  const std::string mpath = ManifestPath(run_dir);
  std::string text;
  std::error_code ec;
  if (!fs::is_regular_file(mpath, ec) || !ReadBytes(mpath, &text)) {
    return Status::NotFound(
        fmt::format("{}: missing: no complete checkpoint (the job ended before its first checkpoint completed, or the "
                    "manifest was deleted); run again without --resume",
                    mpath));
  }
  return ParseManifest(mpath, text, m);
}

}  // namespace

Status VerifyCheckpoint(const std::string& run_dir, const CheckpointIdentity& id, int64_t rank, LoadedCheckpoint* out) {
  CheckpointManifest m;
  PLANNER_RETURN_IF_ERROR(ReadManifest(run_dir, &m));
  const std::string mpath = ManifestPath(run_dir);
  if (m.model_digest != id.model_digest) {
    return Status::InvalidArgument(fmt::format(
        "{}: a checkpoint of another model (model_digest {}, this launch's model {}); resume it with the launch "
        "directory that wrote it",
        mpath, m.model_digest, id.model_digest));
  }
  if (m.layout_digest != id.layout_digest || static_cast<int64_t>(m.files.size()) != id.ranks) {
    return Status::InvalidArgument(fmt::format(
        "{}: a checkpoint of another layout (layout_digest {}, {} ranks; this launch: {}, {} ranks); resume it "
        "with the launch directory that wrote it",
        mpath, m.layout_digest, m.files.size(), id.layout_digest, id.ranks));
  }
  const std::string path = RankFilePath(run_dir, m.iteration, rank);
  const CheckpointFile& want = m.files[static_cast<size_t>(rank)];
  std::error_code ec;
  const bool regular = fs::is_regular_file(path, ec);
  const uintmax_t size = regular ? fs::file_size(path, ec) : 0;
  if (!regular || ec)
    return Status::NotFound(fmt::format("{}: missing, but {} names it: the checkpoint is damaged", path, mpath));
  if (static_cast<int64_t>(size) != want.bytes) {
    return Status::InvalidArgument(
        fmt::format("{}: {} bytes, the manifest says {}: truncated or replaced", path, size, want.bytes));
  }
  std::string bytes;
  if (!ReadBytes(path, &bytes) || static_cast<int64_t>(bytes.size()) != want.bytes)
    return Status::Unavailable(fmt::format("{}: cannot read the file", path));
  Header h;
  std::memcpy(&h, bytes.data(), sizeof h);
  PLANNER_RETURN_IF_ERROR(CheckHeader(path, h, m, id, rank, want.bytes));
  const uint32_t crc = Crc32c(bytes.data(), bytes.size());
  if (crc != want.crc32c) {
    return Status::InvalidArgument(
        fmt::format("{}: checksum mismatch (CRC-32C {:08x}, the manifest says {:08x}): the file is corrupt", path, crc,
                    want.crc32c));
  }
  out->path = path;
  out->iteration = h.iteration;
  out->params.resize(static_cast<size_t>(h.param_floats));
  out->state.resize(static_cast<size_t>(h.state_floats));
  std::memcpy(out->params.data(), bytes.data() + sizeof h, out->params.size() * 4);
  std::memcpy(out->state.data(), bytes.data() + sizeof h + out->params.size() * 4, out->state.size() * 4);
  PLANNER_RETURN_IF_ERROR(CheckFinite(path, out->params, "parameter"));
  return CheckFinite(path, out->state, "optimizer state");
}

Status ApplyCheckpoint(const LoadedCheckpoint& ck, const std::vector<Param*>& params, Optimizer* optimizer,
                       LossScaler* scaler) {
  const int64_t want = ParameterFloats(params);
  if (static_cast<int64_t>(ck.params.size()) != want) {
    return Status::InvalidArgument(fmt::format(
        "{} holds {} parameters, this stage has {}; it belongs to another launch", ck.path, ck.params.size(), want));
  }
  size_t at = 0;
  for (Param* prm : params) {
    const size_t n = static_cast<size_t>(prm->value.numel());
    const std::vector<float> v(ck.params.begin() + static_cast<long>(at),
                               ck.params.begin() + static_cast<long>(at + n));
    if (prm->master.empty()) {
      CopyIntoTensor(v, &prm->value);
    } else {  // the fp32 master restored; the weight its rounded copy, as the optimizer writes it
      CopyIntoTensor(v, &prm->master);
      prm->value = prm->master.Converted(prm->value.dtype());
    }
    at += n;
  }
  std::vector<float> state = ck.state;
  if (scaler != nullptr) {
    const size_t n = scaler->State().size();
    if (state.size() < n)
      return Status::InvalidArgument(
          fmt::format("{}: no loss scaler state (an fp16 run's checkpoint has one)", ck.path));
    PLANNER_RETURN_IF_ERROR(
        scaler->SetState(std::vector<float>(state.end() - static_cast<long>(n), state.end())).WithContext(ck.path));
    state.resize(state.size() - n);
  }
  return optimizer->SetState(state, params).WithContext(ck.path);
}

}  // namespace planner
