#pragma once
// Clock domains (isa/clock.hpp) as the models name them, and SystemC's time resolution.
#include "isa/clock.hpp"

namespace tessera::models {

using tessera::ClockDomain;
using tessera::Femtos;
using tessera::Int128;
using tessera::kFsPerSecond;

// Sets SystemC's time resolution to 1 fs (idempotent; must run before any sc_time is made).
void set_fs_resolution();

}  // namespace tessera::models
