// NeuronCore tensor-engine numerics on the host (models/neuroncore/execute.hpp):
//   BM_host_sgemm         Eigen sgemm, [128x128]^T @ [128x512] fp32 (row-major maps): the ceiling.
//   BM_nc_matmul_stream   load_stationary + multiply_moving through execute() on bf16 SBUF tiles,
//                         accumulating 4 K tiles into one PSUM bank (start on the first, stop on
//                         the last). Target: >= 50% of BM_host_sgemm's GFLOP/s.
//   BM_nc_matmul_stream_fp32  the same with fp32 SBUF tiles.
//   BM_sbuf_read_bf16 / BM_sbuf_write_bf16  one 128x512 bf16 tile through CoreMemory.
//
//   build/<dir>/tests/bench/bench_nc_matmul --benchmark_min_time=0.5
#include <benchmark/benchmark.h>

#include <Eigen/Core>
#include <random>
#include <vector>

#include "isa/params.hpp"
#include "models/neuroncore/execute.hpp"
#include "models/neuroncore/memory.hpp"

namespace {

using namespace tessera;
using namespace tessera::neuroncore;

constexpr int K = 128, M = 128, N = 512, kTiles = 4;
constexpr double kFlopsPerTile = 2.0 * K * M * N;

const CoreConfig& trn1() {
  static const CoreConfig c = [] {
    DiagnosticList d;
    auto* t = target_of_preset("trn1");
    auto ps = ParamSet::resolve(*t, *t->find_preset("trn1"), {}, d);
    return CoreConfig::from(ps);
  }();
  return c;
}

std::vector<float> randn(size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> v(n);
  for (auto& x : v) x = nd(rng);
  return v;
}

AccessPattern tile(Space sp, DType dt, int parts, int64_t offset, int n) {
  AccessPattern a;
  a.space = sp;
  a.dtype = dt;
  a.part_start = 0;
  a.parts = parts;
  a.offset = offset;
  a.ndims = 1;
  a.dims[0] = {n, 1};
  return a;
}

using RowMajorF = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

void BM_host_sgemm(benchmark::State& state) {
  const auto s = randn(K * M, 1), b = randn(K * N, 2);
  std::vector<float> c(M * N);
  Eigen::Map<const RowMajorF> S(s.data(), K, M), B(b.data(), K, N);
  Eigen::Map<RowMajorF> C(c.data(), M, N);
  for (auto _ : state) {
    C.noalias() = S.transpose() * B;
    benchmark::DoNotOptimize(c.data());
    benchmark::ClobberMemory();
  }
  state.counters["GFLOPs"] = benchmark::Counter(kFlopsPerTile * static_cast<double>(state.iterations()) * 1e-9,
                                                benchmark::Counter::kIsRate);
}
BENCHMARK(BM_host_sgemm)->Unit(benchmark::kMicrosecond);

void matmul_stream(benchmark::State& state, DType dt) {
  CoreMemory mem(trn1());
  const RegFile regs{};
  TensorEngineState te;
  const int64_t es = static_cast<int64_t>(dtype_size(dt));
  // SBUF layout per partition: kTiles stationary tiles [K, M], then kTiles moving tiles [K, N].
  std::vector<Instr> prog;
  for (int t = 0; t < kTiles; ++t) {
    const auto st = tile(Space::sbuf, dt, K, t * M * es, M);
    const auto mv = tile(Space::sbuf, dt, K, kTiles * M * es + t * N * es, N);
    const auto sv = randn(K * M, 10 + static_cast<unsigned>(t)), mvv = randn(K * N, 20 + static_cast<unsigned>(t));
    mem.write(st, regs, sv.data());
    mem.write(mv, regs, mvv.data());
    Instr ls;
    ls.op = Op::load_stationary;
    ls.src0 = st;
    Instr mm;
    mm.op = Op::multiply_moving;
    mm.dst = tile(Space::psum, DType::f32, M, 0, N);
    mm.src0 = mv;
    mm.start = t == 0;
    mm.stop = t == kTiles - 1;
    prog.push_back(ls);
    prog.push_back(mm);
  }
  for (auto _ : state) {
    for (const auto& in : prog) execute(in, mem, regs, te);
    benchmark::ClobberMemory();
  }
  state.counters["GFLOPs"] = benchmark::Counter(kFlopsPerTile * kTiles * static_cast<double>(state.iterations()) * 1e-9,
                                                benchmark::Counter::kIsRate);
}
void BM_nc_matmul_stream(benchmark::State& state) { matmul_stream(state, DType::bf16); }
void BM_nc_matmul_stream_fp32(benchmark::State& state) { matmul_stream(state, DType::f32); }
BENCHMARK(BM_nc_matmul_stream)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_nc_matmul_stream_fp32)->Unit(benchmark::kMicrosecond);

void BM_sbuf_read_bf16(benchmark::State& state) {
  CoreMemory mem(trn1());
  const RegFile regs{};
  const auto a = tile(Space::sbuf, DType::bf16, 128, 0, 512);
  const auto v = randn(128 * 512, 3);
  mem.write(a, regs, v.data());
  std::vector<float> out;
  for (auto _ : state) {
    mem.read(a, regs, out);
    benchmark::DoNotOptimize(out.data());
  }
  state.SetItemsProcessed(state.iterations() * 128 * 512);
}
BENCHMARK(BM_sbuf_read_bf16)->Unit(benchmark::kMicrosecond);

void BM_sbuf_write_bf16(benchmark::State& state) {
  CoreMemory mem(trn1());
  const RegFile regs{};
  const auto a = tile(Space::sbuf, DType::bf16, 128, 0, 512);
  const auto v = randn(128 * 512, 4);
  for (auto _ : state) {
    mem.write(a, regs, v.data());
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(state.iterations() * 128 * 512);
}
BENCHMARK(BM_sbuf_write_bf16)->Unit(benchmark::kMicrosecond);

}  // namespace

BENCHMARK_MAIN();
