// The subcommands behind the CLI, one file each under runner/commands/.
// Each returns the exit code (0 ok, 1 runtime failure, 2 usage or config error).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace trainer {

struct CommandArgs {
  std::string config_path;
  std::vector<std::string> overrides;  // "optimizer.lr=3e-4"
  std::string out_dir;                 // run: --out
  std::string resume_dir;              // run: --resume
  std::int64_t steps = 0;              // time, lr-find: number of steps (0: default)
  std::vector<std::string> grid;       // sweep: --grid key=v1,v2 (one entry per --grid)
  std::int64_t parallel = 1;           // sweep: --parallel N runs at once
  std::string run_dir;                 // eval: the run directory
  std::string checkpoint = "last";     // eval: --checkpoint last | best | NAME | PATH
  bool json = false;                   // eval: --json prints one JSON object
  bool read_data = false;              // validate: --data reads every sample
  double min_lr = 1e-7;                // lr-find: the first step's rate
  double max_lr = 10;                  // lr-find: the last step's rate
  // run: the config's warnings were shown already (lr-find shows those of the
  // config as the user wrote it, not of the settings it adds)
  bool warnings_shown = false;
};

// `run_dir`: where the run directory is written, as soon as it exists.
int command_run(const CommandArgs& args, std::string* run_dir = nullptr);
int command_lr_find(const CommandArgs& args);
int command_plan(const CommandArgs& args);
int command_time(const CommandArgs& args);
int command_sweep(const CommandArgs& args);
int command_eval(const CommandArgs& args);
int command_doctor();

}  // namespace trainer
