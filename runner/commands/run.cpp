// `trainer run CONFIG [KEY=VALUE ...] [--out DIR]`: trains the experiment.
// `trainer run --resume RUN_DIR [CONFIG] [KEY=VALUE ...]` continues a run from
// its newest good checkpoint (CONFIG defaults to RUN_DIR/config.yaml).
// SIGINT / SIGTERM / SIGHUP: the step finishes, a checkpoint is written, exit 130 / 143 / 129.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "runner/checkpoint/checkpoint_store.h"
#include "runner/checkpoint/stop_signal.h"
#include "runner/commands.h"
#include "runner/commands/command_config.h"
#include "runner/commands/config_commands.h"
#include "runner/config/load.h"
#include "runner/config/overrides.h"
#include "runner/config/validate_hooks.h"
#include "runner/dist/launch_env.h"
#include "runner/dist/local_launcher.h"
#include "runner/dist/rank_agreement.h"
#include "runner/dist/rank_job.h"
#include "runner/error_report.h"
#include "runner/shell_word.h"
#include "runner/train/batch_fit.h"
#include "runner/train/devices.h"
#include "runner/train/memory_report.h"
#include "runner/train/progress.h"
#include "runner/train/run_dir.h"
#include "runner/train/run_lock.h"
#include "runner/train/run_records.h"
#include "runner/train/session.h"
#include "runner/train/session_checks.h"
#include "runner/train/trainer.h"

namespace trainer {
namespace {

bool launched_as_rank() {
  try {
    return dist::detect_launch_env().has_value();
  } catch (const std::runtime_error&) {
    return true;  // a launcher's variables, if malformed: the rank job reports them
  }
}

// Whether `trainer run --resume DIR` trains DIR/config.yaml as the run kept
// it: that file, and no override of its sweep section.
bool resumes_own_config(const CommandArgs& args) {
  std::error_code ec;
  const auto own = std::filesystem::path(args.resume_dir) / "config.yaml";
  if (!std::filesystem::equivalent(args.config_path, own, ec) || ec) return false;
  return std::none_of(args.overrides.begin(), args.overrides.end(), [](const std::string& o) {
    const std::string key = config::override_key(o);
    return key == "sweep" || key.rfind("sweep.", 0) == 0 || key.rfind("sweep[", 0) == 0;
  });
}

}  // namespace

int command_run(const CommandArgs& given, std::string* run_dir) {
  CommandArgs args = given;
  const bool resume = !args.resume_dir.empty();
  if (resume && args.config_path.empty()) {
    args.config_path = (std::filesystem::path(args.resume_dir) / "config.yaml").string();
    std::error_code ec;
    if (std::filesystem::exists(std::filesystem::path(args.resume_dir) / "config.sha256", ec) &&
        !std::filesystem::exists(args.config_path, ec)) {
      print_error_report("error: --resume " + args.resume_dir + ": the run's " + args.config_path +
                         " is gone\n    put it back (manifest.json keeps every resolved config "
                         "the run trained with, under `configs`), or name a config: trainer run "
                         "CONFIG --resume " +
                         args.resume_dir + "\n");
      return 2;
    }
  }
  if (args.config_path.empty()) {
    print_error_report("error: trainer run needs a config file (or --resume RUN_DIR)\n");
    return 2;
  }
  std::error_code same_error;
  if (resume && !args.out_dir.empty() &&
      !std::filesystem::equivalent(args.out_dir, args.resume_dir, same_error)) {
    print_error_report("error: --out " + args.out_dir + " with --resume " + args.resume_dir +
                       ": a resumed run goes on in its own directory; drop --out, or start a new "
                       "run there from the checkpoint's weights (model.init_from: " +
                       args.resume_dir + "/checkpoints/last/model.safetensors)\n");
    return 2;
  }
  if (resume &&
      !std::filesystem::exists(std::filesystem::path(args.resume_dir) / "config.sha256")) {
    if (train::unfinished_run_dir(args.resume_dir) &&
        std::filesystem::exists(std::filesystem::path(args.resume_dir) / "config.yaml"))
      print_error_report("error: --resume " + args.resume_dir +
                         ": the run's creation stopped before it wrote config.sha256 (nothing was "
                         "trained): start the run again there, trainer run CONFIG --out " +
                         args.resume_dir + "\n");
    else if (const std::filesystem::path dir(args.resume_dir);
             std::filesystem::is_regular_file(dir / "config.yaml") &&
             std::filesystem::is_directory(dir / "checkpoints"))
      // A run's directory that lost config.sha256 alone (removed by hand, or
      // by a copy that left it out): its config.yaml gives it again.
      print_error_report(
          "error: --resume " + args.resume_dir +
          ": config.sha256 is missing, though the directory holds a run's config.yaml and "
          "checkpoints\n    if config.yaml is the run's own, unedited, write its checksum "
          "again and resume: tail -n +2 " +
          shell_word((dir / "config.yaml").string()) + " | sha256sum | cut -d' ' -f1 > " +
          shell_word((dir / "config.sha256").string()) + "\n");
    else if (const std::string advice = train::run_dir_advice(args.resume_dir, false);
             !advice.empty())
      print_error_report("error: --resume " + args.resume_dir + ": not a run directory: " + advice +
                         "\n");
    else  // a new run starts there only if --out would take it: empty, or left unfinished
      print_error_report(
          "error: --resume " + args.resume_dir +
          ": not a run directory (no config.sha256)\n    --resume takes the directory a run wrote "
          "(runs/<name>/<timestamp>, or its --out); " +
          (train::refuse_used_run_dir(args.resume_dir).empty()
               ? "to start a run there: trainer run CONFIG --out " + args.resume_dir
               : std::string("it holds other files, so a new run needs a directory of its own: "
                             "trainer run CONFIG --out NEW_DIR")) +
          "\n");
    return 2;
  }
  // Before any work: this run would overwrite another. (Not in the ranks of a
  // job: rank 0 may have created the directory already; it checks again.)
  if (!resume && !args.out_dir.empty() && !launched_as_rank()) {
    if (const std::string refused = train::refuse_used_run_dir(args.out_dir); !refused.empty()) {
      print_error_report("error: " + refused + "\n");
      return 2;
    }
  }
  // A resume of the config its run directory keeps does not check that
  // config's sweep section, which an earlier trainer may have read more
  // loosely (the resume does not use it); another config, or an override of
  // the section, is checked as everywhere.
  const config::Config loaded = resume && resumes_own_config(args)
                                    ? config::load_config(args.config_path, args.overrides)
                                    : load_command_config(args.config_path, args.overrides);
  // A resume's classes as the run named them (the model's outputs are
  // theirs): labels of names follow those, whatever names the data holds now.
  const std::vector<std::string> run_classes =
      resume ? train::recorded_class_names(args.resume_dir) : std::vector<std::string>{};
  if (!launched_as_rank()) {  // before starting ranks that could not use them
    config::Diagnostics diags;
    train::check_devices(loaded, diags);
    diags.throw_if_any();
    // The model and data checks each rank would make, made once here: an
    // error is reported once (exit 2), not by every rank and mpirun's abort.
    // A resume's data and model too (its data may have moved since), and its
    // model.init_from only where the ranks would read it: without a
    // checkpoint to resume from.
    if (dist::requested_ranks(loaded) > 1 && !resume) {
      config::run_validation_hooks(loaded);
    } else if (dist::requested_ranks(loaded) > 1) {
      const train::Session checked = train::prepare_session(
          loaded, run_classes, !checkpoint::CheckpointStore(args.resume_dir).holds_checkpoints());
      config::Diagnostics diags;
      train::check_init_from(checked, diags);
      diags.throw_if_any();
    }
  }
  if (const auto code = dist::launch_local_ranks(loaded)) return *code;  // N ranks here: mpirun
  // Before the job: the job's collective, which hooks into the program's
  // backward, unhooks itself as it goes, while the program is still there.
  // (The step's recording, which may hold NCCL's captured reductions, is
  // dropped with the training loop, before the communicator goes.)
  std::unique_ptr<graph::Program> program;
  dist::RankJob job(loaded);  // a rank of an mpirun/srun job, or a single process
  // From here SIGINT / SIGTERM / SIGHUP stop the run between steps (or before the
  // first, once its directory is complete), never in the middle of a write.
  checkpoint::StopSignals stop_signals;
  const config::Config& config = job.config();
  if (job.is_root()) {
    if (!args.warnings_shown) print_config_warnings(config);
    if (const std::string note = train::precision_note(config); !note.empty())
      std::fprintf(stderr, "note: precision %s: %s\n", config.precision.mode.c_str(), note.c_str());
    if (!resume && !config.sweep.is_null())
      std::fprintf(stderr,
                   "note: the sweep: section is read by `trainer sweep %s`; this run trains the "
                   "config's own values\n",
                   args.config_path.c_str());
  }
  // A resume from a checkpoint takes its weights from there, not model.init_from,
  // and its classes as the run named them (run_classes).
  train::Session session = train::prepare_session(
      config, run_classes,
      !resume || !checkpoint::CheckpointStore(args.resume_dir).holds_checkpoints());
  {  // weights that would not load: refused before the run directory exists
    config::Diagnostics diags;
    train::check_init_from(session, diags);
    diags.throw_if_any();
  }
  if (job.is_root() && !args.warnings_shown)
    for (const auto& warning : session.warnings)
      std::fprintf(stderr, "%s\n", config::format(warning, "warning").c_str());
  // Before any collective that depends on the config: the ranks train the
  // same experiment, or every rank stops here alike (and the job ends
  // normally: no rank waits for another).
  if (const std::string differs = dist::rank_disagreement(
          job.collective(),
          dist::fingerprint_of(loaded, session.graph, session.train_data->content_digest(),
                               {resume, job.bucket_bytes()}));
      !differs.empty()) {
    print_error_report("error: " + differs + "\n");
    return 2;
  }
  Backend& backend = job.select_backend();
  // SyncBN kernels reduce over the job's ranks: the plan that fits the batch
  // compiles the kernels the run will.
  session.collective = &job.collective();
  // Every rank must step alike: with auto, the smallest memory of the job's
  // devices decides. Asked of every rank, whichever way its resume goes (one
  // that reads another run directory finds that out in the resume).
  const double capacity =
      config.train.micro_batch_auto
          ? smallest_over_ranks(job.collective(), train::memory_capacity(session, backend))
          : 0;
  // A resumed run whose micro-batch auto chose steps as before, whatever
  // memory there is now: its checkpoint's steps are of that accumulation.
  const std::int64_t per_rank = session.batch.micro * session.batch.accumulation;
  std::string batch_record_problem;
  const std::optional<std::int64_t> kept_accumulation =
      resume && config.train.micro_batch_auto
          ? train::recorded_auto_accumulation(args.resume_dir, &batch_record_problem)
          : std::nullopt;
  if (!batch_record_problem.empty() && job.is_root())
    std::fprintf(stderr, "warning: %s: micro_batch_size: auto chooses again\n",
                 batch_record_problem.c_str());
  if (kept_accumulation && per_rank % *kept_accumulation == 0) {
    session = train::with_micro_batch(session, per_rank / *kept_accumulation);
    // The kept choice is held to a limit given now, as any plan is.
    if (config.train.memory_limit_mib > 0)
      train::enforce_memory_limit(session, backend, train::MicroBatch::kept);
    if (job.is_root())
      std::printf(
          "micro_batch_size: auto: micro-batch %lld x accumulation %lld, as the run chose\n",
          static_cast<long long>(session.batch.micro),
          static_cast<long long>(session.batch.accumulation));
  } else {
    train::FittedBatch fitted = train::fit_batch_to_memory(session, backend, capacity);
    session = std::move(fitted.session);
    if (job.is_root() && !fitted.note.empty()) std::printf("%s\n", fitted.note.c_str());
  }
  // Every rank reads the checkpoint to resume from; only the root writes, and
  // holds the directory's lock while it does.
  std::string dir = resume ? args.resume_dir : "";
  train::RunDirLock lock;
  if (job.is_root()) {
    if (resume) {
      lock = train::RunDirLock(dir, "run directory");
      train::check_manifest(dir);  // a resume adds to it: damaged, nothing may change first
      train::check_run_files_writable(dir);
    } else {
      dir = train::create_run_dir(config, args, backend.name(), session.init_from_file, lock);
    }
  }
  if (run_dir) *run_dir = dir;
  // For the launcher of this job (kRunDirNoteVariable): where to record a
  // failure it sees and the root cannot, once the run writes its directory
  // (a refused resume leaves it as it was).
  const auto name_run_dir_to_launcher = [&] {
    if (const char* note = std::getenv(train::kRunDirNoteVariable); note && job.is_root())
      std::ofstream(note) << dir << '\n';
  };
  if (!resume) name_run_dir_to_launcher();
  nlohmann::json summary;
  try {
    // One process stops here; the ranks of a job agree on a stop after a step.
    if (const int signal = checkpoint::stop_requested();
        signal != 0 && job.collective().world() == 1) {
      if (job.is_root()) {
        if (!resume) train::record_stopped_before_training(dir, signal);
        std::fprintf(stderr,
                     "warning: stopped by signal %d before training started; continue with "
                     "`trainer run --resume %s`\n",
                     signal, dir.c_str());
      }
      return 128 + signal;
    }
    program = train::compile(session, backend);
    job.attach(*program, dir);
    train::TrainOptions options;
    options.resume = resume;
    // A resume rewrites config.yaml and the manifest only once its checkpoint
    // has loaded: a refused one leaves the run directory as it was, and so
    // does one of a finished run (it is not called).
    bool writes_directory = false;
    options.before_writing = [&] {
      writes_directory = true;
      if (!job.is_root()) return;
      if (!resume)
        for (const std::string& difference : train::rerun_differences(args.config_path, session))
          std::fprintf(stderr, "warning: %s: this run will not repeat it\n", difference.c_str());
      if (resume) {
        name_run_dir_to_launcher();
        if (const std::string threads = train::resume_thread_change(dir, config); !threads.empty())
          std::fprintf(stderr, "warning: %s\n", threads.c_str());
        const std::string change = train::reopen_run_dir(dir, config, args);
        if (!change.empty()) std::fprintf(stderr, "note: %s\n", change.c_str());
      }
      job.record_job(dir);
      train::record_program(dir, *program, session);
    };
    summary = train::train(session, *program, dir, job.collective(), options);
    if (job.is_root() && writes_directory) train::record_step_execution(dir, *program);
  } catch (const OutOfMemoryError& e) {
    program.reset();  // give the memory back before planning again
    const std::string report = train::out_of_memory_report(session, backend);
    if (job.is_root() && !resume) train::record_failure(dir, e.what() + ("\n" + report));
    print_error_report("error: " + std::string(e.what()) + "\n" + report + "\n");
    job.end_job_at_exit();  // the other ranks would wait for this one
    return 1;
  } catch (const std::exception& e) {
    // Before the loop started (it records its own failures): summary.json says why.
    if (job.is_root() && !resume) train::record_failure(dir, e.what());
    throw;
  }
  if (job.is_root()) std::printf("run directory: %s\n", dir.c_str());
  if (summary.value("status", "") == "interrupted") return 128 + summary.value("signal", 15);
  return 0;
}

}  // namespace trainer
