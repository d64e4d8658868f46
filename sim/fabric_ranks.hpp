#pragma once
// The MPI ranks of a partitioned wafer fabric (wafer::FabricOptions::comm; docs/wafer-model.md,
// "Ranks"): under mpirun with more than one rank, `tessera run` of a wafer scenario simulates one
// stripe of PE rows per rank; every rank runs the same driver, rank 0 writes the outputs.
#include <memory>

#include "models/wafer/fabric.hpp"

namespace tessera::sim {

// The communicator over every rank (a duplicate of MPI_COMM_WORLD), or null without MPI or with
// one rank (sim/jobs.hpp distributed()).
std::shared_ptr<wafer::RankComm> fabric_comm();

}  // namespace tessera::sim
