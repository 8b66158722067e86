// The table of data sources and transforms.
#include "data/registry.h"

namespace trainer::data {

const std::vector<SourceDef>& source_defs() {
  static const std::vector<SourceDef> defs;
  return defs;
}

const std::vector<TransformDef>& transform_defs() {
  static const std::vector<TransformDef> defs;
  return defs;
}

}  // namespace trainer::data
