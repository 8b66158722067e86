// manifest.json of a run directory: read (with what is wrong with a damaged
// one) and written whole, atomically. What it records is written by
// run_dir.cpp (the run's start and resumes) and run_records.cpp (the
// compiled program, and what later commands read back).
#pragma once

#include <filesystem>
#include <string>

#include <nlohmann/json.hpp>

namespace trainer::train {

// manifest.json of `dir` as an object, or why it cannot be one (`problem`).
// Missing: an empty object and no problem.
nlohmann::json parse_manifest(const std::filesystem::path& dir, std::string& problem);

// manifest.json of `dir`, or {} when it is missing or damaged: for what adds
// to it after the resume checked it (check_manifest), and for readers that
// fall back on their own.
nlohmann::json read_manifest(const std::filesystem::path& dir);

// Replaces manifest.json of `dir` with `manifest`, atomically.
void write_manifest(const std::filesystem::path& dir, const nlohmann::json& manifest);

}  // namespace trainer::train
