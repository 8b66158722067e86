// Running a subcommand with its errors reported on the console and turned
// into exit codes (guarded_command.h).
#include "runner/guarded_command.h"

#include <filesystem>
#include <new>
#include <string>
#include <string_view>
#include <system_error>

#include "runner/config/diagnostics.h"
#include "runner/config/overrides.h"
#include "runner/error_report.h"
#include "runner/usage_error.h"

namespace trainer {
namespace {

// An allocation of host memory that failed outside the planned arena (which
// reports its own figures): what ran out, and what to check. A constant:
// reporting it must not need memory.
constexpr std::string_view kOutOfHostMemoryReport =
    "error: out of host memory: an allocation failed (std::bad_alloc); the machine, or a limit on "
    "this process (ulimit -v, a cgroup), has no more memory to give\n"
    "    check the data sizes (data read into memory, and the loader's order of 8 bytes per "
    "training sample), train.batch_size / train.micro_batch_size, data.prefetch and data.workers, "
    "and run `trainer plan CONFIG` for the memory plan against the memory available\n";

// A filesystem error in plain words: "cannot create directories 'a/b': Not a
// directory" (the library writes "filesystem error: cannot create
// directories: Not a directory [a/b]"), and what to do about a file where a
// folder belongs or a link loop.
std::string filesystem_error_report(const std::filesystem::filesystem_error& e) {
  const std::string what = e.what(), prefix = "filesystem error: ";
  const std::string reason = e.code().message();
  std::string action;
  if (what.rfind(prefix, 0) == 0) {
    const std::size_t end = what.find(": " + reason, prefix.size());
    if (end != std::string::npos) action = what.substr(prefix.size(), end - prefix.size());
  }
  std::string paths = "'" + e.path1().string() + "'";
  if (!e.path2().empty()) paths += " and '" + e.path2().string() + "'";
  if (action.rfind("cannot ", 0) != 0) action = "cannot use";  // "status", "directory iterator"
  std::string report = "error: " + action + " " + paths + ": " + reason + "\n";
  if (e.code() == std::errc::not_a_directory)
    report += "    a file stands where a folder belongs ('" + e.path1().string() +
              "' or a folder above it): move it aside, or choose another directory\n";
  if (e.code() == std::errc::too_many_symbolic_link_levels)
    report +=
        "    a symbolic link on that path leads back to itself: replace it with the file or "
        "folder it should name\n";
  return report;
}

}  // namespace

int run_guarded(const std::function<int()>& command, const std::vector<std::string>& overrides) {
  try {
    return command();
  } catch (const config::ConfigError& e) {
    const std::size_t n = e.diagnostics().size();
    print_error_report(config::annotate_overrides(e.diagnostics(), overrides).format_all() +
                       std::to_string(n) + (n == 1 ? " error" : " errors") + "\n");
    return kUsageError;
  } catch (const UsageError& e) {
    print_error_report("error: " + std::string(e.what()) + "\n");
    return kUsageError;
  } catch (const std::bad_alloc&) {
    print_error_report(kOutOfHostMemoryReport);
    return 1;
  } catch (const std::filesystem::filesystem_error& e) {
    print_error_report(filesystem_error_report(e));
    return 1;
  } catch (const std::system_error& e) {
    std::string report = "error: " + std::string(e.what()) + "\n";
    if (e.code() == std::errc::resource_unavailable_try_again)  // a thread, most often
      report +=
          "    the system refused this process another thread: check `ulimit -u` and a "
          "container's pids limit; fewer data.workers or backend.threads need fewer\n";
    print_error_report(report);
    return 1;
  } catch (const std::exception& e) {
    print_error_report("error: " + std::string(e.what()) + "\n");
    return 1;
  }
}

}  // namespace trainer
