#pragma once
// A private directory for the fuzz targets: loaders that resolve relative paths (a scenario's
// files, a layout's PE programs) resolve them here, so the fuzzer only ever finds a few small
// valid files, a FIFO and a symlink to /dev/zero (non-regular files every loader must refuse
// instead of blocking on them or reading them forever). Created once per process, removed at exit.
#include <string>
#include <vector>

namespace tessera::fuzz {

const std::string& sandbox_dir();
// The PE programs copied into the sandbox (file names, relative to it).
const std::vector<std::string>& sandbox_pe_programs();

}  // namespace tessera::fuzz
