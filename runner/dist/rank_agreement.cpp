// Comparing the ranks' configs and models at start-up.
#include "runner/dist/rank_agreement.h"

#include <algorithm>
#include <cstdlib>
#include <functional>

#include <fmt/format.h>

#include "data/content_digest.h"
#include "runner/build_info.h"
#include "runner/config/emit.h"
#include "runner/config/scalar.h"
#include "runner/train/sha256.h"

namespace trainer::dist {
namespace {

// Hashes travel as doubles (the collective's small reductions): 12 hex
// digits (48 bits) fit exactly. Two configs that differ share them by chance
// with a probability of 2^-48.
constexpr std::size_t kHashDigits = 12;

std::string short_hash(const std::string& text) {
  return train::sha256_hex(text).substr(0, kHashDigits);
}

double hash_to_double(const std::string& hex) {
  return hex.empty() ? -1.0 : static_cast<double>(std::strtoull(hex.c_str(), nullptr, 16));
}

std::string double_to_hash(double value) {
  if (value < 0) return "";
  return fmt::format("{:0{}x}", static_cast<std::uint64_t>(value), kHashDigits);
}

// A scalar as its value reads: 0.1, 1e-1 and 0.10 alike, 1 and 1.0, True and true.
config::Node canonical_scalar(const config::Node& node) {
  std::string text;
  switch (config::classify(node)) {
    case config::ScalarKind::null:
      text = "null";
      break;
    case config::ScalarKind::boolean:
      text = *config::as_bool(node) ? "true" : "false";
      break;
    case config::ScalarKind::integer:
      if (const auto value = config::as_int(node)) text = std::to_string(*value);
      break;
    case config::ScalarKind::number:
      if (const auto value = config::as_number(node)) text = fmt::format("{}", *value);
      break;
    case config::ScalarKind::string:
      break;
  }
  return text.empty() ? node : config::Node::scalar(text, node.mark());
}

// `node` with every map's keys in name order and its scalars as their values
// read: where a key stands (in a file, or last when an override added it)
// and how a number is written do not change what a rank trains.
config::Node canonical_tree(const config::Node& node) {
  if (node.is_scalar()) return canonical_scalar(node);
  if (node.is_sequence()) {
    config::Node ordered = node;
    for (config::Node& item : ordered.items()) item = canonical_tree(item);
    return ordered;
  }
  if (!node.is_map()) return node;
  std::vector<std::size_t> order(node.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(),
            [&](std::size_t a, std::size_t b) { return node.key_at(a) < node.key_at(b); });
  config::Node ordered = config::Node::map(node.mark());
  for (const std::size_t i : order)
    ordered.set(node.key_at(i), canonical_tree(node.value_at(i)), node.key_mark_at(i));
  return ordered;
}

// The config without the settings a rank may choose for itself, its keys in
// name order.
config::Node compared_tree(const config::Config& config) {
  config::Node tree = config.resolved;
  for (const std::string& path : kRankOwnSettings) {
    const auto dot = path.find('.');
    if (config::Node* section = tree.find(path.substr(0, dot)); section && section->is_map())
      section->erase(path.substr(dot + 1));
  }
  return canonical_tree(tree);
}

std::vector<double> encode(const RankFingerprint& f) {
  std::vector<double> values = {hash_to_double(f.config_hash)};
  for (const std::string& h : f.section_hashes) values.push_back(hash_to_double(h));
  values.push_back(static_cast<double>(f.parameter_tensors));
  values.push_back(static_cast<double>(f.parameter_values));
  values.push_back(hash_to_double(f.train_data_digest));
  values.push_back(f.resumes ? 1.0 : 0.0);
  values.push_back(static_cast<double>(f.bucket_bytes));
  return values;
}

RankFingerprint decode(const double* values) {
  RankFingerprint f;
  std::size_t at = 0;
  f.config_hash = double_to_hash(values[at++]);
  for (std::size_t s = 0; s < kComparedSections.size(); ++s)
    f.section_hashes.push_back(double_to_hash(values[at++]));
  f.parameter_tensors = static_cast<std::int64_t>(values[at++]);
  f.parameter_values = static_cast<std::int64_t>(values[at++]);
  f.train_data_digest = double_to_hash(values[at++]);
  f.resumes = values[at++] != 0.0;
  f.bucket_bytes = static_cast<std::int64_t>(values[at++]);
  return f;
}

std::string model_of(const RankFingerprint& f) {
  return fmt::format("{} parameter tensors with {} values", f.parameter_tensors,
                     f.parameter_values);
}

// "rank 0: A, rank 1: B, ...": rank 0 and every rank whose `what` differs from it.
template <typename Describe>
std::string ranks_that_differ(const std::vector<RankFingerprint>& ranks, Describe describe) {
  std::string text = "rank 0: " + describe(ranks[0]);
  for (std::size_t r = 1; r < ranks.size(); ++r)
    if (describe(ranks[r]) != describe(ranks[0]))
      text += fmt::format(", rank {}: {}", r, describe(ranks[r]));
  return text;
}

}  // namespace

const std::vector<std::string> kRankOwnSettings = {"backend.threads", "data.workers",
                                                   "data.prefetch", "devices.world_size"};

const std::vector<std::string> kComparedSections = {
    "name",  "seed",      "deterministic", "model",   "data",    "optimizer", "schedule",
    "train", "precision", "checkpoint",    "devices", "backend", "output",    "sweep"};

RankFingerprint fingerprint_of(const config::Config& config, const graph::Graph& graph,
                               std::uint64_t train_data_digest, const RankRequest& request) {
  RankFingerprint f;
  f.resumes = request.resumes;
  f.bucket_bytes = static_cast<std::int64_t>(request.bucket_bytes);
  const config::Node tree = compared_tree(config);
  f.config_hash = short_hash(config::to_yaml(tree));
  for (const std::string& name : kComparedSections) {
    const config::Node* section = tree.find(name);
    f.section_hashes.push_back(section ? short_hash(config::to_yaml(*section)) : "");
  }
  f.parameter_tensors = static_cast<std::int64_t>(graph.params.size());
  f.parameter_values = graph.parameter_count(false);
  f.train_data_digest = data::digest_text(train_data_digest).substr(0, kHashDigits);
  return f;
}

std::string describe_disagreement(const std::vector<RankFingerprint>& ranks) {
  if (ranks.size() < 2) return "";
  const RankFingerprint& root = ranks[0];
  // How the processes were started, before what they would train.
  for (const RankFingerprint& rank : ranks)
    if (rank.resumes != root.resumes)
      return "the ranks were started differently (" +
             ranks_that_differ(
                 ranks,
                 [](const RankFingerprint& f) {
                   return std::string(f.resumes ? "trainer run --resume" : "a new run");
                 }) +
             "); nothing was trained. Start every rank with the same command: --resume "
             "RUN_DIR on all of them, or on none";
  for (const RankFingerprint& rank : ranks)
    if (rank.bucket_bytes != root.bucket_bytes)
      return "the ranks split their gradients into buckets of different sizes (" +
             ranks_that_differ(
                 ranks,
                 [](const RankFingerprint& f) { return fmt::format("{} bytes", f.bucket_bytes); }) +
             "); nothing was trained. Set TRAINER_BUCKET_MB alike for every rank, or for none";
  bool configs_differ = false, models_differ = false, data_differs = false;
  std::vector<std::string> sections;
  for (const RankFingerprint& rank : ranks) {
    configs_differ |= rank.config_hash != root.config_hash;
    models_differ |= rank.parameter_tensors != root.parameter_tensors ||
                     rank.parameter_values != root.parameter_values;
    data_differs |= rank.train_data_digest != root.train_data_digest;
  }
  for (std::size_t s = 0; s < kComparedSections.size(); ++s)
    for (const RankFingerprint& rank : ranks)
      if (rank.section_hashes[s] != root.section_hashes[s]) {
        sections.push_back(kComparedSections[s]);
        break;
      }
  // The same config and other data: each rank read its own copy of the files.
  if (!configs_differ && !models_differ && data_differs)
    return "the ranks read different training data from the same config (content digest " +
           ranks_that_differ(ranks, [](const RankFingerprint& f) { return f.train_data_digest; }) +
           "); nothing was trained. Every rank's copy of the data.train files must hold the same "
           "samples and labels: copy the same files to every node";
  if (!configs_differ && !models_differ) return "";
  std::string text;
  if (configs_differ) {
    text = "the ranks run different configs (" +
           ranks_that_differ(ranks, [](const RankFingerprint& f) { return f.config_hash; }) + ")";
    if (!sections.empty()) {
      text += ": they differ in ";
      for (std::size_t i = 0; i < sections.size(); ++i)
        text += (i == 0 ? "" : i + 1 == sections.size() ? " and " : ", ") + sections[i];
    }
  }
  if (models_differ)
    text += std::string(configs_differ ? "; and " : "the ranks ") + "build different models (" +
            ranks_that_differ(ranks, model_of) + ")";
  std::string own;
  for (std::size_t i = 0; i < kRankOwnSettings.size(); ++i)
    own += (i == 0 ? "" : i + 1 == kRankOwnSettings.size() ? " and " : ", ") + kRankOwnSettings[i];
  return text +
         "; nothing was trained. Start every rank with the same config and overrides (trainer "
         "run CONFIG devices.world_size=N starts them alike); only " +
         own + " may differ between ranks";
}

std::string rank_disagreement(Collective& collective, const RankFingerprint& mine,
                              const std::string& build) {
  const int world = collective.world();
  if (world <= 1) return "";
  // One value a rank, in every build to come: its build's hash.
  const std::string built_from = build.empty() ? trainer_commit() : build;
  const std::vector<double> builds =
      values_over_ranks(collective, hash_to_double(short_hash(built_from)));
  if (std::adjacent_find(builds.begin(), builds.end(), std::not_equal_to<>()) != builds.end()) {
    if (!collective.is_root())
      return fmt::format(
          "rank {}: the ranks of this job run different builds of trainer (rank 0 says which)",
          collective.rank());
    std::string found = "rank 0: " + double_to_hash(builds[0]);
    for (std::size_t r = 1; r < builds.size(); ++r)
      if (builds[r] != builds[0])
        found += fmt::format(", rank {}: {}", r, double_to_hash(builds[r]));
    return "the ranks run different builds of trainer (build hashes " + found + "; this one, " +
           "rank 0, is " + built_from +
           "); nothing was trained. Run the same trainer binary on every rank (`trainer version` "
           "names its commit)";
  }
  const std::vector<double> own = encode(mine);
  // Each rank's values in its own slots of a sum: every rank gets all of them.
  const std::size_t slots = own.size();
  std::vector<double> all(slots * static_cast<std::size_t>(world), 0.0);
  std::copy(own.begin(), own.end(),
            all.begin() +
                static_cast<std::ptrdiff_t>(slots * static_cast<std::size_t>(collective.rank())));
  collective.all_reduce_statistics(all);
  std::vector<RankFingerprint> ranks;
  for (std::size_t r = 0; r < static_cast<std::size_t>(world); ++r)
    ranks.push_back(decode(all.data() + slots * r));
  const std::string disagreement = describe_disagreement(ranks);
  if (disagreement.empty() || collective.is_root()) return disagreement;
  return fmt::format(
      "rank {}: the ranks of this job differ in what they train or how they were started "
      "(rank 0 says how)",
      collective.rank());
}

}  // namespace trainer::dist
