// Command-line parsing (CLI11) and dispatch to the subcommands. Exit codes:
// 0 success, 1 runtime failure, 2 usage or configuration error.
#include "runner/cli.h"

#include <sys/stat.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <exception>
#include <filesystem>
#include <iostream>
#include <optional>
#include <sstream>
#include <string>
#include <system_error>
#include <vector>

#include "runner/commands.h"
#include "runner/commands/config_commands.h"
#include "runner/config/diagnostics.h"
#include "runner/config/overrides.h"
#include "runner/config/registry.h"
#include "runner/error_report.h"
#include "runner/guarded_command.h"
#include "runner/sweep/sweep_runner.h"
#include "runner/usage_error.h"

namespace trainer {
namespace {

// A KEY=VALUE where the config file goes: an override, when no file has that name.
bool is_override(const std::string& arg) {
  return arg.find('=') != std::string::npos && !std::filesystem::exists(arg);
}

// A directory flag's check: an empty name would silently mean the default.
const CLI::Validator kNonEmptyDirectory(
    [](std::string& arg) {
      return arg.empty() ? std::string(
                               "an empty directory name; give a directory, or leave the "
                               "flag out for the default")
                         : std::string();
    },
    "");  // shown as DIR by each option (TEXT:DIR reads as one that must exist)

// A directory argument's check (--resume, eval's RUN_DIR): one that is there.
const CLI::Validator kExistingDirectory(
    [](std::string& arg) {
      std::error_code ec;
      if (std::filesystem::is_directory(arg, ec)) return std::string();
      if (std::filesystem::exists(arg, ec))
        return "'" + arg + "' is a file; give the run directory (the folder holding config.yaml)";
      return ec ? "cannot use '" + arg + "': " + ec.message() : "no such directory '" + arg + "'";
    },
    "DIR");

// A count flag's check, worded like the config's own range errors: an
// integer >= `least`, and <= `most` when it is given; `why` follows the
// error when the floor has a reason.
CLI::Validator count_check(long long least = 1, std::optional<long long> most = std::nullopt,
                           const std::string& why = "") {
  const std::string range = most ? " and <= " + std::to_string(*most) : "";
  return CLI::Validator(
      [least, most, range, why](std::string& arg) {
        std::size_t used = 0;
        long long value = 0;
        try {
          value = std::stoll(arg, &used);
        } catch (const std::exception&) {
          used = 0;
        }
        if (used == arg.size() && used > 0 && value >= least && (!most || value <= *most))
          return std::string();
        return "expected an integer >= " + std::to_string(least) + range + ", found '" + arg + "'" +
               (why.empty() ? "" : ": " + why);
      },
      most ? "INT in [" + std::to_string(least) + ", " + std::to_string(*most) + "]"
           : "INT>=" + std::to_string(least));
}

const CLI::Validator kAtLeastOne = count_check();

CLI::App* add_config_command(CLI::App& app, const std::string& name, const std::string& help,
                             CommandArgs& args, bool help_asked) {
  CLI::App* sub = app.add_subcommand(name, help);
  // An override in the config's place passes here and is placed (or refused)
  // after parsing; with --help the file is not looked at.
  const CLI::Validator file_or_override(
      [help_asked, name](std::string& arg) {
        std::error_code ec;
        if (help_asked || is_override(arg)) return std::string();
        if (std::filesystem::is_directory(arg, ec)) {
          // A run's directory (its config.yaml and config.sha256): what the user meant.
          const std::filesystem::path config = std::filesystem::path(arg) / "config.yaml";
          if (!std::filesystem::is_regular_file(config, ec) ||
              !std::filesystem::exists(std::filesystem::path(arg) / "config.sha256", ec))
            return "'" + arg + "' is a directory; give the YAML file";
          return "'" + arg + "' is a run's directory; " +
                 (name == "run"
                      ? "trainer run --resume " + arg + " goes on with that run, and trainer run " +
                            config.string() + " starts a new run of its config"
                      : "its config is " + config.string());
        }
        if (!std::filesystem::exists(arg, ec))
          return ec ? "cannot use '" + arg + "': " + ec.message() : "no such file '" + arg + "'";
        return CLI::ExistingFile(arg);
      },
      "FILE");
  sub->add_option("config", args.config_path, "Experiment YAML file")
      ->required()
      ->check(file_or_override);
  sub->add_option("overrides", args.overrides,
                  "KEY=VALUE overrides applied last (optimizer.lr=3e-4, devices=[0,1])");
  return sub;
}

constexpr const char* kNotExpected = "The following argument was not expected: ";
constexpr const char* kNotExpectedMany = "The following arguments were not expected: ";

// "--min-lr: 1 required FLOAT:NUMBER missing" (a flag given last, or as
// `--min-lr=`) as "--min-lr needs a value: --min-lr NUMBER"; "run_dir is
// required" as "trainer eval needs a run directory: ...". nullopt for
// other messages.
std::optional<std::string> value_missing(const std::string& message) {
  const std::string required = " required ", missing = " missing";
  const std::size_t colon = message.find(": ");
  const std::size_t at = message.find(required);
  if (colon != std::string::npos && at != std::string::npos && at > colon &&
      message.size() > missing.size() &&
      message.compare(message.size() - missing.size(), missing.size(), missing) == 0) {
    const std::string flag = message.substr(0, colon);
    std::string type = message.substr(at + required.size(),
                                      message.size() - missing.size() - at - required.size());
    if (const std::size_t last = type.rfind(':'); last != std::string::npos)
      type = type.substr(last + 1);  // "FLOAT:NUMBER" -> "NUMBER"
    return flag + " needs a value: " + flag + " " + type;
  }
  if (message == "run_dir is required")
    return "trainer eval needs a run directory: trainer eval RUN_DIR [KEY=VALUE ...]";
  return std::nullopt;
}

// CLI11's parse errors worded as this tool's errors are: "error: " first,
// the usual mistakes in words, then where the usage is.
std::string parse_failure(const CLI::App* app, const CLI::Error& e) {
  std::string command;
  for (const CLI::App* sub : app->get_subcommands()) command = sub->get_name();
  std::string message = e.what();
  if (message == "A subcommand is required") {
    std::vector<std::string> names;
    for (const CLI::App* sub : app->get_subcommands({})) names.push_back(sub->get_name());
    message = "a command is required: one of " + config::join(names);
  } else if (message == "config is required") {
    message = "trainer " + command + " needs a config file: trainer " + command +
              " CONFIG.yaml [KEY=VALUE ...]";
  } else if (const auto at = message.find(": At Most 1 required but received ");
             at != std::string::npos) {
    message = message.substr(0, at) + " is given more than once; give it once";
  } else if (const auto equals = message.find(" = ");
             message.rfind("Could not convert: ", 0) == 0 && equals != std::string::npos) {
    // "Could not convert: --min-lr = abc"
    message =
        message.substr(19, equals - 19) + ": '" + message.substr(equals + 3) + "' is not a number";
  } else if (const auto missing = value_missing(message)) {
    message = *missing;
  } else if (message.rfind("run_dir: ", 0) == 0) {  // eval's positional, as its usage names it
    message = "RUN_DIR: " + message.substr(9);
  } else if (message.rfind(kNotExpected, 0) == 0 || message.rfind(kNotExpectedMany, 0) == 0) {
    const bool one = message.rfind(kNotExpected, 0) == 0;
    // CLI11 lists the extra words last first.
    std::vector<std::string> words;
    std::istringstream listed(
        message.substr(std::string(one ? kNotExpected : kNotExpectedMany).size()));
    for (std::string word; listed >> word;) words.insert(words.begin(), word);
    const std::string extra = one ? words.front() : config::join(words, " ");
    const std::string who = command.empty() ? std::string("trainer") : "trainer " + command;
    message = one && extra.rfind('-', 0) == 0
                  ? who + " has no option '" + extra + "'"
                  : who + " takes no " + (one ? "argument '" + extra + "'" : "arguments " + extra);
  }
  const std::string usage = command.empty() ? "trainer --help lists the commands"
                                            : "trainer " + command + " --help shows its usage";
  return "error: " + message + "\n    " + usage + "\n";
}

// The exit code for what parsing the command line threw: 0 for --help and
// --version (their text on stdout), else a usage error, reported.
int exit_for_parse_error(CLI::App& app, const CLI::ParseError& e) {
  std::ostringstream report;
  const int code = app.exit(e, std::cout, report);
  print_error_report(report.str());
  return code == 0 ? 0 : kUsageError;
}

// The exit code once what the command printed on standard output has reached
// it: a write that failed (a full disk under `> file`) is reported and exits
// 1, since the output is incomplete. A reader that went away (`| head`) is no
// error: it had read what it wanted.
int finish_standard_output(int code) {
  errno = 0;
  const bool flushed = std::fflush(stdout) == 0;
  const int error = errno;
  if (flushed && !std::ferror(stdout)) return code;
  struct stat status {};
  const bool pipe =
      fstat(STDOUT_FILENO, &status) == 0 && (S_ISFIFO(status.st_mode) || S_ISSOCK(status.st_mode));
  if (error == EPIPE || (error == 0 && pipe)) return code;
  print_error_report("error: cannot write to standard output: " +
                     std::string(error != 0 ? std::strerror(error) : "a write failed") +
                     ": what this command printed there is incomplete\n");
  return code == 0 ? 1 : code;
}

int run_command_line(int argc, char** argv) {
  CLI::App app{"trainer: declarative deep-learning training from one YAML file"};
  app.require_subcommand(1);
  app.set_version_flag("--version", std::string(TRAINER_VERSION));
  app.failure_message(parse_failure);
  // --help anywhere prints the usage, whatever else the line holds.
  bool help_asked = false;
  for (int i = 1; i < argc && std::string(argv[i]) != "--"; ++i)
    help_asked |= std::string(argv[i]) == "--help" || std::string(argv[i]) == "-h";

  CommandArgs args;
  std::string schema_out = ".";

  CLI::App* run = add_config_command(app, "run", "Train the experiment", args, help_asked);
  run->add_option("--out", args.out_dir, "Run directory (default: <output.dir>/<name>/<time>)")
      ->check(kNonEmptyDirectory)
      ->type_name("DIR");
  run->add_option("--resume", args.resume_dir,
                  "Resume from this run directory's newest checkpoint that verifies")
      ->check(kExistingDirectory);
  run->get_option("config")->required(false);  // --resume DIR alone uses DIR/config.yaml
  CLI::App* validate = add_config_command(
      app, "validate", "Check the config (fields and model); print ok or every error", args,
      help_asked);
  validate->add_flag("--data", args.read_data,
                     "Also read every sample of the training and evaluation data (all cores), "
                     "so that a damaged image is found before a run meets it");
  add_config_command(app, "print-config", "Print the resolved config (defaults filled) as YAML",
                     args, help_asked);
  add_config_command(app, "plan",
                     "Compile the experiment and print shapes, parameters, FLOPs and memory plan",
                     args, help_asked);
  CLI::App* time = add_config_command(app, "time", "Time forward/backward per layer and per step",
                                      args, help_asked);
  time->add_option("--steps", args.steps, "Number of timed steps (default 20)")
      ->check(count_check(1, 1000000, "a timing needs a few steps; trainer run trains"));
  CLI::App* sweep = add_config_command(
      app, "sweep", "Run the trials of the config's sweep: section (grid, random search, seeds)",
      args, help_asked);
  // One KEY=VALUES each: what follows is an override again.
  sweep->add_option("--grid", args.grid, "KEY=V1,V2,... (repeatable); adds to the file's `sweep:`")
      ->type_name("KEY=V1,V2,...")
      ->allow_extra_args(false);
  sweep->add_option("--parallel", args.parallel, "Runs at once")
      ->check(count_check(1, sweep::kMaxParallelTrials));
  sweep
      ->add_option("--out", args.out_dir,
                   "Sweep directory (default: <output.dir>/<name>/sweep-<hash>)")
      ->check(kNonEmptyDirectory)
      ->type_name("DIR");
  CLI::App* lr_find = add_config_command(
      app, "lr-find",
      "Learning-rate range test: a short run with the rate rising exponentially; suggests a rate",
      args, help_asked);
  lr_find->add_option("--steps", args.steps, "Steps of the test (default 100)")
      ->check(count_check(10, 1000000,
                          "the range test reads the loss over 10 steps or more, and a "
                          "few hundred are plenty"));
  const CLI::Validator non_empty_number(
      [](std::string& arg) {
        return arg.empty() ? std::string("an empty value; give a number, or leave the flag out")
                           : std::string();
      },
      "NUMBER");
  lr_find->add_option("--min-lr", args.min_lr, "The first step's rate")
      ->capture_default_str()
      ->check(non_empty_number);
  lr_find->add_option("--max-lr", args.max_lr, "The last step's rate")
      ->capture_default_str()
      ->check(non_empty_number);
  lr_find
      ->add_option("--out", args.out_dir,
                   "Run directory (default: <output.dir>/<name>-lr-find/<time>)")
      ->check(kNonEmptyDirectory)
      ->type_name("DIR");
  CLI::App* eval = app.add_subcommand(
      "eval", "Evaluate a run's checkpoint on its eval data (or other data, by override)");
  eval->add_option("run_dir", args.run_dir, "Run directory")->required()->check(kExistingDirectory);
  eval->add_option("overrides", args.overrides,
                   "KEY=VALUE overrides of the run's config (train.eval_batches=10, devices=cpu)");
  eval->add_option("--checkpoint", args.checkpoint,
                   "last (default), best (by checkpoint.metric), a name under checkpoints/, a "
                   "checkpoint folder, or a .safetensors file of weights alone")
      ->type_name("NAME");
  eval->add_flag("--json", args.json, "Print one JSON object instead of text");
  CLI::App* doctor =
      app.add_subcommand("doctor", "Report the toolchain, libraries and devices found");
  CLI::App* schema = app.add_subcommand(
      "schema", "Write schemas/trainer.schema.json and docs/config-reference.md under DIR");
  schema->add_option("--out", schema_out, "Output directory (default: the current directory)")
      ->check(kNonEmptyDirectory)
      ->type_name("DIR");
  CLI::App* version =
      app.add_subcommand("version", "Print version, commit, build type and backends");

  // `--version` answers before CLI11 has read what follows it.
  if (argc > 2 && std::string(argv[1]) == "--version") {
    print_error_report("error: trainer --version takes no argument '" + std::string(argv[2]) +
                       "'\n    trainer --help lists the commands\n");
    return kUsageError;
  }
  // A first word that is no command: CLI11 would only say one is required.
  if (argc > 1 && argv[1][0] == '-' && !help_asked && std::string(argv[1]) != "--version") {
    print_error_report("error: unknown option '" + std::string(argv[1]) +
                       "'; a command comes first: trainer COMMAND [OPTIONS]\n    trainer --help "
                       "lists the commands\n");
    return kUsageError;
  }
  if (argc > 1 && argv[1][0] != '-') {
    std::vector<std::string> names;
    for (const CLI::App* sub : app.get_subcommands({})) names.push_back(sub->get_name());
    const std::string word = argv[1];
    if (std::find(names.begin(), names.end(), word) == names.end()) {
      const std::string listed = config::join(names);
      const std::string near = config::nearest(word, names);
      print_error_report("error: unknown command '" + word + "'; the commands are: " + listed +
                         "\n" +
                         (near.empty() ? "    trainer --help says what each does\n"
                                       : "    did you mean '" + near + "'?\n"));
      return kUsageError;
    }
  }

  // An option the command lacks, said before CLI11 reads the word after it
  // as the config (`run --resume DIR --checkpoint NAME` said "config: no such
  // file 'NAME'"); `--epochs 2`, as other tools take settings, with the
  // override it means.
  if (CLI::App* sub = argc > 1 && argv[1][0] != '-' ? app.get_subcommand(argv[1]) : nullptr;
      sub && !help_asked)
    for (int i = 2; i < argc; ++i) {
      const std::string word = argv[i];
      if (word == "--") break;
      if (word.rfind("--", 0) != 0 || word.size() == 2) continue;
      const std::string flag = word.substr(0, word.find('='));
      if (const CLI::Option* option = sub->get_option_no_throw(flag)) {
        // Its value follows as the next word (`--out --weird` names a folder).
        if (word.find('=') == std::string::npos && option->get_items_expected_min() > 0) ++i;
        continue;
      }
      if (const std::string key = config::config_key_named(flag.substr(2)); !key.empty()) {
        const std::string value = word.find('=') != std::string::npos
                                      ? word.substr(word.find('=') + 1)
                                  : i + 1 < argc && argv[i + 1][0] != '-' ? argv[i + 1]
                                                                          : "VALUE";
        print_error_report("error: '" + word +
                           "' is not an option; config values are set as KEY=VALUE after the "
                           "config: " +
                           key + "=" + value + "\n");
        return kUsageError;
      }
      const std::string name = sub->get_name();
      std::vector<std::string> names;  // without their dashes, which every one shares
      for (const CLI::Option* option : sub->get_options())
        for (const std::string& long_name : option->get_lnames()) names.push_back(long_name);
      const std::string nearest_name = config::nearest(flag.substr(2), names);
      const std::string near = nearest_name.empty() ? "" : "--" + nearest_name;
      print_error_report(
          "error: trainer " + name + " has no option '" + flag + "'" +
          (name == "run" && flag == "--checkpoint"
               ? ": a resume goes on from the newest checkpoint that verifies (to go back to an "
                 "older one, move the newer ones out of the run's checkpoints/); trainer eval "
                 "takes --checkpoint"
               : "") +
          (near.empty() ? "" : "\n    did you mean '" + near + "'?") + "\n    trainer " + name +
          " --help shows its usage\n");
      return kUsageError;
    }

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return exit_for_parse_error(app, e);
  }

  const std::string name = app.get_subcommands().front()->get_name();
  if (is_override(args.config_path)) {
    // `run --resume DIR KEY=VALUE`: the run directory's config, overridden.
    if (name == "run" && !args.resume_dir.empty()) {
      args.overrides.insert(args.overrides.begin(), args.config_path);
      args.config_path.clear();
    } else {
      print_error_report(
          "error: '" + args.config_path + "' is an override, but the config file comes first: " +
          "trainer " + name + " CONFIG.yaml " + args.config_path +
          (name == "run" ? " (or, to continue a run: trainer run --resume RUN_DIR KEY=VALUE)"
                         : "") +
          "\n");
      return kUsageError;
    }
  }
  return run_guarded(
      [&]() -> int {
        if (name == "run") return command_run(args);
        if (name == "validate") return command_validate(args);
        if (name == "print-config") return command_print_config(args);
        if (name == "plan") return command_plan(args);
        if (name == "time") return command_time(args);
        if (name == "sweep") return command_sweep(args);
        if (name == "eval") return command_eval(args);
        if (name == "lr-find") return command_lr_find(args);
        if (doctor->parsed()) return command_doctor();
        if (schema->parsed()) return command_schema(schema_out);
        if (version->parsed()) return command_version();
        return kUsageError;
      },
      args.overrides);
}

}  // namespace

int run_cli(int argc, char** argv) {
  return finish_standard_output(run_command_line(argc, argv));
}

}  // namespace trainer
