// Conversion throughput of the numeric formats (isa/numeric.hpp): fp32 -> format (narrow_array)
// and format -> fp32 (widen_array) over 1M-element arrays. Items are elements converted.
//
//   build/<dir>/tests/bench/bench_numeric --benchmark_min_time=0.2
#include <benchmark/benchmark.h>

#include <cstdint>
#include <random>
#include <vector>

#include "isa/numeric.hpp"

namespace {

using tessera::FloatFormat;

constexpr size_t kN = size_t{1} << 20;

// Activation-like inputs: normal(0, 1) with a few larger values, a fixed seed.
const std::vector<float>& inputs() {
  static const std::vector<float> v = [] {
    std::mt19937 rng(12345);
    std::normal_distribution<float> nd(0.0f, 1.0f);
    std::vector<float> r(kN);
    for (size_t i = 0; i < kN; ++i) r[i] = nd(rng) * ((i % 64 == 0) ? 100.0f : 1.0f);
    return r;
  }();
  return v;
}

size_t storage_bytes(FloatFormat f) { return static_cast<size_t>(tessera::format_info(f).bits / 8); }

void BM_Narrow(benchmark::State& state, FloatFormat f) {
  const auto& src = inputs();
  std::vector<unsigned char> dst(kN * storage_bytes(f));
  for (auto _ : state) {
    tessera::narrow_array(src.data(), dst.data(), kN, f);
    benchmark::DoNotOptimize(dst.data());
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations()) * static_cast<int64_t>(kN));
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * static_cast<int64_t>(kN * (4 + storage_bytes(f))));
}

void BM_Widen(benchmark::State& state, FloatFormat f) {
  const auto& vals = inputs();
  std::vector<unsigned char> src(kN * storage_bytes(f));
  tessera::narrow_array(vals.data(), src.data(), kN, f);
  std::vector<float> dst(kN);
  for (auto _ : state) {
    tessera::widen_array(src.data(), dst.data(), kN, f);
    benchmark::DoNotOptimize(dst.data());
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations()) * static_cast<int64_t>(kN));
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * static_cast<int64_t>(kN * (4 + storage_bytes(f))));
}

}  // namespace

BENCHMARK_CAPTURE(BM_Narrow, fp32, FloatFormat::fp32)->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_Narrow, fp16, FloatFormat::fp16)->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_Narrow, bf16, FloatFormat::bf16)->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_Narrow, cbf16, FloatFormat::cbf16)->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_Narrow, fp8_e4m3, FloatFormat::fp8_e4m3)->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_Narrow, fp8_e5m2, FloatFormat::fp8_e5m2)->Unit(benchmark::kMicrosecond);

BENCHMARK_CAPTURE(BM_Widen, fp32, FloatFormat::fp32)->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_Widen, fp16, FloatFormat::fp16)->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_Widen, bf16, FloatFormat::bf16)->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_Widen, cbf16, FloatFormat::cbf16)->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_Widen, fp8_e4m3, FloatFormat::fp8_e4m3)->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_Widen, fp8_e5m2, FloatFormat::fp8_e5m2)->Unit(benchmark::kMicrosecond);

BENCHMARK_MAIN();
