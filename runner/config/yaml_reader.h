// Reads YAML text into a config::Node tree in which every value and key keeps
// its file, line and column. Syntax errors and duplicate keys become
// Diagnostics (never exceptions), so a caller can report them with the rest.
#pragma once

#include <string>

#include "runner/config/diagnostics.h"
#include "runner/config/node.h"

namespace trainer::config {

// Parses one YAML document. `file` names the source in marks. `line_offset` and
// `column_offset` shift every mark (used to point into a command-line override).
// Returns a null Node (and adds a diagnostic) when the text is not valid YAML;
// `ok` (if given) is set to false in that case.
Node parse_yaml(const std::string& text, const std::string& file, Diagnostics& diags,
                bool* ok = nullptr, int line_offset = 0, int column_offset = 0);

// Reads and parses a file. A missing or unreadable file is reported at `where`.
Node read_yaml_file(const std::string& path, const Mark& where, Diagnostics& diags,
                    bool* ok = nullptr);

}  // namespace trainer::config
