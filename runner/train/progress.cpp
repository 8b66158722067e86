// Terminal progress bar, and the time left of a run.
#include "runner/train/progress.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
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

std::string short_duration(double seconds) {
  const auto s = static_cast<long long>(std::llround(std::max(0.0, seconds)));
  char text[32];
  if (s < 60)
    std::snprintf(text, sizeof text, "%llds", s);
  else if (s < 3600)
    std::snprintf(text, sizeof text, "%lldm%02llds", s / 60, s % 60);
  else if (s < 86400)
    std::snprintf(text, sizeof text, "%lldh%02lldm", s / 3600, s / 60 % 60);
  else
    std::snprintf(text, sizeof text, "%lldd%02lldh", s / 86400, s / 3600 % 24);
  return text;
}

double time_left(double elapsed, std::int64_t done, std::int64_t left) {
  if (done <= 0) return -1;
  return elapsed / static_cast<double>(done) * static_cast<double>(std::max<std::int64_t>(0, left));
}

ProgressBar::ProgressBar(bool enabled, bool rank_of_job)
    : enabled_(enabled && stdout_is_terminal(rank_of_job)) {}

bool ProgressBar::due() const {
  return enabled_ &&
         (!drawn_ || std::chrono::steady_clock::now() - last_ >= std::chrono::milliseconds(200));
}

void ProgressBar::update(std::int64_t epoch, std::int64_t step, std::int64_t total, double loss,
                         double seconds_left) {
  if (total <= 0 || !due()) return;
  last_ = std::chrono::steady_clock::now();
  constexpr int kWidth = 30;
  const int filled = static_cast<int>(kWidth * step / total);
  std::string bar(static_cast<std::size_t>(filled), '=');
  if (filled < kWidth) bar += '>' + std::string(static_cast<std::size_t>(kWidth - filled - 1), ' ');
  std::printf("\r\033[Kepoch %lld [%s] %lld/%lld loss %.4f%s", static_cast<long long>(epoch),
              bar.c_str(), static_cast<long long>(step), static_cast<long long>(total), loss,
              seconds_left < 0 ? "" : (" eta " + short_duration(seconds_left)).c_str());
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
