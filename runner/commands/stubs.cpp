// Temporary stand-ins for subcommands whose real implementation is being
// written in other files; each is deleted when its real version lands.
#include <cstdio>

#include "runner/commands.h"

namespace trainer {
namespace {

int not_implemented(const char* name) {
  std::fprintf(stderr, "error: 'trainer %s' is not implemented yet\n", name);
  return 1;
}

}  // namespace

int command_sweep(const CommandArgs&) { return not_implemented("sweep"); }

}  // namespace trainer
