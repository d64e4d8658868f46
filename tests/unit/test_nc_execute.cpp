// The NeuronCore's memories (models/neuroncore/memory.hpp) and the numerics of every instruction
// (models/neuroncore/execute.hpp), each checked against a direct fp64 (or exact) computation.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <limits>
#include <numbers>
#include <random>
#include <stdexcept>
#include <vector>

#include "isa/numeric.hpp"
#include "isa/params.hpp"
#include "models/neuroncore/execute.hpp"
#include "models/neuroncore/memory.hpp"

namespace {

using namespace tessera;
using namespace tessera::neuroncore;

const CoreConfig& trn1() {
  static const CoreConfig c = [] {
    DiagnosticList d;
    auto* t = target_of_preset("trn1");
    auto ps = ParamSet::resolve(*t, *t->find_preset("trn1"), {}, d);
    return CoreConfig::from(ps);
  }();
  return c;
}

AccessPattern ap(Space sp, DType dt, int32_t part_start, int32_t parts, int64_t offset, std::vector<Dim> dims,
                 int64_t part_stride = 0) {
  AccessPattern a;
  a.space = sp;
  a.dtype = dt;
  a.part_start = part_start;
  a.parts = parts;
  a.offset = offset;
  a.part_stride = part_stride;
  a.ndims = static_cast<uint8_t>(dims.size());
  for (size_t i = 0; i < dims.size(); ++i) a.dims[i] = dims[i];
  return a;
}
// Dense row of n elements.
AccessPattern sb(DType dt, int32_t ps, int32_t parts, int64_t off, int32_t n) {
  return ap(Space::sbuf, dt, ps, parts, off, {{n, 1}});
}
AccessPattern ps(DType dt, int32_t p0, int32_t parts, int64_t off, int32_t n) {
  return ap(Space::psum, dt, p0, parts, off, {{n, 1}});
}
AccessPattern hbm(DType dt, int32_t rows, int64_t row_stride, int64_t addr, int32_t n) {
  return ap(Space::hbm, dt, 0, rows, addr, {{n, 1}}, row_stride);
}

Instr mk(Op op) {
  Instr in;
  in.op = op;
  in.dst.parts = in.src0.parts = in.src1.parts = in.aux.parts = 0;
  return in;
}

std::vector<float> randn(size_t n, unsigned seed, FloatFormat f = FloatFormat::fp32, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = round_to(nd(rng), f);
  return v;
}

std::vector<float> get(const CoreMemory& m, const AccessPattern& a, const RegFile& r = RegFile{}) {
  std::vector<float> v;
  m.read(a, r, v);
  return v;
}

const RegFile kRegs0{};

}  // namespace

// ------------------------------------------------------------------------------------------------
// Memory

TEST_CASE("nc-exec: memory sizes follow the trn1 config") {
  CoreMemory m(trn1());
  CHECK(m.partitions() == 128);
  CHECK(m.sbuf_partition_bytes() == 192 * 1024);
  CHECK(m.psum_partition_bytes() == 16 * 1024);
  CHECK(m.hbm_pages_allocated() == 0);
}

TEST_CASE("nc-exec: memory fp32 round trip and bf16 rounding on write") {
  CoreMemory m(trn1());
  auto v = randn(4 * 10, 1);
  v[0] = 1.0f + 0x1p-8f;         // tie: rounds to even (1.0) in bf16
  v[1] = 1.0f + 3 * 0x1p-8f;     // tie: rounds up to 1 + 2^-6
  v[2] = 3.4e38f;                // overflows bf16's range after rounding -> inf
  const auto a32 = sb(DType::f32, 0, 4, 0, 10);
  m.write(a32, kRegs0, v.data());
  CHECK(get(m, a32) == v);
  const auto a16 = sb(DType::bf16, 4, 4, 64, 10);
  m.write(a16, kRegs0, v.data());
  const auto r = get(m, a16);
  for (size_t i = 0; i < v.size(); ++i) CHECK(float_bits(r[i]) == float_bits(round_to(v[i], FloatFormat::bf16)));
  CHECK(r[0] == 1.0f);
  CHECK(r[1] == 1.0f + 0x1p-6f);
  CHECK(std::isinf(r[2]));
  // The bytes are bf16 in partition 5 at offset 64.
  uint16_t h;
  std::memcpy(&h, m.sbuf_ptr(5, 64), 2);
  CHECK(h == fp32_to_bf16(v[10]));
  // fp16 and fp8 likewise.
  for (auto [dt, f] : {std::pair{DType::f16, FloatFormat::fp16}, std::pair{DType::f8e4m3, FloatFormat::fp8_e4m3},
                       std::pair{DType::f8e5m2, FloatFormat::fp8_e5m2}}) {
    const auto a = sb(dt, 8, 4, 0, 10);
    auto w = v;
    w[2] = 0.3f;  // keep finite for fp8 e4m3 (no inf)
    m.write(a, kRegs0, w.data());
    const auto rr = get(m, a);
    for (size_t i = 0; i < w.size(); ++i) CHECK(float_bits(rr[i]) == float_bits(round_to(w[i], f)));
  }
}

TEST_CASE("nc-exec: memory integer dtypes round to nearest even and saturate") {
  CoreMemory m(trn1());
  const std::vector<float> in{2.5f, 3.5f, -2.5f, 200.0f, -200.0f, std::nanf(""), 0.49f, -1.5f};
  const auto i8 = sb(DType::i8, 0, 1, 0, 8);
  m.write(i8, kRegs0, in.data());
  CHECK(get(m, i8) == std::vector<float>{2, 4, -2, 127, -128, 0, 0, -2});
  const auto u8 = sb(DType::u8, 1, 1, 0, 8);
  const std::vector<float> uin{254.5f, 255.5f, -1.0f, 1e9f, 0.5f, 1.5f, 7.0f, std::nanf("")};
  m.write(u8, kRegs0, uin.data());
  CHECK(get(m, u8) == std::vector<float>{254, 255, 0, 255, 0, 2, 7, 0});
  const auto i32 = sb(DType::i32, 2, 1, 0, 6);
  const std::vector<float> iin{1e10f, -1e10f, -0.5f, 1.5f, 16777216.0f, -123456.0f};
  m.write(i32, kRegs0, iin.data());
  int32_t raw[6];
  std::memcpy(raw, m.sbuf_ptr(2, 0), sizeof raw);
  CHECK(raw[0] == std::numeric_limits<int32_t>::max());
  CHECK(raw[1] == std::numeric_limits<int32_t>::min());
  CHECK(raw[2] == 0);
  CHECK(raw[3] == 2);
  CHECK(raw[4] == 16777216);
  CHECK(raw[5] == -123456);
}

TEST_CASE("nc-exec: memory strided and multi-dim access patterns") {
  CoreMemory m(trn1());
  // Two partitions; each row: 3 groups 10 elements apart, 4 elements 2 apart in each group.
  const auto a = ap(Space::sbuf, DType::f32, 10, 2, 16, {{3, 10}, {4, 2}});
  REQUIRE(a.free_elems() == 12);
  std::vector<float> v(24);
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(i + 1);
  m.write(a, kRegs0, v.data());
  for (int p = 0; p < 2; ++p) {
    float row[32];
    std::memcpy(row, m.sbuf_ptr(10 + p, 16), sizeof row);
    for (int g = 0; g < 3; ++g)
      for (int j = 0; j < 4; ++j) {
        CHECK(row[g * 10 + j * 2] == v[static_cast<size_t>(p * 12 + g * 4 + j)]);
        CHECK(row[g * 10 + j * 2 + 1] == 0.0f);  // untouched gaps
      }
  }
  CHECK(get(m, a) == v);
  // A dense pattern written as several dims reads the same as the flat one.
  const auto flat = ap(Space::sbuf, DType::f32, 20, 3, 0, {{24, 1}});
  const auto dims3 = ap(Space::sbuf, DType::f32, 20, 3, 0, {{2, 12}, {3, 4}, {4, 1}});
  std::vector<float> w(72);
  for (size_t i = 0; i < w.size(); ++i) w[i] = static_cast<float>(i) * 0.5f;
  m.write(dims3, kRegs0, w.data());
  CHECK(get(m, flat) == w);
  // A transposing pattern: read [4 x 3] stored row-major as its transpose via strides.
  const auto t = ap(Space::sbuf, DType::bf16, 30, 1, 0, {{3, 1}, {4, 3}});
  const std::vector<float> src{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11};
  m.write(sb(DType::bf16, 30, 1, 0, 12), kRegs0, src.data());
  CHECK(get(m, t) == std::vector<float>{0, 3, 6, 9, 1, 4, 7, 10, 2, 5, 8, 11});
}

TEST_CASE("nc-exec: memory HBM is lazily zero and pages on write") {
  CoreMemory m(trn1());
  const auto far = hbm(DType::bf16, 4, 1 << 20, int64_t{3} << 30, 64);
  CHECK(get(m, far) == std::vector<float>(256, 0.0f));
  CHECK(m.hbm_pages_allocated() == 0);
  // A write across a page boundary, rows 100 elements apart.
  const int64_t addr = CoreMemory::kPage - 8;
  const auto a = hbm(DType::f32, 3, 100, addr, 5);
  const auto v = randn(15, 2);
  m.write(a, kRegs0, v.data());
  CHECK(m.hbm_pages_allocated() == 2);
  CHECK(get(m, a) == v);
  float back[5];
  m.hbm_read(addr + 100 * 4, back, sizeof back);
  for (int i = 0; i < 5; ++i) CHECK(back[i] == v[static_cast<size_t>(5 + i)]);
  // Strided HBM reads, partly over never-written bytes.
  const auto s = ap(Space::hbm, DType::f32, 0, 1, addr, {{4, 2}});
  const auto r = get(m, s);
  CHECK(r[0] == v[0]);
  CHECK(r[1] == v[2]);
  CHECK(r[2] == v[4]);
  CHECK(r[3] == 0.0f);
}

TEST_CASE("nc-exec: memory strided HBM runs within and across pages") {
  CoreMemory m(trn1());
  // [8 x 6] fp32 matrix stored row-major at `base`; a transposing pattern reads its columns.
  for (int64_t base : {int64_t{4096}, CoreMemory::kPage - 100}) {  // inside one page, then across two
    INFO("base " << base);
    std::vector<float> mat(48);
    for (size_t i = 0; i < mat.size(); ++i) mat[i] = static_cast<float>(i) + 0.5f;
    m.hbm_write(base, mat.data(), mat.size() * 4);
    const auto cols = ap(Space::hbm, DType::f32, 0, 6, base, {{8, 6}}, 1);  // row p = column p
    const auto r = get(m, cols);
    for (int c = 0; c < 6; ++c)
      for (int k = 0; k < 8; ++k) CHECK(r[static_cast<size_t>(c * 8 + k)] == mat[static_cast<size_t>(k * 6 + c)]);
    // Raw strided copy HBM -> SBUF and a strided write back into HBM.
    const auto dst = sb(DType::f32, 0, 6, 0, 8);
    m.copy(dst, cols, kRegs0);
    CHECK(get(m, dst) == r);
    const auto back = ap(Space::hbm, DType::f32, 0, 6, base + 1024, {{8, 6}}, 1);
    m.write(back, kRegs0, r.data());
    std::vector<float> raw(48);
    m.hbm_read(base + 1024, raw.data(), raw.size() * 4);
    CHECK(raw == mat);
  }
  // Strided reads of a never-written page are zeros and allocate nothing.
  const int64_t pages = m.hbm_pages_allocated();
  CHECK(get(m, ap(Space::hbm, DType::bf16, 0, 2, int64_t{5} << 30, {{4, 3}}, 1)) == std::vector<float>(8, 0.0f));
  CHECK(m.hbm_pages_allocated() == pages);
}

TEST_CASE("nc-exec: memory dynamic offsets via registers") {
  CoreMemory m(trn1());
  RegFile regs{};
  regs[2] = 3;
  auto a = sb(DType::f32, 0, 2, 64, 4);
  a.offset_reg = 2;
  a.reg_scale = 256;
  CHECK(CoreMemory::base_offset(a, regs) == 64 + 768);
  const std::vector<float> v{1, 2, 3, 4, 5, 6, 7, 8};
  m.write(a, regs, v.data());
  float x;
  std::memcpy(&x, m.sbuf_ptr(1, 832 + 8), 4);
  CHECK(x == 7.0f);
  CHECK(get(m, sb(DType::f32, 0, 2, 832, 4)) == v);
  CHECK(get(m, a, regs) == v);
  // Past the partition's end only because of the register.
  regs[2] = 1000;
  CHECK_THROWS_AS(m.write(a, regs, v.data()), std::runtime_error);
}

TEST_CASE("nc-exec: memory bounds are checked") {
  CoreMemory m(trn1());
  std::vector<float> v(1024);
  CHECK_THROWS_WITH(m.read(sb(DType::f32, 0, 1, 192 * 1024 - 8, 4), kRegs0, v),
                    Catch::Contains("out of range") && Catch::Contains("bytes"));
  CHECK_THROWS_WITH(m.read(sb(DType::f32, 100, 32, 0, 4), kRegs0, v), Catch::Contains("partitions"));
  CHECK_THROWS_AS(m.read(ps(DType::f32, 0, 1, 16 * 1024, 1), kRegs0, v), std::runtime_error);
  CHECK_THROWS_AS(m.read(hbm(DType::f32, 2, 4, static_cast<int64_t>(trn1().hbm_capacity) - 16, 4), kRegs0, v),
                  std::runtime_error);
  CHECK_NOTHROW(m.read(sb(DType::f32, 0, 128, 192 * 1024 - 16, 4), kRegs0, v));
}

TEST_CASE("nc-exec: memory raw copy keeps bytes and checks dtype and count") {
  CoreMemory m(trn1());
  std::vector<uint16_t> bits(64);
  for (size_t i = 0; i < bits.size(); ++i) bits[i] = static_cast<uint16_t>(0x3f80 + i * 7);
  m.hbm_write(4096, bits.data(), bits.size() * 2);
  const auto src = hbm(DType::bf16, 4, 16, 4096, 16);
  const auto dst = ap(Space::sbuf, DType::bf16, 32, 2, 0, {{2, 16}, {16, 1}});  // 2 rows x 32: same count
  m.copy(dst, src, kRegs0);
  for (int p = 0; p < 2; ++p) CHECK(std::memcmp(m.sbuf_ptr(32 + p, 0), bits.data() + p * 32, 64) == 0);
  CHECK_THROWS_AS(m.copy(sb(DType::f32, 0, 4, 0, 16), src, kRegs0), std::runtime_error);
  CHECK_THROWS_AS(m.copy(sb(DType::bf16, 0, 4, 0, 15), src, kRegs0), std::runtime_error);
}

TEST_CASE("nc-exec: memory reads a 128x512 bf16 tile through the bulk path") {
  CoreMemory m(trn1());
  const auto a = sb(DType::bf16, 0, 128, 1024, 512);
  const auto v = randn(128 * 512, 3, FloatFormat::bf16);
  m.write(a, kRegs0, v.data());
  CHECK(get(m, a) == v);
}

// ------------------------------------------------------------------------------------------------
// Tensor engine

namespace {

// Loads stat [K, M] and mov [K, N] (bf16) into SBUF and runs one matmul into PSUM at `psum_off`.
void run_matmul(CoreMemory& m, TensorEngineState& te, const std::vector<float>& stat, const std::vector<float>& mov,
                int K, int M, int N, bool start, int64_t psum_off = 0, DType dt = DType::bf16) {
  const auto sa = sb(dt, 0, K, 0, M);
  const auto ma = sb(dt, 0, K, 4096, N);
  m.write(sa, kRegs0, stat.data());
  m.write(ma, kRegs0, mov.data());
  Instr ls = mk(Op::load_stationary);
  ls.src0 = sa;
  execute(ls, m, kRegs0, te);
  Instr mm = mk(Op::multiply_moving);
  mm.dst = ps(DType::f32, 0, M, psum_off, N);
  mm.src0 = ma;
  mm.start = start;
  mm.stop = true;
  execute(mm, m, kRegs0, te);
}

std::vector<double> ref_matmul(const std::vector<float>& stat, const std::vector<float>& mov, int K, int M, int N,
                               std::vector<double>* abs_sum = nullptr) {
  std::vector<double> out(static_cast<size_t>(M * N), 0.0);
  if (abs_sum) abs_sum->assign(out.size(), 0.0);
  for (int mi = 0; mi < M; ++mi)
    for (int n = 0; n < N; ++n)
      for (int k = 0; k < K; ++k) {
        const double prod = static_cast<double>(stat[static_cast<size_t>(k * M + mi)]) * mov[static_cast<size_t>(k * N + n)];
        out[static_cast<size_t>(mi * N + n)] += prod;
        if (abs_sum) (*abs_sum)[static_cast<size_t>(mi * N + n)] += std::abs(prod);
      }
  return out;
}

// fp32 accumulation of K exact products: |error| <= K * 2^-24 * sum |products| (loosely).
double fp32_sum_bound(int K, double abs_sum) { return K * 0x1p-24 * abs_sum + 1e-30; }

}  // namespace

TEST_CASE("nc-exec: matmul bf16 into PSUM matches fp64") {
  CoreMemory m(trn1());
  TensorEngineState te;
  const int K = 128, M = 96, N = 200;
  const auto stat = randn(static_cast<size_t>(K * M), 4, FloatFormat::bf16);
  const auto mov = randn(static_cast<size_t>(K * N), 5, FloatFormat::bf16);
  run_matmul(m, te, stat, mov, K, M, N, true);
  CHECK(te.loaded);
  CHECK(te.K == K);
  CHECK(te.M == M);
  std::vector<double> abs_sum;
  const auto ref = ref_matmul(stat, mov, K, M, N, &abs_sum);
  const auto got = get(m, ps(DType::f32, 0, M, 0, N));
  int bad = 0;
  for (size_t i = 0; i < ref.size(); ++i) bad += std::abs(got[i] - ref[i]) > fp32_sum_bound(K, abs_sum[i]);
  CHECK(bad == 0);
}

TEST_CASE("nc-exec: matmul with integer-valued operands is exact") {
  CoreMemory m(trn1());
  TensorEngineState te;
  const int K = 7, M = 5, N = 9;
  std::vector<float> stat(K * M), mov(K * N);
  for (size_t i = 0; i < stat.size(); ++i) stat[i] = static_cast<float>(static_cast<int>(i % 11) - 5);
  for (size_t i = 0; i < mov.size(); ++i) mov[i] = static_cast<float>(static_cast<int>(i % 7) - 3) * 0.5f;
  run_matmul(m, te, stat, mov, K, M, N, true, 512);
  const auto ref = ref_matmul(stat, mov, K, M, N);
  const auto got = get(m, ps(DType::f32, 0, M, 512, N));
  for (size_t i = 0; i < ref.size(); ++i) CHECK(got[i] == static_cast<float>(ref[i]));
}

TEST_CASE("nc-exec: matmul accumulates in PSUM across start and accumulate") {
  CoreMemory m(trn1());
  TensorEngineState te;
  const int K = 64, M = 32, N = 48;
  const auto s1 = randn(K * M, 6, FloatFormat::bf16), m1 = randn(K * N, 7, FloatFormat::bf16);
  const auto s2 = randn(K * M, 8, FloatFormat::bf16), m2 = randn(K * N, 9, FloatFormat::bf16);
  // Garbage in the bank first: start must ignore it.
  std::vector<float> junk(M * N, 1e6f);
  m.write(ps(DType::f32, 0, M, 0, N), kRegs0, junk.data());
  run_matmul(m, te, s1, m1, K, M, N, true);
  const auto after1 = get(m, ps(DType::f32, 0, M, 0, N));
  run_matmul(m, te, s2, m2, K, M, N, false);
  const auto after2 = get(m, ps(DType::f32, 0, M, 0, N));
  std::vector<double> a1, a2;
  const auto r1 = ref_matmul(s1, m1, K, M, N, &a1), r2 = ref_matmul(s2, m2, K, M, N, &a2);
  int bad = 0;
  for (size_t i = 0; i < r1.size(); ++i) {
    bad += std::abs(after1[i] - r1[i]) > fp32_sum_bound(K, a1[i]);
    bad += std::abs(after2[i] - (r1[i] + r2[i])) > fp32_sum_bound(2 * K, a1[i] + a2[i]);
  }
  CHECK(bad == 0);
  // start again: the old value is dropped.
  run_matmul(m, te, s2, m2, K, M, N, true);
  const auto restart = get(m, ps(DType::f32, 0, M, 0, N));
  for (size_t i = 0; i < r2.size(); ++i) bad += std::abs(restart[i] - r2[i]) > fp32_sum_bound(K, a2[i]);
  CHECK(bad == 0);
  // Accumulation is "old fp32 value + this group's fp32 sum": with an exact first group (all
  // integers) the accumulated value is exactly fp32(first + second).
  std::vector<float> si(K * M), mi(K * N);
  for (size_t i = 0; i < si.size(); ++i) si[i] = static_cast<float>(static_cast<int>(i % 5) - 2);
  for (size_t i = 0; i < mi.size(); ++i) mi[i] = static_cast<float>(static_cast<int>(i % 3) - 1);
  run_matmul(m, te, si, mi, K, M, N, true);
  const auto exact = get(m, ps(DType::f32, 0, M, 0, N));
  run_matmul(m, te, s1, m1, K, M, N, false);
  const auto sum = get(m, ps(DType::f32, 0, M, 0, N));
  for (size_t i = 0; i < sum.size(); ++i) CHECK(sum[i] == exact[i] + after1[i]);
}

TEST_CASE("nc-exec: matmul into a bf16 or strided destination rounds on write") {
  CoreMemory m(trn1());
  TensorEngineState te;
  const int K = 16, M = 8, N = 12;
  const auto stat = randn(K * M, 10, FloatFormat::bf16), mov = randn(K * N, 11, FloatFormat::bf16);
  run_matmul(m, te, stat, mov, K, M, N, true, 0);
  const auto f32 = get(m, ps(DType::f32, 0, M, 0, N));  // the fp32 result (dense path)
  Instr mm = mk(Op::multiply_moving);
  mm.src0 = sb(DType::bf16, 0, K, 4096, N);
  mm.dst = ps(DType::bf16, 0, M, 2048, N);
  mm.start = true;
  execute(mm, m, kRegs0, te);
  const auto b16 = get(m, mm.dst);
  for (size_t i = 0; i < f32.size(); ++i) CHECK(float_bits(b16[i]) == float_bits(round_to(f32[i], FloatFormat::bf16)));
  // Strided fp32 destination (every other element): same values as the dense one.
  mm.dst = ap(Space::psum, DType::f32, 0, M, 4096, {{N, 2}});
  execute(mm, m, kRegs0, te);
  CHECK(get(m, mm.dst) == f32);
  // Accumulate through the general path too.
  mm.start = false;
  execute(mm, m, kRegs0, te);
  const auto twice = get(m, mm.dst);
  for (size_t i = 0; i < f32.size(); ++i) CHECK(twice[i] == f32[i] + f32[i]);
}

TEST_CASE("nc-exec: matmul fp32 inputs") {
  CoreMemory m(trn1());
  TensorEngineState te;
  const int K = 32, M = 16, N = 24;
  const auto stat = randn(K * M, 12), mov = randn(K * N, 13);
  run_matmul(m, te, stat, mov, K, M, N, true, 0, DType::f32);
  std::vector<double> abs_sum;
  const auto ref = ref_matmul(stat, mov, K, M, N, &abs_sum);
  const auto got = get(m, ps(DType::f32, 0, M, 0, N));
  int bad = 0;
  for (size_t i = 0; i < ref.size(); ++i) bad += std::abs(got[i] - ref[i]) > fp32_sum_bound(K, abs_sum[i]);
  CHECK(bad == 0);
}

TEST_CASE("nc-exec: matmul errors") {
  CoreMemory m(trn1());
  TensorEngineState te;
  Instr mm = mk(Op::multiply_moving);
  mm.src0 = sb(DType::bf16, 0, 8, 0, 16);
  mm.dst = ps(DType::f32, 0, 4, 0, 16);
  mm.line = 42;
  CHECK_THROWS_WITH(execute(mm, m, kRegs0, te), Catch::Contains("line 42") && Catch::Contains("load_stationary"));
  Instr ls = mk(Op::load_stationary);
  ls.src0 = sb(DType::bf16, 0, 16, 0, 4);
  execute(ls, m, kRegs0, te);
  CHECK_THROWS_WITH(execute(mm, m, kRegs0, te), Catch::Contains("partitions"));  // K 8 vs 16
  mm.src0 = sb(DType::bf16, 0, 16, 0, 16);
  mm.dst = ps(DType::f32, 0, 4, 0, 15);
  CHECK_THROWS_AS(execute(mm, m, kRegs0, te), std::runtime_error);
}

TEST_CASE("nc-exec: transpose through the tensor engine") {
  CoreMemory m(trn1());
  TensorEngineState te;
  const int P = 3, F = 5;
  const auto v = randn(P * F, 14, FloatFormat::bf16);
  m.write(sb(DType::bf16, 0, P, 0, F), kRegs0, v.data());
  Instr t = mk(Op::transpose);
  t.src0 = sb(DType::bf16, 0, P, 0, F);
  t.dst = ps(DType::f32, 0, F, 0, P);
  execute(t, m, kRegs0, te);
  const auto r = get(m, t.dst);
  for (int p = 0; p < P; ++p)
    for (int f = 0; f < F; ++f) CHECK(r[static_cast<size_t>(f * P + p)] == v[static_cast<size_t>(p * F + f)]);
  t.dst = ps(DType::f32, 0, P, 0, F);
  CHECK_THROWS_AS(execute(t, m, kRegs0, te), std::runtime_error);
}

// ------------------------------------------------------------------------------------------------
// Vector engine

TEST_CASE("nc-exec: tensor_tensor every alu with rounding on write") {
  CoreMemory m(trn1());
  TensorEngineState te;
  const int P = 4, F = 16;
  auto a = randn(P * F, 15, FloatFormat::bf16), b = randn(P * F, 16, FloatFormat::bf16);
  for (size_t i = 0; i < a.size(); ++i) {
    a[i] = round_to(std::abs(a[i]) + 0.25f, FloatFormat::bf16);  // positive bases for pow
    if (i % 5 == 0) b[i] = a[i];    // some equal pairs for the compares
  }
  m.write(sb(DType::bf16, 0, P, 0, F), kRegs0, a.data());
  m.write(sb(DType::bf16, 0, P, 64, F), kRegs0, b.data());
  for (Alu alu : {Alu::add, Alu::subtract, Alu::multiply, Alu::divide, Alu::max, Alu::min, Alu::pow, Alu::bypass,
                  Alu::is_equal, Alu::is_gt, Alu::is_ge, Alu::is_lt, Alu::is_le}) {
    INFO(alu_name(alu));
    Instr in = mk(Op::tensor_tensor);
    in.alu = alu;
    in.src0 = sb(DType::bf16, 0, P, 0, F);
    in.src1 = sb(DType::bf16, 0, P, 64, F);
    in.dst = sb(DType::f32, 0, P, 128, F);
    execute(in, m, kRegs0, te);
    const auto r32 = get(m, in.dst);
    in.dst = sb(DType::bf16, 0, P, 256, F);
    execute(in, m, kRegs0, te);
    const auto r16 = get(m, in.dst);
    for (size_t i = 0; i < a.size(); ++i) {
      const double x = a[i], y = b[i];
      double want = 0;
      switch (alu) {
        case Alu::add: want = x + y; break;
        case Alu::subtract: want = x - y; break;
        case Alu::multiply: want = x * y; break;
        case Alu::divide: want = x / y; break;
        case Alu::max: want = std::max(x, y); break;
        case Alu::min: want = std::min(x, y); break;
        case Alu::pow: want = std::pow(x, y); break;
        case Alu::bypass: want = x; break;
        case Alu::is_equal: want = x == y; break;
        case Alu::is_gt: want = x > y; break;
        case Alu::is_ge: want = x >= y; break;
        case Alu::is_lt: want = x < y; break;
        case Alu::is_le: want = x <= y; break;
      }
      if (alu == Alu::pow) CHECK(r32[i] == Approx(want).epsilon(1e-6));
      else CHECK(r32[i] == static_cast<float>(want));  // correctly rounded fp32 op
      CHECK(float_bits(r16[i]) == float_bits(round_to(r32[i], FloatFormat::bf16)));
    }
  }
  Instr bad = mk(Op::tensor_tensor);
  bad.src0 = sb(DType::bf16, 0, P, 0, F);
  bad.src1 = sb(DType::bf16, 0, P, 64, F - 1);
  bad.dst = sb(DType::f32, 0, P, 128, F);
  CHECK_THROWS_WITH(execute(bad, m, kRegs0, te), Catch::Contains("shape"));
}

TEST_CASE("nc-exec: tensor_scalar operands per partition") {
  // (x - m[p]) * r[p] per row, as a LayerNorm normalises.
  CoreMemory m(trn1());
  TensorEngineState te;
  const int64_t P = 4, F = 8;
  const auto v = randn(P * F, 23);
  const std::vector<float> mean{0.5f, -1.0f, 2.0f, 0.0f}, rstd{2.0f, 0.25f, -1.0f, 3.0f};
  m.write(sb(DType::f32, 0, P, 0, F), kRegs0, v.data());
  m.write(sb(DType::f32, 0, P, 256, 1), kRegs0, mean.data());
  m.write(sb(DType::f32, 0, P, 260, 1), kRegs0, rstd.data());
  Instr in = mk(Op::tensor_scalar);
  in.src0 = sb(DType::f32, 0, P, 0, F);
  in.dst = sb(DType::f32, 0, P, 64, F);
  in.alu = Alu::subtract;
  in.src1 = sb(DType::f32, 0, P, 256, 1);
  in.alu1 = Alu::multiply;
  in.aux = sb(DType::f32, 0, P, 260, 1);
  execute(in, m, kRegs0, te);
  const auto r = get(m, in.dst);
  for (int64_t p = 0; p < P; ++p)
    for (int64_t i = 0; i < F; ++i) CHECK(r[static_cast<size_t>(p * F + i)] == (v[static_cast<size_t>(p * F + i)] - mean[static_cast<size_t>(p)]) * rstd[static_cast<size_t>(p)]);
  // Only the first per partition; the second an immediate.
  in.aux = AccessPattern{};
  in.imm[1] = 1.0;
  in.alu1 = Alu::add;
  execute(in, m, kRegs0, te);
  const auto r2 = get(m, in.dst);
  for (int64_t p = 0; p < P; ++p)
    for (int64_t i = 0; i < F; ++i) CHECK(r2[static_cast<size_t>(p * F + i)] == (v[static_cast<size_t>(p * F + i)] - mean[static_cast<size_t>(p)]) + 1.0f);
}

TEST_CASE("nc-exec: tensor_scalar two ops and bypass") {
  CoreMemory m(trn1());
  TensorEngineState te;
  const auto v = randn(2 * 8, 17);
  m.write(sb(DType::f32, 0, 2, 0, 8), kRegs0, v.data());
  Instr in = mk(Op::tensor_scalar);
  in.src0 = sb(DType::f32, 0, 2, 0, 8);
  in.dst = sb(DType::f32, 0, 2, 64, 8);
  in.alu = Alu::multiply;
  in.imm[0] = 3.0;
  in.alu1 = Alu::subtract;
  in.imm[1] = 0.5;
  execute(in, m, kRegs0, te);
  auto r = get(m, in.dst);
  for (size_t i = 0; i < v.size(); ++i) CHECK(r[i] == v[i] * 3.0f - 0.5f);
  in.alu1 = Alu::bypass;  // second op keeps its left operand
  execute(in, m, kRegs0, te);
  r = get(m, in.dst);
  for (size_t i = 0; i < v.size(); ++i) CHECK(r[i] == v[i] * 3.0f);
  in.alu = Alu::is_gt;
  in.imm[0] = 0.0;
  in.alu1 = Alu::multiply;
  in.imm[1] = 2.0;
  execute(in, m, kRegs0, te);
  r = get(m, in.dst);
  for (size_t i = 0; i < v.size(); ++i) CHECK(r[i] == (v[i] > 0 ? 2.0f : 0.0f));
}

TEST_CASE("nc-exec: tensor_reduce add max min multiply and negate") {
  CoreMemory m(trn1());
  TensorEngineState te;
  const int P = 8, F = 50;
  const auto v = randn(P * F, 18, FloatFormat::bf16);
  m.write(sb(DType::bf16, 0, P, 0, F), kRegs0, v.data());
  for (Alu alu : {Alu::add, Alu::max, Alu::min, Alu::multiply}) {
    for (bool neg : {false, true}) {
      INFO(alu_name(alu) << " negate " << neg);
      Instr in = mk(Op::tensor_reduce);
      in.alu = alu;
      in.negate = neg;
      in.src0 = sb(DType::bf16, 0, P, 0, F);
      in.dst = sb(DType::f32, 0, P, 512, 1);
      execute(in, m, kRegs0, te);
      const auto r = get(m, in.dst);
      for (int p = 0; p < P; ++p) {
        double sum_abs = 0;
        for (int i = 0; i < F; ++i) sum_abs += std::abs(v[static_cast<size_t>(p * F + i)]);
        double acc = v[static_cast<size_t>(p * F)];
        float acc32 = v[static_cast<size_t>(p * F)];  // the defined order: sequential fp32
        for (int i = 1; i < F; ++i) {
          const float x = v[static_cast<size_t>(p * F + i)];
          switch (alu) {
            case Alu::add: acc += x; acc32 += x; break;
            case Alu::max: acc = std::max<double>(acc, x); acc32 = std::max(acc32, x); break;
            case Alu::min: acc = std::min<double>(acc, x); acc32 = std::min(acc32, x); break;
            default: acc *= x; acc32 *= x; break;
          }
        }
        if (neg) { acc = -acc; acc32 = -acc32; }
        CHECK(r[static_cast<size_t>(p)] == acc32);
        if (alu == Alu::add) CHECK(r[static_cast<size_t>(p)] == Approx(acc).margin(F * 0x1p-24 * sum_abs));
        else CHECK(r[static_cast<size_t>(p)] == Approx(acc).epsilon(1e-5));
      }
    }
  }
  Instr bad = mk(Op::tensor_reduce);
  bad.alu = Alu::divide;
  bad.src0 = sb(DType::bf16, 0, P, 0, F);
  bad.dst = sb(DType::f32, 0, P, 512, 1);
  CHECK_THROWS_WITH(execute(bad, m, kRegs0, te), Catch::Contains("reduction"));
}

TEST_CASE("nc-exec: tensor_copy converts and walks patterns") {
  CoreMemory m(trn1());
  TensorEngineState te;
  const auto v = randn(4 * 12, 19);
  m.write(ps(DType::f32, 0, 4, 0, 12), kRegs0, v.data());
  Instr in = mk(Op::tensor_copy);
  in.src0 = ap(Space::psum, DType::f32, 0, 4, 0, {{3, 4}, {4, 1}});
  in.dst = ap(Space::sbuf, DType::bf16, 64, 4, 0, {{12, 2}});  // every other bf16 slot
  execute(in, m, kRegs0, te);
  const auto r = get(m, in.dst);
  for (size_t i = 0; i < v.size(); ++i) CHECK(float_bits(r[i]) == float_bits(round_to(v[i], FloatFormat::bf16)));
  CHECK(get(m, sb(DType::bf16, 64, 1, 2, 1))[0] == 0.0f);  // the gap stays untouched
}

TEST_CASE("nc-exec: transpose32 transposes each 32x32 block") {
  CoreMemory m(trn1());
  TensorEngineState te;
  const int P = 64, F = 96;
  std::vector<float> v(P * F);
  for (int p = 0; p < P; ++p)
    for (int f = 0; f < F; ++f) v[static_cast<size_t>(p * F + f)] = static_cast<float>(p * 1000 + f);
  m.write(sb(DType::f32, 0, P, 0, F), kRegs0, v.data());
  Instr in = mk(Op::transpose32);
  in.src0 = sb(DType::f32, 0, P, 0, F);
  in.dst = sb(DType::f32, 0, P, 1024, F);
  execute(in, m, kRegs0, te);
  const auto r = get(m, in.dst);
  for (int p0 = 0; p0 < P; p0 += 32)
    for (int f0 = 0; f0 < F; f0 += 32)
      for (int i = 0; i < 32; ++i)
        for (int j = 0; j < 32; ++j)
          REQUIRE(r[static_cast<size_t>((p0 + j) * F + f0 + i)] == v[static_cast<size_t>((p0 + i) * F + f0 + j)]);
  // One partial block: [3, 5] -> [5, 3].
  in.src0 = sb(DType::f32, 32, 3, 0, 5);
  in.dst = sb(DType::f32, 32, 5, 2048, 3);
  execute(in, m, kRegs0, te);
  const auto part = get(m, in.dst);
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 5; ++j)
      CHECK(part[static_cast<size_t>(j * 3 + i)] == v[static_cast<size_t>((32 + i) * F + j)]);
  in.src0 = sb(DType::f32, 0, 64, 0, 40);
  in.dst = sb(DType::f32, 0, 64, 2048, 40);
  CHECK_THROWS_WITH(execute(in, m, kRegs0, te), Catch::Contains("multiples of 32"));
}

TEST_CASE("nc-exec: bn_stats then bn_aggr give mean and population variance") {
  CoreMemory m(trn1());
  TensorEngineState te;
  const int P = 4, F = 7;  // odd: halves of 4 and 3
  const auto v = randn(P * 2 * F, 20, FloatFormat::bf16, 2.0f);
  m.write(sb(DType::bf16, 0, P, 0, 2 * F), kRegs0, v.data());
  // Two chunks of 7 per partition -> two records of 6 values side by side.
  for (int c = 0; c < 2; ++c) {
    Instr st = mk(Op::bn_stats);
    st.src0 = sb(DType::bf16, 0, P, c * F * 2, F);
    st.dst = sb(DType::f32, 0, P, 256 + c * 24, 6);
    execute(st, m, kRegs0, te);
  }
  const auto stats = get(m, sb(DType::f32, 0, P, 256, 12));
  for (int p = 0; p < P; ++p)
    for (int c = 0; c < 2; ++c) {
      const float* x = v.data() + p * 2 * F + c * F;
      const float* rec = stats.data() + p * 12 + c * 6;
      for (int h = 0; h < 2; ++h) {
        const int lo = h == 0 ? 0 : 4, n = h == 0 ? 4 : 3;
        double mean = 0, m2 = 0;
        for (int i = 0; i < n; ++i) mean += x[lo + i];
        mean /= n;
        for (int i = 0; i < n; ++i) m2 += (x[lo + i] - mean) * (x[lo + i] - mean);
        CHECK(rec[3 * h] == static_cast<float>(n));
        CHECK(rec[3 * h + 1] == Approx(mean).margin(1e-6));
        CHECK(rec[3 * h + 2] == Approx(m2).epsilon(1e-5).margin(1e-6));
      }
    }
  Instr ag = mk(Op::bn_aggr);
  ag.src0 = sb(DType::f32, 0, P, 256, 12);
  ag.dst = sb(DType::f32, 0, P, 512, 2);
  execute(ag, m, kRegs0, te);
  const auto r = get(m, ag.dst);
  for (int p = 0; p < P; ++p) {
    double mean = 0, var = 0;
    for (int i = 0; i < 2 * F; ++i) mean += v[static_cast<size_t>(p * 2 * F + i)];
    mean /= 2 * F;
    for (int i = 0; i < 2 * F; ++i) var += std::pow(v[static_cast<size_t>(p * 2 * F + i)] - mean, 2);
    var /= 2 * F;
    CHECK(r[static_cast<size_t>(2 * p)] == Approx(mean).margin(1e-5));
    CHECK(r[static_cast<size_t>(2 * p + 1)] == Approx(var).epsilon(1e-5));
  }
  // A single element: the second half is empty (0, 0, 0) and aggregation skips it.
  Instr one = mk(Op::bn_stats);
  one.src0 = sb(DType::bf16, 0, 1, 0, 1);
  one.dst = sb(DType::f32, 0, 1, 1024, 6);
  execute(one, m, kRegs0, te);
  CHECK(get(m, one.dst) == std::vector<float>{1.0f, v[0], 0.0f, 0.0f, 0.0f, 0.0f});
  ag.src0 = one.dst;
  ag.dst = sb(DType::f32, 0, 1, 1100, 2);
  execute(ag, m, kRegs0, te);
  CHECK(get(m, ag.dst) == std::vector<float>{v[0], 0.0f});
}

TEST_CASE("nc-exec: memset and select") {
  CoreMemory m(trn1());
  TensorEngineState te;
  Instr ms = mk(Op::memset);
  ms.dst = sb(DType::bf16, 0, 3, 0, 5);
  ms.imm[0] = 0.1;
  execute(ms, m, kRegs0, te);
  CHECK(get(m, ms.dst) == std::vector<float>(15, round_to(0.1f, FloatFormat::bf16)));
  const std::vector<float> pred{1, 0, -2, 0, 0.5f, 0}, t{10, 11, 12, 13, 14, 15}, f{-1, -2, -3, -4, -5, -6};
  m.write(sb(DType::f32, 0, 2, 64, 3), kRegs0, pred.data());
  m.write(sb(DType::f32, 0, 2, 128, 3), kRegs0, t.data());
  m.write(sb(DType::f32, 0, 2, 192, 3), kRegs0, f.data());
  Instr se = mk(Op::select);
  se.src0 = sb(DType::f32, 0, 2, 64, 3);
  se.src1 = sb(DType::f32, 0, 2, 128, 3);
  se.aux = sb(DType::f32, 0, 2, 192, 3);
  se.dst = sb(DType::f32, 0, 2, 256, 3);
  execute(se, m, kRegs0, te);
  CHECK(get(m, se.dst) == std::vector<float>{10, -2, 12, -4, 14, -6});
}

// ------------------------------------------------------------------------------------------------
// Scalar engine

namespace {
double ref_func(Func f, double x) {
  switch (f) {
    case Func::identity: return x;
    case Func::relu: return x > 0 ? x : 0;
    case Func::gelu: return 0.5 * x * (1 + std::erf(x / std::sqrt(2.0)));
    case Func::gelu_tanh: return 0.5 * x * (1 + std::tanh(std::sqrt(2.0 / std::numbers::pi) * (x + 0.044715 * x * x * x)));
    case Func::sigmoid: return 1 / (1 + std::exp(-x));
    case Func::tanh: return std::tanh(x);
    case Func::exp: return std::exp(x);
    case Func::log: return std::log(x);
    case Func::sqrt: return std::sqrt(x);
    case Func::rsqrt: return 1 / std::sqrt(x);
    case Func::reciprocal: return 1 / x;
    case Func::square: return x * x;
    case Func::silu: return x / (1 + std::exp(-x));
    case Func::erf: return std::erf(x);
    case Func::softplus: return std::log1p(std::exp(x));
    case Func::mish: return x * std::tanh(std::log1p(std::exp(x)));
    case Func::abs: return std::fabs(x);
  }
  return 0;
}
}  // namespace

TEST_CASE("nc-exec: activation every function with scale and bias") {
  CoreMemory m(trn1());
  TensorEngineState te;
  const int P = 3, F = 20;
  auto v = randn(P * F, 21, FloatFormat::bf16);
  m.write(sb(DType::bf16, 0, P, 0, F), kRegs0, v.data());
  const std::vector<float> bias{0.5f, 1.0f, 2.0f};
  m.write(sb(DType::f32, 0, P, 512, 1), kRegs0, bias.data());
  for (Func fn : {Func::identity, Func::relu, Func::gelu, Func::gelu_tanh, Func::sigmoid, Func::tanh, Func::exp,
                  Func::log, Func::sqrt, Func::rsqrt, Func::reciprocal, Func::square, Func::silu, Func::erf, Func::softplus,
                  Func::mish, Func::abs}) {
    INFO(func_name(fn));
    const bool positive = fn == Func::log || fn == Func::sqrt || fn == Func::rsqrt || fn == Func::reciprocal;
    Instr in = mk(Op::activation);
    in.func = fn;
    in.src0 = sb(DType::bf16, 0, P, 0, F);
    in.dst = sb(DType::f32, 0, P, 1024, F);
    in.imm[0] = positive ? 0.25 : 1.5;  // scale
    // Positive inputs for the functions that need them: bias from an AP (>= 0.5 > |0.25 x|
    // mostly) would not guarantee it, so use an immediate bias of 4 for those.
    if (positive) in.imm[1] = 4.0;
    else in.src1 = sb(DType::f32, 0, P, 512, 1);
    execute(in, m, kRegs0, te);
    const auto r = get(m, in.dst);
    for (int p = 0; p < P; ++p)
      for (int i = 0; i < F; ++i) {
        const double x = v[static_cast<size_t>(p * F + i)];
        const double arg = x * in.imm[0] + (positive ? 4.0 : bias[static_cast<size_t>(p)]);
        const double want = ref_func(fn, arg);
        CHECK(r[static_cast<size_t>(p * F + i)] == Approx(want).epsilon(2e-6).margin(2e-6));
      }
  }
}

TEST_CASE("nc-exec: activation accumulate sums fp32 results before rounding") {
  CoreMemory m(trn1());
  TensorEngineState te;
  const int P = 2, F = 3;
  // 1 + 2^-9 rounds to 1 in bf16; three of them sum to 3 + 3*2^-9 in fp32 before rounding.
  const std::vector<float> v(P * F, 1.0f + 0x1p-9f);
  m.write(sb(DType::f32, 0, P, 0, F), kRegs0, v.data());
  std::vector<float> old{100.0f, 200.0f};
  m.write(sb(DType::f32, 0, P, 256, 1), kRegs0, old.data());
  Instr in = mk(Op::activation);
  in.func = Func::identity;
  in.imm[0] = 1.0;
  in.src0 = sb(DType::f32, 0, P, 0, F);
  in.dst = sb(DType::bf16, 0, P, 128, F);
  in.aux = sb(DType::f32, 0, P, 256, 1);
  execute(in, m, kRegs0, te);
  CHECK(get(m, in.dst) == std::vector<float>(P * F, 1.0f));
  const float want = (1.0f + 0x1p-9f) + (1.0f + 0x1p-9f) + (1.0f + 0x1p-9f);
  CHECK(get(m, in.aux) == std::vector<float>{want, want});  // overwritten, not added to 100/200
  CHECK(want != 3.0f);
  in.src1 = sb(DType::f32, 0, P, 0, 2);  // bias must be [P, 1]
  CHECK_THROWS_AS(execute(in, m, kRegs0, te), std::runtime_error);
}

// ------------------------------------------------------------------------------------------------
// GpSimd

TEST_CASE("nc-exec: iota fills an affine ramp") {
  CoreMemory m(trn1());
  TensorEngineState te;
  Instr in = mk(Op::iota);
  in.dst = ap(Space::sbuf, DType::i32, 0, 4, 0, {{2, 3}, {3, 1}});
  in.imm = {5.0, 100.0, -1.0, 0.0};
  execute(in, m, kRegs0, te);
  const auto r = get(m, in.dst);
  for (int p = 0; p < 4; ++p)
    for (int i = 0; i < 6; ++i) CHECK(r[static_cast<size_t>(p * 6 + i)] == 5.0f + 100.0f * p - i);
  in.dst = sb(DType::f32, 8, 2, 0, 4);
  in.imm = {0.5, 0.25, 0.125, 0.0};
  execute(in, m, kRegs0, te);
  CHECK(get(m, in.dst) == std::vector<float>{0.5f, 0.625f, 0.75f, 0.875f, 0.75f, 0.875f, 1.0f, 1.125f});
}

TEST_CASE("nc-exec: affine_select builds a causal mask") {
  CoreMemory m(trn1());
  TensorEngineState te;
  const int P = 4, F = 4;
  const auto v = randn(P * F, 22);
  m.write(sb(DType::f32, 0, P, 0, F), kRegs0, v.data());
  Instr in = mk(Op::affine_select);
  in.src0 = sb(DType::f32, 0, P, 0, F);
  in.dst = sb(DType::f32, 0, P, 64, F);
  in.alu = Alu::is_ge;
  in.imm = {0.0, 1.0, -1.0, -1e9};  // keep where p - i >= 0
  execute(in, m, kRegs0, te);
  const auto r = get(m, in.dst);
  for (int p = 0; p < P; ++p)
    for (int i = 0; i < F; ++i)
      CHECK(r[static_cast<size_t>(p * F + i)] == (p >= i ? v[static_cast<size_t>(p * F + i)] : -1e9f));
  in.alu = Alu::add;
  CHECK_THROWS_WITH(execute(in, m, kRegs0, te), Catch::Contains("comparison"));
}

TEST_CASE("nc-exec: gather along the free dimension and rejects bad indices") {
  CoreMemory m(trn1());
  TensorEngineState te;
  const int P = 2, T = 6, F = 4;
  std::vector<float> table(P * T);
  for (size_t i = 0; i < table.size(); ++i) table[i] = 10.0f * static_cast<float>(i);
  const std::vector<float> idx{5, 0, 3, 3, 1, 2, 0, 5};
  m.write(sb(DType::bf16, 0, P, 0, T), kRegs0, table.data());
  m.write(sb(DType::i32, 0, P, 64, F), kRegs0, idx.data());
  Instr in = mk(Op::gather);
  in.src0 = sb(DType::bf16, 0, P, 0, T);
  in.src1 = sb(DType::i32, 0, P, 64, F);
  in.dst = sb(DType::f32, 0, P, 128, F);
  execute(in, m, kRegs0, te);
  CHECK(get(m, in.dst) == std::vector<float>{50, 0, 30, 30, 70, 80, 60, 110});
  const std::vector<float> bad{0, 1, 6, 0, 0, 0, 0, 0};
  m.write(in.src1, kRegs0, bad.data());
  CHECK_THROWS_WITH(execute(in, m, kRegs0, te), Catch::Contains("index 6"));
}

TEST_CASE("nc-exec: partition_all_reduce across all partitions") {
  CoreMemory m(trn1());
  TensorEngineState te;
  const int P = 32, F = 5;
  const auto v = randn(P * F, 23, FloatFormat::bf16);
  m.write(sb(DType::bf16, 32, P, 0, F), kRegs0, v.data());
  for (Alu alu : {Alu::add, Alu::max}) {
    Instr in = mk(Op::partition_all_reduce);
    in.alu = alu;
    in.src0 = sb(DType::bf16, 32, P, 0, F);
    in.dst = sb(DType::f32, 32, P, 64, F);
    execute(in, m, kRegs0, te);
    const auto r = get(m, in.dst);
    for (int i = 0; i < F; ++i) {
      double acc = v[static_cast<size_t>(i)];
      for (int q = 1; q < P; ++q)
        acc = alu == Alu::add ? acc + v[static_cast<size_t>(q * F + i)] : std::max<double>(acc, v[static_cast<size_t>(q * F + i)]);
      for (int p = 0; p < P; ++p) CHECK(r[static_cast<size_t>(p * F + i)] == Approx(acc).margin(1e-5));
    }
  }
}

// ------------------------------------------------------------------------------------------------
// DMA and the rest

TEST_CASE("nc-exec: dma copies raw or converts with rounding") {
  CoreMemory m(trn1());
  TensorEngineState te;
  const auto v = randn(4 * 32, 24);
  m.write(hbm(DType::f32, 4, 64, 0x10000, 32), kRegs0, v.data());
  // fp32 HBM -> bf16 SBUF: rounds.
  Instr d = mk(Op::dma);
  d.src0 = hbm(DType::f32, 4, 64, 0x10000, 32);
  d.dst = sb(DType::bf16, 16, 4, 0, 32);
  execute(d, m, kRegs0, te);
  const auto r = get(m, d.dst);
  for (size_t i = 0; i < v.size(); ++i) CHECK(float_bits(r[i]) == float_bits(round_to(v[i], FloatFormat::bf16)));
  // bf16 SBUF -> bf16 HBM with a different row split (2 rows x 64): raw bytes.
  Instr back = mk(Op::dma);
  back.src0 = d.dst;
  back.dst = hbm(DType::bf16, 2, 64, 0x40000, 64);
  execute(back, m, kRegs0, te);
  CHECK(get(m, back.dst) == r);
  // SBUF -> SBUF with dynamic offset.
  RegFile regs{};
  regs[1] = 2;
  Instr ss = mk(Op::dma);
  ss.src0 = d.dst;
  ss.dst = sb(DType::bf16, 64, 4, 0, 32);
  ss.dst.offset_reg = 1;
  ss.dst.reg_scale = 1024;
  execute(ss, m, regs, te);
  CHECK(get(m, sb(DType::bf16, 64, 4, 2048, 32)) == r);
  ss.dst = sb(DType::bf16, 64, 4, 0, 31);
  CHECK_THROWS_WITH(execute(ss, m, regs, te), Catch::Contains("element count"));
}

TEST_CASE("nc-exec: control and sync ops leave memory alone") {
  CoreMemory m(trn1());
  TensorEngineState te;
  for (Op op : {Op::nop, Op::sem_wait, Op::sem_signal, Op::step_marker, Op::set_reg, Op::add_reg, Op::dec_branch_nz,
                Op::branch_nz, Op::jump, Op::halt}) {
    Instr in = mk(op);
    in.dst = sb(DType::f32, 0, 1, 0, 4);
    CHECK_NOTHROW(execute(in, m, kRegs0, te));
  }
  CHECK(get(m, sb(DType::f32, 0, 1, 0, 4)) == std::vector<float>(4, 0.0f));
  CHECK(m.hbm_pages_allocated() == 0);
}

TEST_CASE("nc-exec: alu and func building blocks") {
  CHECK(apply_alu(Alu::is_equal, 2.0f, 2.0f) == 1.0f);
  CHECK(apply_alu(Alu::is_lt, 2.0f, 1.0f) == 0.0f);
  CHECK(apply_alu(Alu::bypass, 3.0f, 9.0f) == 3.0f);
  CHECK(apply_alu(Alu::pow, 2.0f, 10.0f) == 1024.0f);
  CHECK(apply_alu(Alu::divide, 1.0f, 4.0f) == 0.25f);
  CHECK(apply_func(Func::relu, -3.0f) == 0.0f);
  CHECK(apply_func(Func::square, -3.0f) == 9.0f);
  CHECK(apply_func(Func::sigmoid, 0.0f) == 0.5f);
  CHECK(apply_func(Func::rsqrt, 4.0f) == 0.5f);
}

TEST_CASE("nc-exec: a product split over threads equals the product in one piece, bit for bit") {
  // The tensor engine's products run their columns on several host threads; the simulated numbers
  // must not depend on how many. Shapes of the compiled kernels (K <= 128, M <= 128, N up to 2048,
  // and N not a multiple of 16), bf16-exact operands as the engine widens them, and fp32 ones.
  std::mt19937 rng(7);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  const int64_t shapes[][3] = {{128, 128, 512}, {128, 128, 384}, {64, 128, 512}, {128, 64, 200}, {32, 128, 2048},
                               {128, 128, 1000}, {96, 112, 333}, {128, 1, 4096}};
  for (const auto& sh : shapes) {
    const int64_t K = sh[0], M = sh[1], N = sh[2];
    for (bool exact16 : {true, false}) {
      auto draw = [&](int64_t n) {
        std::vector<float> v(static_cast<size_t>(n));
        for (auto& x : v) x = exact16 ? tessera::round_to(nd(rng), tessera::FloatFormat::bf16) : nd(rng);
        return v;
      };
      const auto S = draw(K * M), B = draw(K * N), O0 = draw(M * N);
      for (bool start : {true, false}) {
        std::vector<float> one = O0;
        stationary_product(one.data(), N, S.data(), B.data(), K, M, N, start, 1);
        for (int parts : {2, 3, 4, 7}) {
          std::vector<float> split = O0;
          stationary_product(split.data(), N, S.data(), B.data(), K, M, N, start, parts);
          INFO("K " << K << " M " << M << " N " << N << " parts " << parts << " start " << start);
          CHECK(std::memcmp(one.data(), split.data(), one.size() * sizeof(float)) == 0);
        }
        // And against a plain sequential fp32 sum in k order (what the engine's numerics promise
        // up to the order of additions): within fp32 rounding.
        double worst = 0;
        for (int64_t i = 0; i < M; i += 7)
          for (int64_t j = 0; j < N; j += 5) {
            double acc = start ? 0.0 : O0[static_cast<size_t>(i * N + j)];
            for (int64_t k = 0; k < K; ++k) acc += double(S[static_cast<size_t>(k * M + i)]) * B[static_cast<size_t>(k * N + j)];
            worst = std::max(worst, std::abs(acc - one[static_cast<size_t>(i * N + j)]));
          }
        CHECK(worst < 1e-3);
      }
    }
  }
}
