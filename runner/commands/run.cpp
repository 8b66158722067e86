// `trainer run CONFIG [KEY=VALUE ...] [--out DIR]`: trains the experiment.
#include <cstdio>

#include "runner/commands.h"
#include "runner/config/load.h"
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
  const config::Config config = config::load_config(args.config_path, args.overrides);
  const train::Session session = train::prepare_session(config);
  Backend& backend = train::select_backend(config);
  const std::string dir = train::create_run_dir(config, args, backend.name());
  auto program = train::compile(session, backend);
  train::train(session, *program, dir);
  std::printf("run directory: %s\n", dir.c_str());
  return 0;
}

}  // namespace trainer
