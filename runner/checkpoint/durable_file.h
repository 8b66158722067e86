// Crash-safe file writes: write to a temporary name, fsync, rename over the
// final name, fsync the directory. A reader sees the old file or the new one,
// never a torn one.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace trainer::checkpoint {

// Writes `bytes` to `path` and fsyncs the file (no rename).
void write_file_synced(const std::string& path, std::string_view bytes);
// The same with the file's bytes given as pieces, written in turn.
void write_file_synced(const std::string& path, const std::vector<std::string_view>& pieces);

// Flushes a directory's entries (after a create, rename or delete inside it).
void fsync_directory(const std::string& path);

// `path` replaced atomically by `bytes`.
void write_file_atomically(const std::string& path, std::string_view bytes);

// `link` made (or replaced, atomically) a symbolic link to `target`.
void replace_symlink(const std::string& link, const std::string& target);

}  // namespace trainer::checkpoint
