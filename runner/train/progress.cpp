// Terminal progress bar.
#include "runner/train/progress.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>

namespace trainer::train {

bool stdout_is_terminal(bool rank_of_job) {
  if (rank_of_job) {
    const char* launcher_says = std::getenv(kStdoutTerminalVariable);
    return launcher_says != nullptr && std::string(launcher_says) == "1";
  }
  return isatty(STDOUT_FILENO) == 1;
}

ProgressBar::ProgressBar(bool enabled, bool rank_of_job)
    : enabled_(enabled && stdout_is_terminal(rank_of_job)) {}

bool ProgressBar::due() const {
  return enabled_ &&
         (!drawn_ || std::chrono::steady_clock::now() - last_ >= std::chrono::milliseconds(200));
}

void ProgressBar::update(std::int64_t epoch, std::int64_t step, std::int64_t total, double loss) {
  if (total <= 0 || !due()) return;
  last_ = std::chrono::steady_clock::now();
  constexpr int kWidth = 30;
  const int filled = static_cast<int>(kWidth * step / total);
  std::string bar(static_cast<std::size_t>(filled), '=');
  if (filled < kWidth) bar += '>' + std::string(static_cast<std::size_t>(kWidth - filled - 1), ' ');
  std::printf("\r\033[Kepoch %lld [%s] %lld/%lld loss %.4f", static_cast<long long>(epoch),
              bar.c_str(), static_cast<long long>(step), static_cast<long long>(total), loss);
  std::fflush(stdout);
  drawn_ = true;
}

void ProgressBar::clear() {
  if (!enabled_ || !drawn_) return;
  std::printf("\r\033[K");
  std::fflush(stdout);
  drawn_ = false;
}

}  // namespace trainer::train
