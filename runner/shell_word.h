// A word as a POSIX shell reads it back, for commands the program prints
// for the user to paste (a trial's command line, a file's restore).
#pragma once

#include <string>

namespace trainer {

// `word` as it is when it holds only characters the shell leaves alone,
// else in single quotes (each ' in it as '\'').
std::string shell_word(const std::string& word);

}  // namespace trainer
