// The registry of machine kinds: an explicit list (static initialisers would be dropped from a
// static library).
#include "isa/neuroncore/params.hpp"
#include "isa/params.hpp"
#include "isa/wafer/params.hpp"

namespace tessera {

const std::vector<const TargetDesc*>& all_targets() {
  static const std::vector<const TargetDesc*> targets = {&neuroncore::target_desc(), &wafer::target_desc()};
  return targets;
}

}  // namespace tessera
