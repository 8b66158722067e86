// RunDirLock: one trainer process at a time in a run (or sweep) directory.
// It holds an exclusive lock on <dir>/.lock for its lifetime; the system
// releases it when the process ends, however it ends, so a crash never leaves
// a directory locked. The file holds the holder's pid for the next one's message.
#pragma once

#include <string>

namespace trainer::train {

class RunDirLock {
 public:
  RunDirLock() = default;
  // Throws UsageError naming the directory and the holder's pid when another
  // process holds it (`what`: "run directory", "sweep directory").
  RunDirLock(const std::string& dir, const std::string& what);
  ~RunDirLock();
  RunDirLock(RunDirLock&& other) noexcept;
  RunDirLock& operator=(RunDirLock&& other) noexcept;
  RunDirLock(const RunDirLock&) = delete;
  RunDirLock& operator=(const RunDirLock&) = delete;

  // Whether the lock is held (false on a file system without locks, where a
  // warning said so and the run goes on).
  bool held() const { return locked_; }

 private:
  int fd_ = -1;
  bool locked_ = false;
};

// The error RunDirLock(dir, what) would throw because another process holds
// the directory's lock, or "" (no lock file, or nobody holds it); takes and
// creates nothing that stays.
std::string held_by_another(const std::string& dir, const std::string& what);

// The name of the lock file inside a locked directory.
inline constexpr const char* kLockFileName = ".lock";

}  // namespace trainer::train
