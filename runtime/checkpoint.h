// The checkpoint store, runs/<id>/ckpt/ (docs/runtime.md, "Checkpoints"):
//   iter-<n>/rank<k>.bin  one file per rank: an 80-byte header (the magic
//                         "PLNCKPT2", then int64 iteration, rank, ranks,
//                         parameter float count, optimizer float count, then
//                         the model digest and the layout digest, 16 hex
//                         characters each), then every parameter of the rank's
//                         stage in order and the optimizer state
//                         (Optimizer::State()), float32, the machine's byte order;
//   manifest.yaml         written last, by rank 0, once every rank's file is
//                         durable: the iteration, the directory, both digests,
//                         and each rank file's size and CRC-32C.
// The manifest is what makes a checkpoint: a job killed before it lands resumes
// from the previous one, whose directory is removed only after the new manifest
// is durable. Resume verifies everything (VerifyCheckpoint) before it trusts a byte.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"
#include "runtime/kernels/kernel.h"
#include "runtime/kernels/mixed_precision.h"
#include "runtime/kernels/optimizer.h"
#include "spec/launch_plan.h"
#include "spec/model_spec.h"

namespace planner {

// What a checkpoint must match to be resumed by a launch.
struct CheckpointIdentity {
  std::string model_digest;   // the model file's digest (launch.yaml model_digest)
  std::string layout_digest;  // DigestHex of the layout: tp/pp/dp/cp/ep/etp, stages, ranks, optimizer
  int64_t ranks = 0;          // the workers (ranks that hold a stage)
};
CheckpointIdentity IdentityOf(const LaunchPlan& launch, const ModelSpec& model);

struct CheckpointFile {
  int64_t bytes = 0;
  uint32_t crc32c = 0;
};

struct CheckpointManifest {
  int64_t iteration = 0;
  std::string directory;  // iter-<iteration>, relative to ckpt/
  std::string model_digest, layout_digest;
  std::vector<CheckpointFile> files;  // one per rank, in rank order
};

std::string CheckpointDirectory(const std::string& run_dir);  // <run_dir>/ckpt
std::string ManifestPath(const std::string& run_dir);         // <run_dir>/ckpt/manifest.yaml
std::string RankFilePath(const std::string& run_dir, int64_t iteration, int64_t rank);

// Writes rank `rank`'s file of the checkpoint after `iteration` iterations (durable when it
// returns: AtomicFile's fsync of the file and its directory); *written: its size and checksum.
// fp16 runs pass their loss scaler: its state follows the optimizer's in the file.
Status WriteCheckpoint(const std::string& run_dir, const CheckpointIdentity& id, int64_t rank, int64_t iteration,
                       const std::vector<Param*>& params, const Optimizer& optimizer, CheckpointFile* written,
                       const LossScaler* scaler = nullptr);

// The manifest's text, and its strict reader (`path` names it in errors, with the line).
std::string ManifestText(const CheckpointManifest& m);
Status ParseManifest(const std::string& path, const std::string& text, CheckpointManifest* out);

// Writes the manifest atomically (the checkpoint is complete from here on), then removes the other
// checkpoints (older ones, a newer one a killed job left half-written), the planner's files only
// (docs/hardening.md, "Ownership of outputs"): in each other iter-<n> directory (a directory, not a
// link) its rank<k>.bin files that carry the checkpoint magic and AtomicFile's temporaries, then the
// directory when nothing else is left. Anything else (a user's file, a link, a subdirectory, an
// iter-best directory) is kept; up to three such paths are appended to *kept (may be null).
Status CommitCheckpoint(const std::string& run_dir, const CheckpointManifest& m,
                        std::vector<std::string>* kept = nullptr);

// A rank's verified checkpoint, in memory.
struct LoadedCheckpoint {
  std::string path;
  int64_t iteration = 0;
  std::vector<float> params, state;
};

// Everything one rank can check alone, without communication: the manifest is there and parses;
// its digests and rank count are this launch's; the rank's file has the manifest's size and
// CRC-32C; its header has the magic, the manifest's iteration, this rank, the digests, and counts
// that fill the file exactly; every float is finite. Errors (exit 2) name the file and the reason.
Status VerifyCheckpoint(const std::string& run_dir, const CheckpointIdentity& id, int64_t rank, LoadedCheckpoint* out);

// Puts a verified checkpoint into the stage's parameters and the optimizer: InvalidArgument when
// its counts are not this stage's.
// fp16 runs: `scaler` takes the loss scaler's state written after the optimizer's.
Status ApplyCheckpoint(const LoadedCheckpoint& ck, const std::vector<Param*>& params, Optimizer* optimizer,
                       LossScaler* scaler = nullptr);

}  // namespace planner
