// Rank agreement: the ranks of a data-parallel job must train the same
// experiment, or their gradient sums mix different models (silently wrong
// results, or a crash inside MPI when the gradients differ in size). Each
// rank starts from its own command line (a hand-written mpirun or srun job
// may give each its own), so before any gradient is reduced the ranks compare
// a fingerprint: the hash of the resolved config without the settings a rank
// may choose for itself, per section, the model's parameters, and the content
// digest of the training data (each node may hold its own copy). A job whose
// ranks differ stops on every rank (`trainer run` exits 2) with an error
// naming what differs.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "ops/collective.h"
#include "runner/config/config.h"
#include "runner/graph/ir.h"

namespace trainer::dist {

// The settings that may differ between ranks: how a rank runs (its threads,
// its loader's workers and prefetch) and `devices.world_size`, which a
// launcher's world size may leave at 1. They do not change what is trained.
extern const std::vector<std::string> kRankOwnSettings;

// The top-level sections whose hashes name where configs differ.
extern const std::vector<std::string> kComparedSections;

struct RankFingerprint {
  std::string config_hash;                  // sha256 of the compared config (hex)
  std::vector<std::string> section_hashes;  // per kComparedSections ("" when absent)
  std::int64_t parameter_tensors = 0;       // trainable, frozen and state (running statistics)
  std::int64_t parameter_values = 0;        // their elements
  std::string train_data_digest;            // its first 12 hex digits
  bool resumes = false;                     // `trainer run --resume`, not a new run
  std::int64_t bucket_bytes = 0;            // the gradient buckets (TRAINER_BUCKET_MB)
};

// How this rank's process was asked to run, beside its config.
struct RankRequest {
  bool resumes = false;
  std::size_t bucket_bytes = 0;
};

// `config`'s fingerprint (its resolved tree, before the rank's own changes)
// with `graph`'s parameters, the training data's content digest and `request`.
RankFingerprint fingerprint_of(const config::Config& config, const graph::Graph& graph,
                               std::uint64_t train_data_digest, const RankRequest& request);

// What differs between the ranks' fingerprints (in rank order), as the
// error says it; "" when they agree.
std::string describe_disagreement(const std::vector<RankFingerprint>& ranks);

// Compares every rank's fingerprint over `collective`: "" when they agree,
// else this rank's error (rank 0's names what differs). Every rank gets the
// same verdict, so all can stop alike. "" on a single rank. The ranks first
// compare the build of trainer they run (`build`, trainer_commit() unless a
// test gives another), in an exchange whose layout no build changes: ranks of
// other builds stop there, before exchanging fingerprints whose layout may
// differ.
std::string rank_disagreement(Collective& collective, const RankFingerprint& mine,
                              const std::string& build = "");

}  // namespace trainer::dist
