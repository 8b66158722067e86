// A checkpoint is written and loaded without a host copy of its files: the
// heap it takes beyond training stays a bounded staging buffer however large
// the model, and what it writes (and loads) is the program's tensors, byte
// for byte.
#include <catch2/catch.hpp>

#include <sys/resource.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <limits>
#include <memory>
#include <string>

#include "runner/checkpoint/checkpoint_store.h"
#include "runner/checkpoint/safetensors.h"
#include "tests/heap_counter.h"
#include "tests/program_fixture.h"
#include "tests/temp_dir.h"

namespace trainer::graph {
namespace {

constexpr std::size_t kMiB = std::size_t{1} << 20;

// A program whose fc.weight alone is 4100 x 4096 floats (64.06 MiB: four
// 16 MiB pieces and a partial fifth); with Adam's two moments its state
// file holds twice that.
std::unique_ptr<Program> large_program(std::uint64_t seed) {
  ModelInput in;
  in.batch = 2;
  in.sample_shape = {4096};
  in.num_classes = 4100;
  CompileOptions options;
  options.optimizer_state_tensors = 2;
  auto program = std::make_unique<Program>(
      differentiate(
          graph_of_yaml("layers:\n  - {type: linear, name: fc, out_features: 4100}\n", in)),
      cpu_backend(), options);
  initialize_params(*program, seed);
  // Moments unlike the weights, so a file holding the wrong tensor shows.
  for (auto& p : program->params())
    for (const TensorRef* state : {&p.state0, &p.state1})
      for (std::int64_t i = 0; i < state->numel(); ++i)
        state->f32()[i] = static_cast<float>((i + static_cast<std::int64_t>(seed)) % 977) *
                          (state == &p.state0 ? 1e-3f : 2e-3f);
  return program;
}

// Whether every parameter and moment of `a` holds the bytes of `b`'s.
bool same_tensors(Program& a, Program& b) {
  for (std::size_t i = 0; i < a.params().size(); ++i) {
    const auto& p = a.params()[i];
    const auto& q = b.params()[i];
    for (const auto& [x, y] : {std::pair{p.value, q.value}, std::pair{p.state0, q.state0},
                               std::pair{p.state1, q.state1}})
      if (x.bytes() != y.bytes() || std::memcmp(x.data, y.data, x.bytes()) != 0) return false;
  }
  return true;
}

// A consistent state of step `step` (of 128 per epoch, 1000 in all).
checkpoint::TrainState state_at(std::int64_t step) {
  checkpoint::TrainState state;
  state.step = step;
  state.epoch_step = step;
  state.steps_per_epoch = 128;
  state.total_steps = 1000;
  return state;
}

void fail_on_warning(const std::string& warning) {
  FAIL("unexpected warning: " << warning);
}

TEST_CASE("a checkpoint's files are written from the program's tensors in bounded pieces") {
  auto program = large_program(11);
  testing::TempDir tmp("checkpoint-memory");
  checkpoint::CheckpointStore store(tmp.path().string());
  checkpoint::TrainState state = state_at(1);
  const std::size_t before = reset_heap_peak();
  const std::string saved = store.save(*program, state, {}, fail_on_warning);
  const std::size_t taken = heap_peak() - before;
  INFO("heap taken by the save: " << taken / kMiB << " MiB");
  CHECK(taken < 24 * kMiB);

  const auto model = checkpoint::read_safetensors(saved + "/model.safetensors");
  const auto moments = checkpoint::read_safetensors(saved + "/state.safetensors");
  for (const auto& p : program->params()) {
    const auto* weights = model.find(p.param->name);
    REQUIRE(weights);
    CHECK(weights->dtype == "F32");
    REQUIRE(weights->bytes.size() == p.value.bytes());
    CHECK(std::memcmp(weights->bytes.data(), p.value.data, p.value.bytes()) == 0);
    for (const auto& [name, tensor] : {std::pair{"optimizer.state0." + p.param->name, p.state0},
                                       std::pair{"optimizer.state1." + p.param->name, p.state1}}) {
      const auto* stored = moments.find(name);
      REQUIRE(stored);
      REQUIRE(stored->bytes.size() == tensor.bytes());
      CHECK(std::memcmp(stored->bytes.data(), tensor.data, tensor.bytes()) == 0);
    }
  }
}

TEST_CASE("a resume reads a checkpoint's files into the program in bounded pieces") {
  auto saved = large_program(11);
  testing::TempDir tmp("checkpoint-load");
  checkpoint::CheckpointStore store(tmp.path().string());
  checkpoint::TrainState state = state_at(1);
  store.save(*saved, state, {}, fail_on_warning);

  auto resumed = large_program(12);
  REQUIRE_FALSE(same_tensors(*resumed, *saved));
  const std::size_t before = reset_heap_peak();
  const auto loaded = store.load_newest(*resumed, true, fail_on_warning);
  const std::size_t taken = heap_peak() - before;
  INFO("heap taken by the load: " << taken / kMiB << " MiB");
  CHECK(taken < 24 * kMiB);
  REQUIRE(loaded);
  CHECK(loaded->state.step == 1);
  CHECK(same_tensors(*resumed, *saved));

  // A NaN at `element` of the weight, saved as step 2: the load's error.
  const auto error_for_nan_at = [&](std::int64_t element) {
    saved->params()[0].value.f32()[element] = std::numeric_limits<float>::quiet_NaN();
    store.save(*saved, state_at(2), {}, fail_on_warning);
    try {
      store.load_newest(*resumed, true, fail_on_warning);
    } catch (const checkpoint::CheckpointNotFinite& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  SECTION("a NaN past the first piece is found, at its place") {
    // Element 4200000 lies in the weight's second 16 MiB piece: row 1025, column 1600.
    CHECK_THAT(error_for_nan_at(4200000),
               Catch::Contains("tensor 'fc.weight' element 4200000 (at [1025, 1600]) is NaN; 1 of "
                               "its 16793600 values is not finite"));
  }
  SECTION("a NaN in the last, partial piece is found, at its place") {
    CHECK_THAT(error_for_nan_at(16793599),
               Catch::Contains("tensor 'fc.weight' element 16793599 (at [4099, 4095]) is NaN"));
  }
}

TEST_CASE("a run knows the room its checkpoints take, and checks it before its first step") {
  namespace fs = std::filesystem;
  auto program = large_program(3);
  testing::TempDir tmp("checkpoint-room");
  checkpoint::CheckpointStore store(tmp.path().string());
  store.check_writable();  // makes the folder
  const checkpoint::CheckpointSize size = checkpoint::checkpoint_size(*program);
  const std::string saved = store.save(*program, state_at(1), {}, fail_on_warning);
  std::uint64_t written = 0, largest = 0;
  for (const auto& e : fs::directory_iterator(saved)) {
    written += e.file_size();
    largest = std::max<std::uint64_t>(largest, e.file_size());
  }
  CHECK(size.total >= written);
  CHECK(size.total - written < 64 * 1024);  // block rounding and header room
  CHECK(size.largest_file <= largest);      // the tensors and their names
  CHECK(largest - size.largest_file < 32 * 1024);

  // No room for one: refused; for fewer than those kept (beyond the one
  // there) and one more: a warning.
  const std::uint64_t free_bytes = fs::space(store.directory()).available;
  const auto of = [](std::uint64_t total) { return checkpoint::CheckpointSize{total, 1}; };
  CHECK_THROWS_WITH(store.check_room(of(free_bytes + (std::uint64_t{1} << 40)), 2),
                    Catch::Contains("the run would train and then fail saving its first "
                                    "checkpoint") &&
                        Catch::Contains(store.directory()));
  CHECK_THAT(store.check_room(of(free_bytes / 3), 10),
             Catch::Contains("has room for ") && Catch::Contains("this run keeps up to 10") &&
                 Catch::Contains("1 there now"));
  CHECK(store.check_room(of(free_bytes / 3), 0).empty());  // keep_last: 0 keeps every one
  CHECK(store.check_room(of(1), 10).empty());
  // Kept 2 with 1 there: 2 more are needed, and room for 2 is no warning.
  CHECK(store.check_room(of(free_bytes / 4), 2).empty());

  // An unfinished folder a killed process left is room the first save frees.
  fs::copy(saved, fs::path(store.directory()) / "step-00000002.tmp", fs::copy_options::recursive);
  const std::uint64_t left_free = fs::space(store.directory()).available;
  CHECK_NOTHROW(store.check_room(of(left_free + written / 2), 0));
  CHECK_THROWS(store.check_room(of(left_free + 2 * written), 0));

  // A file over the file size limit (ulimit -f) is refused before training.
  struct rlimit before {};
  REQUIRE(getrlimit(RLIMIT_FSIZE, &before) == 0);
  struct rlimit lower = before;
  lower.rlim_cur = 1 << 20;
  REQUIRE(setrlimit(RLIMIT_FSIZE, &lower) == 0);
  CHECK_THROWS_WITH(store.check_room(size, 2), Catch::Contains("(ulimit -f)"));
  REQUIRE(setrlimit(RLIMIT_FSIZE, &before) == 0);

  // A folder that cannot be made is named before anything trains.
  CHECK_THROWS_WITH(
      checkpoint::CheckpointStore("/proc/no-such-run").check_writable(),
      Catch::Contains("checkpoints cannot be written in /proc/no-such-run/checkpoints"));
}

}  // namespace
}  // namespace trainer::graph
