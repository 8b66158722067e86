// labels: cpu
// The parts of data-parallel training that need no second process: rank
// detection from launcher variables, lr scaling, the per-rank config, the
// mpirun command line, gradient bucket packing, the straggler check, the
// smallest value over ranks (every rank fits the same micro-batch), the ranks'
// comparison of their training data.
#include <catch2/catch.hpp>

#include <algorithm>
#include <array>
#include <cmath>
#include <functional>
#include <map>
#include <string>
#include <thread>

#include "ops/collective.h"
#include "runner/config/diagnostics.h"
#include "runner/config/load.h"
#include "runner/dist/gradient_buckets.h"
#include "runner/dist/launch_env.h"
#include "runner/dist/local_launcher.h"
#include "runner/dist/rank_agreement.h"
#include "runner/dist/rank_config.h"
#include "runner/dist/rank_stats.h"
#include "runner/train/progress.h"
#include "runner/train/session.h"
#include "thread_ranks.h"

using namespace trainer;

namespace {

std::function<const char*(const char*)> env_of(const std::map<std::string, std::string>& vars) {
  return [vars](const char* name) -> const char* {
    const auto it = vars.find(name);
    return it == vars.end() ? nullptr : it->second.c_str();
  };
}

// One rank of a job whose other ranks hold `others` (by rank, this rank's
// slot ignored): its sums add what they would contribute.
class OneRankOf final : public Collective {
 public:
  OneRankOf(int rank, std::vector<double> others) : rank_(rank), others_(std::move(others)) {}
  int rank() const override { return rank_; }
  int world() const override { return static_cast<int>(others_.size()); }
  void all_reduce_sum(const std::vector<TensorRef>&) override {}
  void all_reduce_sum(std::vector<double>&) override {}
  void all_reduce_statistics(std::vector<double>& values) override {
    REQUIRE(values.size() == others_.size());
    for (std::size_t r = 0; r < values.size(); ++r)
      if (static_cast<int>(r) != rank_) values[r] += others_[r];
  }
  void barrier() override {}

 private:
  int rank_;
  std::vector<double> others_;
};

// A fingerprint of two ranks that agree.
dist::RankFingerprint agreeing_fingerprint() {
  dist::RankFingerprint f;
  f.config_hash = "0123456789ab";
  f.section_hashes.assign(dist::kComparedSections.size(), "00000000000a");
  f.parameter_tensors = 4;
  f.parameter_values = 2212;
  f.bucket_bytes = 25 << 20;
  return f;
}

// What ranks 0 and 1 say of their fingerprints (`of(rank)`), exchanged as the
// job exchanges them (two threads), each running the build `builds[rank]`
// ("": this one).
std::vector<std::string> verdicts(const std::function<dist::RankFingerprint(int)>& of,
                                  const std::array<std::string, 2>& builds = {"", ""}) {
  testing::Exchange exchange;
  std::vector<std::string> said(2);
  const auto rank = [&](int r) {
    testing::ThreadRank collective(exchange, r);
    said[static_cast<std::size_t>(r)] =
        dist::rank_disagreement(collective, of(r), builds[static_cast<std::size_t>(r)]);
  };
  std::thread other(rank, 1);
  rank(0);
  other.join();
  return said;
}

}  // namespace

TEST_CASE("every rank gets each rank's value, and the smallest, alike") {
  const std::vector<double> capacity = {8e9, 6e9, 7e9};
  for (int rank = 0; rank < 3; ++rank) {
    OneRankOf job(rank, capacity);
    CHECK(smallest_over_ranks(job, capacity[static_cast<std::size_t>(rank)]) == 6e9);
  }
  SingleProcess alone;
  CHECK(smallest_over_ranks(alone, 5.0) == 5.0);
  // What each rank resumed from, compared on every rank.
  OneRankOf job(2, {40, 40, 0});
  CHECK(values_over_ranks(job, 32) == std::vector<double>{40, 40, 32});
  CHECK(values_over_ranks(alone, 7) == std::vector<double>{7});
}

TEST_CASE("rank and world size come from the launcher's environment") {
  CHECK_FALSE(dist::detect_launch_env(env_of({})));
  const auto ompi = dist::detect_launch_env(env_of({{"OMPI_COMM_WORLD_RANK", "3"},
                                                    {"OMPI_COMM_WORLD_SIZE", "8"},
                                                    {"OMPI_COMM_WORLD_LOCAL_RANK", "1"}}));
  REQUIRE(ompi);
  CHECK(ompi->launcher == "openmpi");
  CHECK(ompi->rank == 3);
  CHECK(ompi->world == 8);
  CHECK(ompi->local_rank == 1);

  const auto pmi = dist::detect_launch_env(env_of({{"PMI_RANK", "1"}, {"PMI_SIZE", "2"}}));
  REQUIRE(pmi);
  CHECK(pmi->launcher == "pmi");
  CHECK(pmi->local_rank == 1);  // no local rank variable: the rank

  // Inside an sbatch script (no srun step) SLURM_PROCID alone is not a rank.
  CHECK_FALSE(dist::detect_launch_env(env_of({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "4"}})));
  const auto slurm = dist::detect_launch_env(env_of({{"SLURM_PROCID", "2"},
                                                     {"SLURM_NTASKS", "4"},
                                                     {"SLURM_LOCALID", "0"},
                                                     {"SLURM_STEP_ID", "0"}}));
  REQUIRE(slurm);
  CHECK(slurm->launcher == "slurm");
  CHECK(slurm->rank == 2);
  CHECK(slurm->world == 4);
  CHECK(slurm->local_rank == 0);
}

TEST_CASE("ranks per node come from the launcher: a count, or srun's tasks-per-node list") {
  const auto ompi = dist::detect_launch_env(env_of({{"OMPI_COMM_WORLD_RANK", "9"},
                                                    {"OMPI_COMM_WORLD_SIZE", "16"},
                                                    {"OMPI_COMM_WORLD_LOCAL_RANK", "1"},
                                                    {"OMPI_COMM_WORLD_LOCAL_SIZE", "8"}}));
  REQUIRE(ompi);
  CHECK(ompi->local_world == 8);
  // Not said: the whole job is taken to be on this node.
  const auto pmi = dist::detect_launch_env(env_of({{"PMI_RANK", "1"}, {"PMI_SIZE", "2"}}));
  REQUIRE(pmi);
  CHECK(pmi->local_world == 2);
  // srun sets a list; without --ntasks-per-node nothing else says it.
  const auto slurm = dist::detect_launch_env(env_of({{"SLURM_PROCID", "9"},
                                                     {"SLURM_NTASKS", "16"},
                                                     {"SLURM_LOCALID", "1"},
                                                     {"SLURM_STEP_ID", "0"},
                                                     {"SLURM_STEP_TASKS_PER_NODE", "8(x2)"},
                                                     {"SLURM_NODEID", "1"}}));
  REQUIRE(slurm);
  CHECK(slurm->local_world == 8);
  // The list's forms.
  CHECK(dist::slurm_tasks_on_node("8(x2)", 5) == 8);  // uniform: any node
  CHECK(dist::slurm_tasks_on_node("4", -1) == 4);
  CHECK(dist::slurm_tasks_on_node("2(x3),1", 1) == 2);
  CHECK(dist::slurm_tasks_on_node("2(x3),1", 3) == 1);
  CHECK(dist::slurm_tasks_on_node("2(x3),1", 4) == 0);  // no such node
  CHECK(dist::slurm_tasks_on_node("2(x3),1", -1) == 0);
  for (const char* bad : {"", "x", "2(3)", "2(x)", "2(x3", "2(x3)y", "0", "-1", "2,,1"})
    CHECK(dist::slurm_tasks_on_node(bad, 0) == 0);
}

TEST_CASE("a bad launcher variable is an error naming it") {
  CHECK_THROWS_WITH(dist::detect_launch_env(env_of({{"PMI_RANK", "x"}, {"PMI_SIZE", "2"}})),
                    Catch::Contains("PMI_RANK") && Catch::Contains("\"x\""));
  CHECK_THROWS_WITH(dist::detect_launch_env(env_of({{"PMI_RANK", "2"}, {"PMI_SIZE", "2"}})),
                    Catch::Contains("below the world size"));
}

TEST_CASE("lr scaling with the world size: none, linear, sqrt") {
  CHECK(dist::lr_scale_factor("none", 8) == 1.0);
  CHECK(dist::lr_scale_factor("linear", 8) == 8.0);
  CHECK(dist::lr_scale_factor("sqrt", 4) == 2.0);

  config::Config c;
  c.optimizer.lr = 0.1;
  c.optimizer.lr_scaling = "linear";
  const config::Config r = dist::rank_config(c, {1, 4, 1, 2});
  CHECK(r.optimizer.lr == Approx(0.4));
  CHECK(r.devices.world_size == 4);
  CHECK(r.backend.threads >= 1);  // the node's cores split between its ranks
  c.optimizer.lr_scaling = "none";
  CHECK(dist::rank_config(c, {0, 4, 0, 4}).optimizer.lr == Approx(0.1));
}

TEST_CASE("lr_scaling scales the schedule's rates with the base rate, and a resume is told all") {
  config::Config c;
  c.optimizer.lr = 0.1;
  c.optimizer.lr_scaling = "linear";
  c.schedule.type = "cosine";
  c.schedule.min_lr = 0.01;
  config::Config r = dist::rank_config(c, {0, 2, 0, 2});
  CHECK(r.schedule.min_lr == Approx(0.02));
  // Resumed on 4 ranks, a 2-rank run's rates come back with these overrides.
  r = dist::rank_config(c, {0, 4, 0, 4});
  CHECK(dist::overrides_keeping_rates(r, 0.2) ==
        "optimizer.lr=0.2 schedule.min_lr=0.02 optimizer.lr_scaling=none");
  c.schedule = {};
  c.schedule.type = "range_test";
  c.schedule.max_lr = 1.0;
  r = dist::rank_config(c, {0, 2, 0, 2});
  CHECK(r.schedule.max_lr == Approx(2.0));
  CHECK(dist::overrides_keeping_rates(r, 0.1) ==
        "optimizer.lr=0.1 schedule.max_lr=1 optimizer.lr_scaling=none");
  // Without lr_scaling the schedule's rates were never scaled: the base rate alone.
  c.optimizer.lr_scaling = "none";
  CHECK(dist::overrides_keeping_rates(dist::rank_config(c, {0, 2, 0, 2}), 0.3) ==
        "optimizer.lr=0.3");
}

TEST_CASE("the config's world size must match the job's") {
  config::Config c;
  c.devices.world_size = 4;
  CHECK_THROWS_AS(dist::rank_config(c, {0, 2, 0, 2}), config::ConfigError);
  CHECK(dist::rank_config(c, {0, 4, 0, 4}).devices.world_size == 4);

  config::Config g;
  g.devices.cpu = false;
  g.devices.gpus = {4, 5, 6};
  const config::Config r = dist::rank_config(g, {2, 3, 2, 3});
  CHECK(r.devices.gpus.front() == 6);  // this rank's GPU first
  CHECK(r.devices.world_size == 3);
  config::Diagnostics diags;
  CHECK(train::plan_batches(r, diags).world == 3);
  CHECK_THROWS_AS(dist::rank_config(g, {0, 2, 0, 2}), config::ConfigError);
  CHECK_THROWS_AS(dist::rank_config(g, {0, 6, 0, 2}), config::ConfigError);  // 2 per node
}

TEST_CASE("a rank its launcher bound to one GPU uses that GPU, whatever the list says") {
  config::Config g;
  g.devices.cpu = false;
  g.devices.gpus = {4, 5, 6, 7};
  // srun --gpus-per-task=1: rank 2 of 4 sees one GPU, CUDA index 0.
  dist::RankPlace bound{2, 4, 2, 4, 1};
  CHECK(dist::launcher_bound_gpu(g, bound));
  const config::Config r = dist::rank_config(g, bound);
  CHECK(r.devices.gpus == std::vector<std::int64_t>{0});
  CHECK(r.devices.world_size == 4);
  config::Diagnostics diags;
  CHECK(train::plan_batches(r, diags).world == 4);  // the batch still splits over 4
  // Every GPU visible: the list decides.
  dist::RankPlace shared{2, 4, 2, 4, 8};
  CHECK_FALSE(dist::launcher_bound_gpu(g, shared));
  CHECK(dist::rank_config(g, shared).devices.gpus.front() == 6);
  // Not asked (a CPU build): the list decides.
  CHECK(dist::rank_config(g, {2, 4, 2, 4}).devices.gpus.front() == 6);
  // One listed GPU, one rank: nothing to bind.
  config::Config one = g;
  one.devices.gpus = {3};
  CHECK_FALSE(dist::launcher_bound_gpu(one, {0, 1, 0, 1, 1}));
}

TEST_CASE("GPU ranks on several nodes: the batch is split over every rank of the job") {
  config::Config g;
  g.devices.cpu = false;
  g.devices.gpus = {0, 1, 2, 3, 4, 5, 6, 7};
  g.train.batch_size = 256;
  // Rank 9 of 16, the second on its node (8 per node).
  const config::Config r = dist::rank_config(g, {9, 16, 1, 8});
  CHECK(r.devices.gpus.front() == 1);
  config::Diagnostics diags;
  CHECK(train::plan_batches(r, diags).world == 16);
  CHECK(diags.empty());
}

TEST_CASE("the local launcher's mpirun command") {
  config::Config c;
  c.devices.world_size = 3;
  CHECK(dist::requested_ranks(c) == 3);
  const auto cmd = dist::mpirun_command(3, {"/bin/trainer", "run", "x.yaml"}, true);
  const std::vector<std::string> expected = {"mpirun",
                                             "-np",
                                             "3",
                                             "--allow-run-as-root",
                                             "-x",
                                             "TRAINER_STDOUT_TERMINAL",
                                             "-x",
                                             "TRAINER_RUN_DIR_NOTE",
                                             "--oversubscribe",
                                             "--bind-to",
                                             "none",
                                             "--stdin",
                                             "none",
                                             "/bin/trainer",
                                             "run",
                                             "x.yaml"};
  CHECK(cmd == expected);
  CHECK(dist::mpirun_command(2, {"t"}, false)[7] == "--oversubscribe");
}

TEST_CASE("gradient buckets pack gradients, launch in order and copy the sums back") {
  std::vector<float> a(10, 1.0f), b(30, 2.0f), c(5, 3.0f);
  std::vector<TensorRef> grads = {
      {a.data(), {10}, DType::f32}, {b.data(), {3, 10}, DType::f32}, {c.data(), {5}, DType::f32}};
  // 100 bytes: a (40 B) and b (120 B) share one bucket, c gets its own.
  dist::GradientBuckets buckets(grads, 100);
  CHECK(buckets.bucket_count() == 2);
  CHECK(buckets.covers({grads[2], grads[0], grads[1]}));
  CHECK_FALSE(buckets.covers({grads[0], grads[1]}));

  std::vector<std::size_t> launched;
  buckets.launch_remaining([&](float* data, std::size_t count) {
    launched.push_back(count);
    for (std::size_t i = 0; i < count; ++i) data[i] *= 10.0f;  // stands for the sum over ranks
  });
  CHECK(launched == std::vector<std::size_t>{40, 5});
  CHECK(a[0] == 1.0f);  // not copied back before unpack()
  buckets.unpack();
  CHECK(a[9] == 10.0f);
  CHECK(b[29] == 20.0f);
  CHECK(c[4] == 30.0f);

  // Reset for the next step: launching again packs the new values.
  launched.clear();
  buckets.launch_remaining([&](float*, std::size_t count) { launched.push_back(count); });
  CHECK(launched.size() == 2);
}

TEST_CASE("the straggler check names the slow rank") {
  auto window = [](double busy_ms, double data_ms) {
    dist::RankWindow w;
    w.steps = 10;
    w.busy_s = busy_ms * 10 / 1000.0;
    w.data_wait_s = data_ms * 10 / 1000.0;
    return w;
  };
  CHECK_FALSE(dist::find_straggler({window(10, 0), window(10.5, 0)}));
  CHECK_FALSE(dist::find_straggler({window(10, 0)}));
  const auto s =
      dist::find_straggler({window(10, 0), window(10, 0), window(16, 5), window(10.2, 0)});
  REQUIRE(s);
  CHECK(s->rank == 2);
  CHECK(s->median_busy_ms == Approx(10.1));
  const std::string text = dist::describe(*s);
  CHECK_THAT(text, Catch::Contains("rank 2") && Catch::Contains("data.workers"));
  const auto two = dist::find_straggler({window(20, 0), window(10, 0)});
  REQUIRE(two);
  CHECK(two->rank == 0);
  CHECK_THAT(dist::describe(*two), Catch::Contains("other load"));
}

TEST_CASE("a rank draws a progress bar only when its launcher says its output is a terminal") {
  unsetenv(trainer::train::kStdoutTerminalVariable);
  CHECK_FALSE(trainer::train::stdout_is_terminal(true));  // another launcher: no bar
  setenv(trainer::train::kStdoutTerminalVariable, "0", 1);
  CHECK_FALSE(trainer::train::stdout_is_terminal(true));
  setenv(trainer::train::kStdoutTerminalVariable, "1", 1);
  CHECK(trainer::train::stdout_is_terminal(true));
  unsetenv(trainer::train::kStdoutTerminalVariable);
}

TEST_CASE("ranks with the same config and other training data stop, naming the digests") {
  const dist::RankFingerprint same = agreeing_fingerprint();
  const auto with_digests = [&](const std::string& digest0, const std::string& digest1) {
    return verdicts([&](int r) {
      dist::RankFingerprint mine = same;
      mine.train_data_digest = r == 0 ? digest0 : digest1;
      return mine;
    });
  };
  const auto agree = with_digests("a8eb2ca3d803", "a8eb2ca3d803");
  CHECK(agree[0].empty());
  CHECK(agree[1].empty());
  const auto differ = with_digests("a8eb2ca3d803", "0f9262527b5a");
  CHECK(differ[0] ==
        "the ranks read different training data from the same config (content digest rank 0: "
        "a8eb2ca3d803, rank 1: 0f9262527b5a); nothing was trained. Every rank's copy of the "
        "data.train files must hold the same samples and labels: copy the same files to every "
        "node");
  CHECK_THAT(differ[1],
             Catch::StartsWith("rank 1: the ranks of this job differ in what they train"));
  // Another config explains other data: the config's message alone.
  std::vector<dist::RankFingerprint> ranks(2, same);
  ranks[1].config_hash = "ba9876543210";
  ranks[1].train_data_digest = "0f9262527b5a";
  CHECK_THAT(
      dist::describe_disagreement(ranks),
      Catch::StartsWith("the ranks run different configs") && !Catch::Contains("training data"));
}

TEST_CASE("ranks started one resuming and one new, or with other buckets, stop and say so") {
  const dist::RankFingerprint same = agreeing_fingerprint();
  std::vector<dist::RankFingerprint> ranks(3, same);
  CHECK(dist::describe_disagreement(ranks).empty());
  ranks[2].resumes = true;
  CHECK(dist::describe_disagreement(ranks) ==
        "the ranks were started differently (rank 0: a new run, rank 2: trainer run --resume); "
        "nothing was trained. Start every rank with the same command: --resume RUN_DIR on all "
        "of them, or on none");
  ranks[2].resumes = false;
  ranks[1].bucket_bytes = 104;
  CHECK_THAT(dist::describe_disagreement(ranks),
             Catch::StartsWith("the ranks split their gradients into buckets of different sizes "
                               "(rank 0: 26214400 bytes, rank 1: 104 bytes)") &&
                 Catch::Contains("TRAINER_BUCKET_MB"));
  // Both travel in the exchange.
  const auto said = verdicts([&](int r) {
    dist::RankFingerprint mine = same;
    mine.resumes = r == 1;
    return mine;
  });
  CHECK_THAT(said[0], Catch::StartsWith("the ranks were started differently"));
  CHECK_THAT(said[1], Catch::StartsWith("rank 1: the ranks of this job differ in what they train"));
}

TEST_CASE("ranks of different builds stop before exchanging their fingerprints") {
  const auto said = verdicts(
      [](int r) {
        dist::RankFingerprint mine = agreeing_fingerprint();
        // A build with another layout: its fingerprint is never exchanged.
        if (r == 1) mine.section_hashes.resize(dist::kComparedSections.size() + 3, "00000000000a");
        return mine;
      },
      {"0000000", "1111111-dirty"});
  CHECK_THAT(said[0], Catch::StartsWith("the ranks run different builds of trainer") &&
                          Catch::Contains("rank 0, is 0000000") &&
                          Catch::Contains("Run the same trainer binary on every rank"));
  CHECK_THAT(said[1], Catch::StartsWith("rank 1: the ranks of this job run different builds"));
}

TEST_CASE(
    "ranks agree on a config whatever order its keys came in, apart from their own settings") {
  const std::string text =
      "data: {train: {type: synthetic, shape: [4], classes: 3}}\n"
      "model: {layers: [{type: linear, out_features: 3}]}\n"
      "train: {epochs: 2}\n";
  const auto fingerprint = [&](const std::vector<std::string>& overrides) {
    return dist::fingerprint_of(config::load_config_text(text, "c.yaml", overrides), graph::Graph{},
                                0, {});
  };
  const dist::RankFingerprint plain = fingerprint({});
  // A section an override adds stands after the file's: a rank's own
  // settings in sections the file does not write change nothing compared.
  for (const char* own : {"backend.threads=1", "devices.world_size=2", "data.workers=0"}) {
    INFO(own);
    const dist::RankFingerprint with = fingerprint({own});
    CHECK(with.config_hash == plain.config_hash);
    CHECK(with.section_hashes == plain.section_hashes);
  }
  // A number written otherwise is the same value.
  CHECK(fingerprint({"optimizer.lr=0.1"}).config_hash ==
        fingerprint({"optimizer.lr=1e-1"}).config_hash);
  CHECK(fingerprint({"optimizer.lr=0.10"}).config_hash ==
        fingerprint({"optimizer.lr=1e-1"}).config_hash);
  // Keys added in another order are the same config.
  CHECK(fingerprint({"output.dir=runs", "schedule.type=cosine"}).config_hash ==
        fingerprint({"schedule.type=cosine", "output.dir=runs"}).config_hash);
  // What a rank trains still counts, and names its section.
  const dist::RankFingerprint other = fingerprint({"optimizer.lr=0.5"});
  CHECK(other.config_hash != plain.config_hash);
  const auto at = std::find(dist::kComparedSections.begin(), dist::kComparedSections.end(),
                            std::string("optimizer")) -
                  dist::kComparedSections.begin();
  CHECK(other.section_hashes[static_cast<std::size_t>(at)] !=
        plain.section_hashes[static_cast<std::size_t>(at)]);
}
