// What this binary was built from, for `trainer version` and each run's
// manifest.json.
#pragma once

namespace trainer {

// The commit of the source tree the binary was built from ("-dirty" when it
// had changes), or "unknown" (built outside a git checkout).
const char* trainer_commit();

}  // namespace trainer
