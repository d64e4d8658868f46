#pragma once
// How many host threads tessera's numerics may use (the NeuronCore's tensor-engine products, the
// reference executor's GEMM and convolution): the environment variable TESSERA_HOST_THREADS when
// it is a number >= 1, else std::thread::hardware_concurrency(). `tessera compare` and `sweep`
// running N jobs at once give each child hardware_concurrency / N. Results never depend on it.
namespace tessera {
unsigned host_threads();
}  // namespace tessera
