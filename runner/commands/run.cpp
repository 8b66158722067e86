// `trainer run CONFIG [KEY=VALUE ...] [--out DIR]`: trains the experiment.
#include <cstdio>

#include "runner/commands.h"
#include "runner/config/load.h"
#include "runner/dist/local_launcher.h"
#include "runner/dist/rank_job.h"
#include "runner/train/devices.h"
#include "runner/train/run_dir.h"
#include "runner/train/session.h"
#include "runner/train/trainer.h"

namespace trainer {

int command_run(const CommandArgs& args) {
  if (!args.resume_dir.empty()) {
    std::fprintf(stderr, "error: --resume is not available yet in this version of trainer\n");
    return 2;
  }
  const config::Config loaded = config::load_config(args.config_path, args.overrides);
  if (const auto code = dist::launch_local_ranks(loaded)) return *code;  // N ranks here: mpirun
  dist::RankJob job(loaded);  // a rank of an mpirun/srun job, or a single process
  const config::Config& config = job.config();
  const train::Session session = train::prepare_session(config);
  Backend& backend = job.select_backend();
  const std::string dir = job.is_root() ? train::create_run_dir(config, args, backend.name()) : "";
  auto program = train::compile(session, backend);
  job.attach(*program, dir);
  train::train(session, *program, dir, job.collective());
  if (job.is_root()) std::printf("run directory: %s\n", dir.c_str());
  return 0;
}

}  // namespace trainer
