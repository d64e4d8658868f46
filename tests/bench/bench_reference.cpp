// The reference executor's accumulating kernels (mapper/reference/ops_linalg.cpp): MatMul and Conv
// through run_op, fp32 tensors with fp64 sums. Items are multiply-adds (FLOPs / 2) per second of
// wall time (the kernels use the host's threads).
//
//   build/<dir>/tests/bench/bench_reference --benchmark_min_time=1
#include <benchmark/benchmark.h>

#include <cstdint>
#include <random>
#include <vector>

#include "isa/tensor.hpp"
#include "mapper/graph/attributes.hpp"
#include "mapper/reference/kernels.hpp"

namespace {

using tessera::Tensor;

Tensor random_tensor(const tessera::Shape& shape, uint32_t seed) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& e : v) e = nd(rng);
  return Tensor::from_f32(shape, std::move(v));
}

// MatMul [M, K] x [K, N].
void BM_MatMul(benchmark::State& state) {
  const int64_t M = state.range(0), K = state.range(1), N = state.range(2);
  const Tensor a = random_tensor({M, K}, 1), b = random_tensor({K, N}, 2);
  tessera::graph::Attributes attrs;
  tessera::reference::OpCall call{"MatMul", "matmul", 17, &attrs, {&a, &b}, 1};
  for (auto _ : state) benchmark::DoNotOptimize(tessera::reference::run_op(call));
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations()) * M * K * N);
}
BENCHMARK(BM_MatMul)->Args({256, 512, 512})->Args({512, 1024, 1024})->Args({1024, 2048, 2048})->Unit(benchmark::kMillisecond)->UseRealTime();

// Conv NCHW [1, C, H, W] with [F, C, 3, 3], pads 1.
void BM_Conv3x3(benchmark::State& state) {
  const int64_t C = state.range(0), H = state.range(1), F = state.range(2);
  const Tensor x = random_tensor({1, C, H, H}, 3), w = random_tensor({F, C, 3, 3}, 4);
  tessera::graph::Attributes attrs;
  attrs.set("pads", std::vector<int64_t>{1, 1, 1, 1});
  tessera::reference::OpCall call{"Conv", "conv", 17, &attrs, {&x, &w}, 1};
  for (auto _ : state) benchmark::DoNotOptimize(tessera::reference::run_op(call));
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations()) * F * C * 9 * H * H);
}
BENCHMARK(BM_Conv3x3)->Args({64, 56, 64})->Args({128, 28, 128})->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
