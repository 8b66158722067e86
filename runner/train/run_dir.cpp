// Run directory creation, resolved config and manifest.
#include "runner/train/run_dir.h"

#include <ctime>
#include <filesystem>
#include <fstream>
#include <thread>

#include <nlohmann/json.hpp>
#include <oneapi/dnnl/dnnl.hpp>

#include "runner/config/emit.h"
#include "runner/train/sha256.h"

namespace trainer::train {
namespace fs = std::filesystem;

std::string create_run_dir(const config::Config& config, const CommandArgs& args,
                           const std::string& backend_name) {
  fs::path dir = args.out_dir;
  if (dir.empty()) {
    char stamp[32];
    const std::time_t now = std::time(nullptr);
    std::tm tm{};
    localtime_r(&now, &tm);
    std::strftime(stamp, sizeof stamp, "%Y%m%d-%H%M%S", &tm);
    dir = fs::path(config.output.dir) / config.name / stamp;
  }
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) throw std::runtime_error("cannot create run directory " + dir.string() + ": " + ec.message());

  const std::string yaml = config::to_yaml(config.resolved);
  std::ofstream(dir / "config.yaml") << "# resolved from " << args.config_path << "\n" << yaml;
  std::ofstream(dir / "config.sha256") << sha256_hex(yaml) << "\n";

  const dnnl_version_t* dv = dnnl_version();
  nlohmann::json manifest = {
      {"command", "trainer run " + args.config_path},
      {"overrides", args.overrides},
      {"trainer_version", TRAINER_VERSION},
      {"compiler", __VERSION__},
      {"onednn", std::to_string(dv->major) + "." + std::to_string(dv->minor) + "." +
                     std::to_string(dv->patch)},
      {"backend", backend_name},
      {"hardware_threads", std::thread::hardware_concurrency()},
      {"seed", config.seed},
      {"deterministic", config.deterministic},
      {"precision", config.precision.mode},
  };
  std::ofstream(dir / "manifest.json") << manifest.dump(2) << "\n";
  return dir.string();
}

}  // namespace trainer::train
