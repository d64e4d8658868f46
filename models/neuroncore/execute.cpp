#include "models/neuroncore/execute.hpp"

#include "isa/host_threads.hpp"

#include <Eigen/Core>
#include <atomic>
#include <cmath>
#include <condition_variable>
#include <functional>
#include <limits>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

namespace tessera::neuroncore {

namespace {

// ---- elementwise operations, one instantiation per ALU / function ----

template <Alu A>
inline float alu_op(float x, float y) {
  if constexpr (A == Alu::add) return x + y;
  else if constexpr (A == Alu::subtract) return x - y;
  else if constexpr (A == Alu::multiply) return x * y;
  else if constexpr (A == Alu::divide) return x / y;
  else if constexpr (A == Alu::max) return std::fmax(x, y);
  else if constexpr (A == Alu::min) return std::fmin(x, y);
  else if constexpr (A == Alu::pow) return std::pow(x, y);
  else if constexpr (A == Alu::bypass) return x;
  else if constexpr (A == Alu::is_equal) return x == y ? 1.0f : 0.0f;
  else if constexpr (A == Alu::is_gt) return x > y ? 1.0f : 0.0f;
  else if constexpr (A == Alu::is_ge) return x >= y ? 1.0f : 0.0f;
  else if constexpr (A == Alu::is_lt) return x < y ? 1.0f : 0.0f;
  else return x <= y ? 1.0f : 0.0f;  // is_le
}

// Calls f(std::integral_constant<Alu, a>) so loops get a branch-free body.
template <class F>
void with_alu(Alu a, F&& f) {
  switch (a) {
    case Alu::add: f(std::integral_constant<Alu, Alu::add>{}); return;
    case Alu::subtract: f(std::integral_constant<Alu, Alu::subtract>{}); return;
    case Alu::multiply: f(std::integral_constant<Alu, Alu::multiply>{}); return;
    case Alu::divide: f(std::integral_constant<Alu, Alu::divide>{}); return;
    case Alu::max: f(std::integral_constant<Alu, Alu::max>{}); return;
    case Alu::min: f(std::integral_constant<Alu, Alu::min>{}); return;
    case Alu::pow: f(std::integral_constant<Alu, Alu::pow>{}); return;
    case Alu::bypass: f(std::integral_constant<Alu, Alu::bypass>{}); return;
    case Alu::is_equal: f(std::integral_constant<Alu, Alu::is_equal>{}); return;
    case Alu::is_gt: f(std::integral_constant<Alu, Alu::is_gt>{}); return;
    case Alu::is_ge: f(std::integral_constant<Alu, Alu::is_ge>{}); return;
    case Alu::is_lt: f(std::integral_constant<Alu, Alu::is_lt>{}); return;
    case Alu::is_le: f(std::integral_constant<Alu, Alu::is_le>{}); return;
  }
  throw std::logic_error("execute: unknown alu");
}

inline float sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }

template <Func F>
inline float func_op(float x) {
  if constexpr (F == Func::identity) return x;
  else if constexpr (F == Func::relu) return x < 0.0f ? 0.0f : x;  // NaN passes through
  else if constexpr (F == Func::gelu) return 0.5f * x * (1.0f + std::erf(x * 0.70710678118654752f));
  else if constexpr (F == Func::gelu_tanh)
    return 0.5f * x * (1.0f + std::tanh(0.79788456080286536f * (x + 0.044715f * x * x * x)));
  else if constexpr (F == Func::sigmoid) return sigmoid(x);
  else if constexpr (F == Func::tanh) return std::tanh(x);
  else if constexpr (F == Func::exp) return std::exp(x);
  else if constexpr (F == Func::log) return std::log(x);
  else if constexpr (F == Func::sqrt) return std::sqrt(x);
  else if constexpr (F == Func::rsqrt) return 1.0f / std::sqrt(x);
  else if constexpr (F == Func::reciprocal) return 1.0f / x;
  else if constexpr (F == Func::square) return x * x;
  else if constexpr (F == Func::silu) return x * sigmoid(x);
  else if constexpr (F == Func::erf) return std::erf(x);
  else if constexpr (F == Func::softplus) return x > 20.0f ? x : std::log1p(std::exp(x));  // exp(x) overflows past ~88
  else if constexpr (F == Func::mish) return x * std::tanh(x > 20.0f ? x : std::log1p(std::exp(x)));
  else return std::fabs(x);  // abs
}

template <class G>
void with_func(Func fn, G&& g) {
  switch (fn) {
    case Func::identity: g(std::integral_constant<Func, Func::identity>{}); return;
    case Func::relu: g(std::integral_constant<Func, Func::relu>{}); return;
    case Func::gelu: g(std::integral_constant<Func, Func::gelu>{}); return;
    case Func::gelu_tanh: g(std::integral_constant<Func, Func::gelu_tanh>{}); return;
    case Func::sigmoid: g(std::integral_constant<Func, Func::sigmoid>{}); return;
    case Func::tanh: g(std::integral_constant<Func, Func::tanh>{}); return;
    case Func::exp: g(std::integral_constant<Func, Func::exp>{}); return;
    case Func::log: g(std::integral_constant<Func, Func::log>{}); return;
    case Func::sqrt: g(std::integral_constant<Func, Func::sqrt>{}); return;
    case Func::rsqrt: g(std::integral_constant<Func, Func::rsqrt>{}); return;
    case Func::reciprocal: g(std::integral_constant<Func, Func::reciprocal>{}); return;
    case Func::square: g(std::integral_constant<Func, Func::square>{}); return;
    case Func::silu: g(std::integral_constant<Func, Func::silu>{}); return;
    case Func::erf: g(std::integral_constant<Func, Func::erf>{}); return;
    case Func::softplus: g(std::integral_constant<Func, Func::softplus>{}); return;
    case Func::mish: g(std::integral_constant<Func, Func::mish>{}); return;
    case Func::abs: g(std::integral_constant<Func, Func::abs>{}); return;
  }
  throw std::logic_error("execute: unknown activation function");
}

// ---- errors and shapes ----

[[noreturn]] void fail(const Instr& in, const std::string& msg) {
  throw std::runtime_error("line " + std::to_string(in.line) + ": " + std::string(op_name(in.op)) + ": " + msg);
}

std::string shape_text(const AccessPattern& ap) {
  return "[" + std::to_string(ap.parts) + ", " + std::to_string(ap.free_elems()) + "]";
}

void need(const Instr& in, const char* name, const AccessPattern& ap) {
  if (!ap.present()) fail(in, std::string("operand ") + name + " is missing");
}

void same_shape(const Instr& in, const char* an, const AccessPattern& a, const char* bn, const AccessPattern& b) {
  need(in, an, a);
  need(in, bn, b);
  if (a.parts != b.parts || a.free_elems() != b.free_elems())
    fail(in, std::string(an) + " " + shape_text(a) + " and " + bn + " " + shape_text(b) + " differ in shape");
}

void need_shape(const Instr& in, const char* name, const AccessPattern& ap, int64_t parts, int64_t free) {
  need(in, name, ap);
  if (ap.parts != parts || ap.free_elems() != free)
    fail(in, std::string(name) + " is " + shape_text(ap) + ", expected [" + std::to_string(parts) + ", " +
                 std::to_string(free) + "]");
}

bool is_reduce_alu(Alu a) { return a == Alu::add || a == Alu::multiply || a == Alu::max || a == Alu::min; }
bool is_compare_alu(Alu a) {
  return a == Alu::is_equal || a == Alu::is_gt || a == Alu::is_ge || a == Alu::is_lt || a == Alu::is_le;
}

// Per-thread operand buffers, reused across instructions (no allocation on the hot path).
struct Scratch {
  std::vector<float> a, b, c, d;
};
Scratch& scratch() {
  thread_local Scratch s;
  return s;
}

// Sequential fp32 reduction of n values (n >= 1).
template <Alu A>
float reduce_row(const float* x, int64_t n) {
  float acc = x[0];
  for (int64_t i = 1; i < n; ++i) acc = alu_op<A>(acc, x[i]);
  return acc;
}

using RowMajorF = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

// ---- host threads for large products ----

// A persistent pool: host_threads() - 1 workers beside the calling thread. run(parts, f)
// calls f(0) .. f(parts - 1), f(0) on the caller, and returns when all are done. The workers never
// touch SystemC; they only compute into disjoint output columns. Products come every few hundred
// microseconds during a run, so a worker spins briefly for the next one before it sleeps, and the
// caller spins for the others to finish.
class HostPool {
 public:
  static HostPool& get() {
    static HostPool pool;
    return pool;
  }
  int threads() const { return static_cast<int>(workers_.size()) + 1; }
  void run(int parts, const std::function<void(int)>& f) {
    if (parts <= 1 || workers_.empty()) {
      for (int p = 0; p < parts; ++p) f(p);
      return;
    }
    {
      std::lock_guard<std::mutex> l(m_);
      job_ = &f;
      parts_ = parts;
      pending_.store(parts - 1, std::memory_order_relaxed);
      gen_.fetch_add(1, std::memory_order_release);
    }
    cv_.notify_all();
    f(0);
    // (No PAUSE in these loops: under a hypervisor, pause-loop exiting deschedules the spinner.)
    for (int spin = 0; pending_.load(std::memory_order_acquire) != 0; ++spin)
      if (spin > (1 << 20)) std::this_thread::yield();
  }
  ~HostPool() {
    {
      std::lock_guard<std::mutex> l(m_);
      stop_ = true;
      gen_.fetch_add(1, std::memory_order_release);
    }
    cv_.notify_all();
    for (auto& t : workers_) t.join();
  }

 private:
  HostPool() {
    const unsigned n = host_threads();
    for (unsigned w = 1; w < n; ++w) workers_.emplace_back([this, w] { loop(static_cast<int>(w)); });
  }
  void loop(int id) {
    uint64_t seen = 0;
    for (;;) {
      // Spin (about a millisecond) for the next product, then sleep until one comes.
      for (int spin = 0; spin < (1 << 20) && gen_.load(std::memory_order_acquire) == seen; ++spin) {
      }
      const std::function<void(int)>* job = nullptr;
      {
        std::unique_lock<std::mutex> l(m_);
        cv_.wait(l, [&] { return stop_ || gen_.load(std::memory_order_acquire) != seen; });
        if (stop_) return;
        seen = gen_.load(std::memory_order_acquire);
        if (id < parts_) job = job_;
      }
      if (!job) continue;
      (*job)(id);
      pending_.fetch_sub(1, std::memory_order_acq_rel);
    }
  }
  std::vector<std::thread> workers_;
  std::mutex m_;
  std::condition_variable cv_;
  const std::function<void(int)>* job_ = nullptr;
  int parts_ = 0;
  std::atomic<int> pending_{0};
  std::atomic<uint64_t> gen_{0};
  bool stop_ = false;
};

}  // namespace

// O[M, N] (row stride ostride) = (start ? 0 : O) + S^T B with S [K, M] and B [K, N] row-major, in
// fp32. Large products split their columns over the host's threads at multiples of 16 columns;
// every output element is computed the same way whatever the split (one Eigen k-block for the
// K <= 128 of the tensor engine; test "neuroncore execute: a product split over threads equals the
// product in one piece, bit for bit"), so results do not depend on the thread count.
void stationary_product(float* O, int64_t ostride, const float* S, const float* B, int64_t K, int64_t M, int64_t N,
                        bool start, int max_parts) {
  auto cols = [&](int64_t j0, int64_t j1) {
    if (j1 <= j0) return;
    Eigen::Map<const RowMajorF> Sm(S, static_cast<Eigen::Index>(K), static_cast<Eigen::Index>(M));
    Eigen::Map<const RowMajorF, 0, Eigen::OuterStride<>> Bm(B + j0, static_cast<Eigen::Index>(K), static_cast<Eigen::Index>(j1 - j0),
                                                           Eigen::OuterStride<>(static_cast<Eigen::Index>(N)));
    Eigen::Map<RowMajorF, 0, Eigen::OuterStride<>> Om(O + j0, static_cast<Eigen::Index>(M), static_cast<Eigen::Index>(j1 - j0),
                                                      Eigen::OuterStride<>(static_cast<Eigen::Index>(ostride)));
    if (start) Om.noalias() = Sm.transpose() * Bm;
    else Om.noalias() += Sm.transpose() * Bm;
  };
  HostPool& pool = HostPool::get();
  int parts = max_parts > 0 ? max_parts : pool.threads();
  if (M * N * K < (int64_t{1} << 21) || N < 64) parts = 1;
  auto edge = [&](int q) { return q >= parts ? N : (N * q / parts) / 16 * 16; };
  if (parts > pool.threads()) {  // more pieces than threads (tests): one after another
    for (int p = 0; p < parts; ++p) cols(edge(p), edge(p + 1));
    return;
  }
  pool.run(parts, [&](int p) { cols(edge(p), edge(p + 1)); });
}

namespace {

// ---- tensor engine ----

void exec_load_stationary(const Instr& in, const CoreMemory& mem, const RegFile& regs, TensorEngineState& te) {
  need(in, "src", in.src0);
  mem.read(in.src0, regs, te.stationary);
  te.K = in.src0.parts;
  te.M = in.src0.free_elems();
  te.loaded = true;
}

void exec_multiply_moving(const Instr& in, CoreMemory& mem, const RegFile& regs, const TensorEngineState& te) {
  if (!te.loaded) fail(in, "no stationary matrix loaded (load_stationary first)");
  need(in, "src", in.src0);
  need(in, "dst", in.dst);
  const int64_t K = in.src0.parts, N = in.src0.free_elems();
  if (K != te.K)
    fail(in, "moving src " + shape_text(in.src0) + " has " + std::to_string(K) + " partitions, the stationary K is " +
                 std::to_string(te.K));
  need_shape(in, "dst", in.dst, te.M, N);

  auto& s = scratch();
  mem.read(in.src0, regs, s.a);  // moving [K, N], widened exactly

  int64_t row_stride = 0;
  if (float* d = mem.dense_f32(in.dst, regs, row_stride)) {
    // fp32 PSUM rows: accumulate in place (old + sum of products, in fp32).
    stationary_product(d, row_stride, te.stationary.data(), s.a.data(), K, te.M, N, in.start);
    return;
  }
  // General destination: read the old value as fp32, accumulate, write (rounding to dst dtype).
  if (in.start) s.b.assign(static_cast<size_t>(te.M * N), 0.0f);
  else mem.read(in.dst, regs, s.b);
  stationary_product(s.b.data(), N, te.stationary.data(), s.a.data(), K, te.M, N, false);
  mem.write(in.dst, regs, s.b.data());
}

void exec_transpose(const Instr& in, CoreMemory& mem, const RegFile& regs) {
  need(in, "src", in.src0);
  const int64_t P = in.src0.parts, F = in.src0.free_elems();
  need_shape(in, "dst", in.dst, F, P);
  auto& s = scratch();
  mem.read(in.src0, regs, s.a);
  s.b.resize(static_cast<size_t>(P * F));
  for (int64_t p = 0; p < P; ++p)
    for (int64_t f = 0; f < F; ++f) s.b[static_cast<size_t>(f * P + p)] = s.a[static_cast<size_t>(p * F + f)];
  mem.write(in.dst, regs, s.b.data());
}

// ---- vector engine ----

void exec_tensor_tensor(const Instr& in, CoreMemory& mem, const RegFile& regs) {
  same_shape(in, "dst", in.dst, "src0", in.src0);
  same_shape(in, "dst", in.dst, "src1", in.src1);
  auto& s = scratch();
  mem.read(in.src0, regs, s.a);
  mem.read(in.src1, regs, s.b);
  s.c.resize(s.a.size());
  const size_t n = s.a.size();
  with_alu(in.alu, [&](auto A) {
    for (size_t i = 0; i < n; ++i) s.c[i] = alu_op<A.value>(s.a[i], s.b[i]);
  });
  mem.write(in.dst, regs, s.c.data());
}

void exec_tensor_scalar(const Instr& in, CoreMemory& mem, const RegFile& regs) {
  same_shape(in, "dst", in.dst, "src", in.src0);
  auto& s = scratch();
  mem.read(in.src0, regs, s.a);
  // Each operand an immediate, or a [P,1] value per partition (src1 for the first, aux the second).
  const int64_t P = in.src0.parts, F = in.src0.free_elems();
  std::vector<float> o0(static_cast<size_t>(P), static_cast<float>(in.imm[0])), o1(static_cast<size_t>(P), static_cast<float>(in.imm[1]));
  if (in.src1.present()) {
    need_shape(in, "imm", in.src1, P, 1);
    mem.read(in.src1, regs, o0);
  }
  if (in.aux.present()) {
    need_shape(in, "imm1", in.aux, P, 1);
    mem.read(in.aux, regs, o1);
  }
  with_alu(in.alu, [&](auto A) {
    with_alu(in.alu1, [&](auto A1) {
      for (int64_t p = 0; p < P; ++p) {
        const float a = o0[static_cast<size_t>(p)], b = o1[static_cast<size_t>(p)];
        float* row = s.a.data() + p * F;
        for (int64_t i = 0; i < F; ++i) row[i] = alu_op<A1.value>(alu_op<A.value>(row[i], a), b);
      }
    });
  });
  mem.write(in.dst, regs, s.a.data());
}

void exec_tensor_reduce(const Instr& in, CoreMemory& mem, const RegFile& regs) {
  need(in, "src", in.src0);
  if (!is_reduce_alu(in.alu)) fail(in, "op=" + std::string(alu_name(in.alu)) + " is not a reduction (add, multiply, max, min)");
  const int64_t P = in.src0.parts, F = in.src0.free_elems();
  need_shape(in, "dst", in.dst, P, 1);
  if (F == 0) fail(in, "src has no free elements");
  auto& s = scratch();
  mem.read(in.src0, regs, s.a);
  s.b.resize(static_cast<size_t>(P));
  with_alu(in.alu, [&](auto A) {
    for (int64_t p = 0; p < P; ++p) s.b[static_cast<size_t>(p)] = reduce_row<A.value>(s.a.data() + p * F, F);
  });
  if (in.negate)
    for (auto& v : s.b) v = -v;
  mem.write(in.dst, regs, s.b.data());
}

void exec_tensor_copy(const Instr& in, CoreMemory& mem, const RegFile& regs) {
  same_shape(in, "dst", in.dst, "src", in.src0);
  auto& s = scratch();
  mem.read(in.src0, regs, s.a);
  mem.write(in.dst, regs, s.a.data());
}

void exec_transpose32(const Instr& in, CoreMemory& mem, const RegFile& regs) {
  need(in, "src", in.src0);
  const int64_t P = in.src0.parts, F = in.src0.free_elems();
  auto& s = scratch();
  if (P <= 32 && F <= 32) {  // one (possibly partial) block: dst [F, P]
    need_shape(in, "dst", in.dst, F, P);
    mem.read(in.src0, regs, s.a);
    s.b.resize(static_cast<size_t>(P * F));
    for (int64_t i = 0; i < P; ++i)
      for (int64_t j = 0; j < F; ++j) s.b[static_cast<size_t>(j * P + i)] = s.a[static_cast<size_t>(i * F + j)];
    mem.write(in.dst, regs, s.b.data());
    return;
  }
  if (P % 32 != 0 || F % 32 != 0)
    fail(in, "src " + shape_text(in.src0) + ": partitions and free elements must be multiples of 32 (or one block of at most 32x32)");
  need_shape(in, "dst", in.dst, P, F);
  mem.read(in.src0, regs, s.a);
  s.b.resize(static_cast<size_t>(P * F));
  for (int64_t p0 = 0; p0 < P; p0 += 32)
    for (int64_t f0 = 0; f0 < F; f0 += 32)
      for (int64_t i = 0; i < 32; ++i)
        for (int64_t j = 0; j < 32; ++j)
          s.b[static_cast<size_t>((p0 + j) * F + f0 + i)] = s.a[static_cast<size_t>((p0 + i) * F + f0 + j)];
  mem.write(in.dst, regs, s.b.data());
}

// (count, mean, M2) of x[0..n), two-pass in fp32; empty -> zeros.
void moments(const float* x, int64_t n, float* out3) {
  if (n == 0) {
    out3[0] = out3[1] = out3[2] = 0.0f;
    return;
  }
  float sum = 0.0f;
  for (int64_t i = 0; i < n; ++i) sum += x[i];
  const float mean = sum / static_cast<float>(n);
  float m2 = 0.0f;
  for (int64_t i = 0; i < n; ++i) {
    const float d = x[i] - mean;
    m2 += d * d;
  }
  out3[0] = static_cast<float>(n);
  out3[1] = mean;
  out3[2] = m2;
}

void exec_bn_stats(const Instr& in, CoreMemory& mem, const RegFile& regs) {
  need(in, "src", in.src0);
  const int64_t P = in.src0.parts, F = in.src0.free_elems();
  need_shape(in, "dst", in.dst, P, 6);
  auto& s = scratch();
  mem.read(in.src0, regs, s.a);
  s.b.resize(static_cast<size_t>(P * 6));
  const int64_t n1 = (F + 1) / 2;
  for (int64_t p = 0; p < P; ++p) {
    const float* row = s.a.data() + p * F;
    moments(row, n1, s.b.data() + p * 6);
    moments(row + n1, F - n1, s.b.data() + p * 6 + 3);
  }
  mem.write(in.dst, regs, s.b.data());
}

void exec_bn_aggr(const Instr& in, CoreMemory& mem, const RegFile& regs) {
  need(in, "src", in.src0);
  const int64_t P = in.src0.parts, F = in.src0.free_elems();
  if (F == 0 || F % 6 != 0) fail(in, "src " + shape_text(in.src0) + ": free elements must be a positive multiple of 6 (bn_stats records)");
  need_shape(in, "dst", in.dst, P, 2);
  auto& s = scratch();
  mem.read(in.src0, regs, s.a);
  s.b.resize(static_cast<size_t>(P * 2));
  for (int64_t p = 0; p < P; ++p) {
    const float* row = s.a.data() + p * F;
    float n = 0.0f, mean = 0.0f, m2 = 0.0f;
    for (int64_t g = 0; g < F / 3; ++g) {
      const float nb = row[3 * g], mb = row[3 * g + 1], m2b = row[3 * g + 2];
      if (nb == 0.0f) continue;
      const float nt = n + nb;
      const float delta = mb - mean;
      mean = mean + delta * (nb / nt);
      m2 = m2 + m2b + delta * delta * (n * nb / nt);
      n = nt;
    }
    s.b[static_cast<size_t>(2 * p)] = n > 0.0f ? mean : 0.0f;
    s.b[static_cast<size_t>(2 * p + 1)] = n > 0.0f ? m2 / n : 0.0f;
  }
  mem.write(in.dst, regs, s.b.data());
}

void exec_memset(const Instr& in, CoreMemory& mem, const RegFile& regs) {
  need(in, "dst", in.dst);
  auto& s = scratch();
  s.a.assign(static_cast<size_t>(in.dst.elems()), static_cast<float>(in.imm[0]));
  mem.write(in.dst, regs, s.a.data());
}

void exec_select(const Instr& in, CoreMemory& mem, const RegFile& regs) {
  same_shape(in, "dst", in.dst, "pred", in.src0);
  same_shape(in, "dst", in.dst, "on_true", in.src1);
  same_shape(in, "dst", in.dst, "on_false", in.aux);
  auto& s = scratch();
  mem.read(in.src0, regs, s.a);
  mem.read(in.src1, regs, s.b);
  mem.read(in.aux, regs, s.c);
  for (size_t i = 0; i < s.a.size(); ++i) s.a[i] = s.a[i] != 0.0f ? s.b[i] : s.c[i];
  mem.write(in.dst, regs, s.a.data());
}

// ---- scalar engine ----

void exec_activation(const Instr& in, CoreMemory& mem, const RegFile& regs) {
  same_shape(in, "dst", in.dst, "src", in.src0);
  const int64_t P = in.src0.parts, F = in.src0.free_elems();
  auto& s = scratch();
  mem.read(in.src0, regs, s.a);
  s.b.assign(static_cast<size_t>(P), static_cast<float>(in.imm[1]));
  if (in.src1.present()) {
    need_shape(in, "bias", in.src1, P, 1);
    mem.read(in.src1, regs, s.b);
  }
  const bool acc = in.aux.present();
  if (acc) need_shape(in, "acc", in.aux, P, 1);
  s.c.assign(static_cast<size_t>(P), 0.0f);
  const auto scale = static_cast<float>(in.imm[0]);
  with_func(in.func, [&](auto Fn) {
    for (int64_t p = 0; p < P; ++p) {
      float* row = s.a.data() + p * F;
      const float bias = s.b[static_cast<size_t>(p)];
      float sum = 0.0f;
      for (int64_t i = 0; i < F; ++i) {
        const float y = func_op<Fn.value>(row[i] * scale + bias);
        row[i] = y;
        sum += y;
      }
      s.c[static_cast<size_t>(p)] = sum;
    }
  });
  mem.write(in.dst, regs, s.a.data());
  if (acc) mem.write(in.aux, regs, s.c.data());
}

// ---- gpsimd ----

void exec_iota(const Instr& in, CoreMemory& mem, const RegFile& regs) {
  need(in, "dst", in.dst);
  const int64_t P = in.dst.parts, F = in.dst.free_elems();
  auto& s = scratch();
  s.a.resize(static_cast<size_t>(P * F));
  for (int64_t p = 0; p < P; ++p)
    for (int64_t i = 0; i < F; ++i)
      s.a[static_cast<size_t>(p * F + i)] =
          static_cast<float>(in.imm[0] + in.imm[1] * static_cast<double>(p) + in.imm[2] * static_cast<double>(i));
  mem.write(in.dst, regs, s.a.data());
}

void exec_affine_select(const Instr& in, CoreMemory& mem, const RegFile& regs) {
  same_shape(in, "dst", in.dst, "src", in.src0);
  if (!is_compare_alu(in.alu))
    fail(in, "op=" + std::string(alu_name(in.alu)) + " is not a comparison (is_equal, is_gt, is_ge, is_lt, is_le)");
  const int64_t P = in.dst.parts, F = in.dst.free_elems();
  auto& s = scratch();
  mem.read(in.src0, regs, s.a);
  const auto fill = static_cast<float>(in.imm[3]);
  for (int64_t p = 0; p < P; ++p)
    for (int64_t i = 0; i < F; ++i) {
      const double v = in.imm[0] + in.imm[1] * static_cast<double>(p) + in.imm[2] * static_cast<double>(i);
      bool cond = false;
      switch (in.alu) {
        case Alu::is_equal: cond = v == 0.0; break;
        case Alu::is_gt: cond = v > 0.0; break;
        case Alu::is_ge: cond = v >= 0.0; break;
        case Alu::is_lt: cond = v < 0.0; break;
        default: cond = v <= 0.0; break;  // is_le
      }
      if (!cond) s.a[static_cast<size_t>(p * F + i)] = fill;
    }
  mem.write(in.dst, regs, s.a.data());
}

void exec_gather(const Instr& in, CoreMemory& mem, const RegFile& regs) {
  need(in, "table", in.src0);
  same_shape(in, "dst", in.dst, "indices", in.src1);
  if (in.src0.parts != in.src1.parts)
    fail(in, "table " + shape_text(in.src0) + " and indices " + shape_text(in.src1) + " differ in partitions");
  const int64_t P = in.src1.parts, F = in.src1.free_elems(), T = in.src0.free_elems();
  auto& s = scratch();
  mem.read(in.src0, regs, s.a);
  mem.read(in.src1, regs, s.b);
  s.c.resize(static_cast<size_t>(P * F));
  for (int64_t p = 0; p < P; ++p)
    for (int64_t i = 0; i < F; ++i) {
      const float x = s.b[static_cast<size_t>(p * F + i)];
      if (!(x >= 0.0f && x < static_cast<float>(T)) || x != std::floor(x))
        fail(in, "index " + std::to_string(x) + " at [" + std::to_string(p) + ", " + std::to_string(i) +
                     "] is outside the table's free range [0, " + std::to_string(T) + ")");
      s.c[static_cast<size_t>(p * F + i)] = s.a[static_cast<size_t>(p * T + static_cast<int64_t>(x))];
    }
  mem.write(in.dst, regs, s.c.data());
}

void exec_partition_all_reduce(const Instr& in, CoreMemory& mem, const RegFile& regs) {
  same_shape(in, "dst", in.dst, "src", in.src0);
  if (!is_reduce_alu(in.alu)) fail(in, "op=" + std::string(alu_name(in.alu)) + " is not a reduction (add, multiply, max, min)");
  const int64_t P = in.src0.parts, F = in.src0.free_elems();
  auto& s = scratch();
  mem.read(in.src0, regs, s.a);
  s.b.assign(s.a.begin(), s.a.begin() + F);  // row 0
  with_alu(in.alu, [&](auto A) {
    for (int64_t q = 1; q < P; ++q)
      for (int64_t i = 0; i < F; ++i)
        s.b[static_cast<size_t>(i)] = alu_op<A.value>(s.b[static_cast<size_t>(i)], s.a[static_cast<size_t>(q * F + i)]);
  });
  for (int64_t p = 0; p < P; ++p) std::copy(s.b.begin(), s.b.begin() + F, s.a.begin() + p * F);
  mem.write(in.dst, regs, s.a.data());
}

// ---- dma ----

void exec_dma(const Instr& in, CoreMemory& mem, const RegFile& regs) {
  need(in, "dst", in.dst);
  need(in, "src", in.src0);
  if (in.dst.elems() != in.src0.elems())
    fail(in, "dst " + shape_text(in.dst) + " and src " + shape_text(in.src0) + " differ in element count");
  if (in.dst.dtype == in.src0.dtype) {
    mem.copy(in.dst, in.src0, regs);
    return;
  }
  auto& s = scratch();
  mem.read(in.src0, regs, s.a);
  mem.write(in.dst, regs, s.a.data());
}

}  // namespace

float apply_alu(Alu a, float x, float y) {
  float r = 0.0f;
  with_alu(a, [&](auto A) { r = alu_op<A.value>(x, y); });
  return r;
}

float apply_func(Func f, float x) {
  float r = 0.0f;
  with_func(f, [&](auto Fn) { r = func_op<Fn.value>(x); });
  return r;
}

void execute(const Instr& in, CoreMemory& mem, const RegFile& regs, TensorEngineState& te) {
  switch (in.op) {
    case Op::load_stationary: exec_load_stationary(in, mem, regs, te); return;
    case Op::multiply_moving: exec_multiply_moving(in, mem, regs, te); return;
    case Op::transpose: exec_transpose(in, mem, regs); return;
    case Op::tensor_tensor: exec_tensor_tensor(in, mem, regs); return;
    case Op::tensor_scalar: exec_tensor_scalar(in, mem, regs); return;
    case Op::tensor_reduce: exec_tensor_reduce(in, mem, regs); return;
    case Op::tensor_copy: exec_tensor_copy(in, mem, regs); return;
    case Op::transpose32: exec_transpose32(in, mem, regs); return;
    case Op::bn_stats: exec_bn_stats(in, mem, regs); return;
    case Op::bn_aggr: exec_bn_aggr(in, mem, regs); return;
    case Op::memset: exec_memset(in, mem, regs); return;
    case Op::select: exec_select(in, mem, regs); return;
    case Op::activation: exec_activation(in, mem, regs); return;
    case Op::iota: exec_iota(in, mem, regs); return;
    case Op::affine_select: exec_affine_select(in, mem, regs); return;
    case Op::gather: exec_gather(in, mem, regs); return;
    case Op::partition_all_reduce: exec_partition_all_reduce(in, mem, regs); return;
    case Op::dma: exec_dma(in, mem, regs); return;
    // Control, sync and nop: no data effect here (the model sequences them).
    case Op::nop:
    case Op::sem_wait:
    case Op::sem_signal:
    case Op::step_marker:
    case Op::set_reg:
    case Op::add_reg:
    case Op::dec_branch_nz:
    case Op::branch_nz:
    case Op::jump:
    case Op::halt:
      return;
  }
}

}  // namespace tessera::neuroncore
