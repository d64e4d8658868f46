#include "models/wafer/weight_stream.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "isa/error.hpp"

namespace tessera::wafer {

using sc_core::sc_time;

namespace {
sc_time seconds(double s) { return sc_time(s, sc_core::SC_SEC); }
}  // namespace

const char* transfer_kind_name(StreamTransfer::Kind k) {
  switch (k) {
    case StreamTransfer::read: return "read";
    case StreamTransfer::write: return "write";
    case StreamTransfer::update: return "update";
    case StreamTransfer::broadcast: return "broadcast";
    default: return "reduce";
  }
}

MemoryX::MemoryX(sc_core::sc_module_name name, const WaferConfig& cfg) : sc_module(name), socket("socket"), cfg_(cfg) {
  socket.register_b_transport(this, &MemoryX::b_transport);
}

uint64_t MemoryX::add_tensor(const std::string& name, std::vector<float> values) {
  if (tensors_.count(name)) throw InputError("MemoryX tensor '" + name + "'", "is declared twice");
  const double bytes = static_cast<double>(mem_.size() + values.size()) * 4.0;
  if (bytes > cfg_.memoryx_capacity)
    throw InputError("MemoryX tensor '" + name + "'", "needs " + std::to_string(static_cast<int64_t>(bytes)) + " bytes of MemoryX; it holds " +
                                                         std::to_string(static_cast<int64_t>(cfg_.memoryx_capacity)),
                     "raise target.params memoryx.capacity or stream smaller tensors");
  const uint64_t addr = mem_.size() * 4;
  tensors_[name] = {addr, values.size()};
  mem_.insert(mem_.end(), values.begin(), values.end());
  vel_.resize(mem_.size(), 0.0f);
  vel2_.resize(mem_.size(), 0.0f);
  return addr;
}

// A tensor's slice of one of MemoryX's parallel arrays (the values, the velocities or first
// moments, the second moments), read or written.
std::vector<float> MemoryX::slice(const std::vector<float>& a, const std::string& name) const {
  const auto& [addr, n] = tensors_.at(name);
  return {a.begin() + static_cast<std::ptrdiff_t>(addr / 4), a.begin() + static_cast<std::ptrdiff_t>(addr / 4 + n)};
}

void MemoryX::set_slice(std::vector<float>& a, const std::string& name, const std::vector<float>& v) {
  const auto& [addr, n] = tensors_.at(name);
  if (v.size() != n) throw std::logic_error("MemoryX: " + std::to_string(v.size()) + " state values for '" + name + "' of " + std::to_string(n));
  std::copy(v.begin(), v.end(), a.begin() + static_cast<std::ptrdiff_t>(addr / 4));
}

void MemoryX::b_transport(tlm::tlm_generic_payload& p, sc_time& delay) {
  const bool update = p.get_address() >= kUpdateWindow;
  const uint64_t addr = update ? p.get_address() - kUpdateWindow : p.get_address();
  const uint64_t n = p.get_data_length();
  if (addr % 4 || n % 4 || addr + n > mem_.size() * 4 || (update && !p.is_write())) {
    p.set_response_status(tlm::TLM_ADDRESS_ERROR_RESPONSE);
    return;
  }
  // One transfer at a time on the store's port (bytes / bandwidth); the latency is pipelined: a
  // transaction completes memoryx.latency after its transfer, while the next one already moves.
  const sc_time arrive = sc_core::sc_time_stamp() + delay;
  const sc_time start = std::max(arrive, busy_until_);
  busy_until_ = start + seconds(static_cast<double>(n) / cfg_.memoryx_bandwidth);
  const sc_time done = busy_until_ + seconds(cfg_.memoryx_latency);
  delay = done - sc_core::sc_time_stamp();
  float* m = mem_.data() + addr / 4;
  if (p.is_read()) {
    std::memcpy(p.get_data_ptr(), m, n);
    stats_.bytes_read += static_cast<int64_t>(n);
  } else if (!update) {
    std::memcpy(m, p.get_data_ptr(), n);
    stats_.bytes_written += static_cast<int64_t>(n);
  } else {
    std::vector<float> g(n / 4);
    std::memcpy(g.data(), p.get_data_ptr(), n);
    if (accumulate_ || !gsum_.empty()) {  // micro-batches: the sum of the step's gradients so far
      if (gsum_.empty()) gsum_.assign(mem_.size(), 0.0f);
      float* s = gsum_.data() + addr / 4;
      for (size_t i = 0; i < g.size(); ++i) s[i] = s[i] + g[i];
      if (accumulate_) {
        stats_.bytes_written += static_cast<int64_t>(n);
        ++stats_.transactions;
        log_.push_back({StreamTransfer::update, start, busy_until_, static_cast<int64_t>(n), done});
        p.set_response_status(tlm::TLM_OK_RESPONSE);
        return;
      }
      for (size_t i = 0; i < g.size(); ++i) g[i] = s[i], s[i] = 0.0f;
    }
    const float lr = static_cast<float>(lr_), mu = static_cast<float>(mu_), wd = static_cast<float>(wd_);
    if (gscale_ != 1) {  // loss scaling: g / S, as the reference graph divides
      const float s = static_cast<float>(gscale_);
      for (float& v : g) v = v / s;
    }
    if (!apply_) g.clear();  // a skipped step: the gradient is taken, nothing changes
    if (wd_ != 0)  // weight decay: g + w wd, rounded as the reference graph's Mul and Add
      for (size_t i = 0; i < g.size(); ++i) {
        const float d = m[i] * wd;
        g[i] = g[i] + d;
      }
    if (adam_) {  // each fp32 operation rounded as the reference graph's (no FMA)
      float* mm = vel_.data() + addr / 4;
      float* vv = vel2_.data() + addr / 4;
      const float b1 = static_cast<float>(b1_), b2 = static_cast<float>(b2_), c1 = static_cast<float>(1 - b1_), c2 = static_cast<float>(1 - b2_);
      const float e = static_cast<float>(eps_), t = static_cast<float>(adam_t_);
      const float bc1 = 1.0f - static_cast<float>(std::pow(static_cast<double>(b1), static_cast<double>(t)));
      const float bc2 = 1.0f - static_cast<float>(std::pow(static_cast<double>(b2), static_cast<double>(t)));
      for (size_t i = 0; i < g.size(); ++i) {
        const float ma = mm[i] * b1, mb = g[i] * c1;
        mm[i] = ma + mb;
        const float gg = g[i] * g[i], vb = gg * c2, va = vv[i] * b2;
        vv[i] = va + vb;
        const float mh = mm[i] / bc1, vh = vv[i] / bc2;
        const float num = mh * lr, den = std::sqrt(vh) + e;
        m[i] = m[i] - num / den;
      }
    } else if (mu_ == 0) {
      for (size_t i = 0; i < g.size(); ++i) m[i] = m[i] - lr * g[i];
    } else {  // in the order torch's SGD (and the reference graph) rounds: v mu, + g; v lr, w -
      float* v = vel_.data() + addr / 4;
      for (size_t i = 0; i < g.size(); ++i) {
        const float vm = v[i] * mu;
        v[i] = vm + g[i];
        const float step = v[i] * lr;
        m[i] = m[i] - step;
      }
    }
    stats_.bytes_written += static_cast<int64_t>(n);
    ++stats_.updates;
  }
  ++stats_.transactions;
  log_.push_back({p.is_read() ? StreamTransfer::read : update ? StreamTransfer::update : StreamTransfer::write, start, busy_until_,
                  static_cast<int64_t>(n), done});
  p.set_response_status(tlm::TLM_OK_RESPONSE);
}

SwarmX::SwarmX(sc_core::sc_module_name name, const WaferConfig& cfg) : sc_module(name), socket("socket"), cfg_(cfg) {}

sc_time SwarmX::transact(tlm::tlm_command cmd, uint64_t addr, float* data, int64_t n, sc_time t) {
  tlm::tlm_generic_payload p;
  p.set_command(cmd);
  p.set_address(addr);
  p.set_data_ptr(reinterpret_cast<unsigned char*>(data));
  p.set_data_length(static_cast<unsigned>(n * 4));
  p.set_streaming_width(static_cast<unsigned>(n * 4));
  p.set_byte_enable_ptr(nullptr);
  p.set_dmi_allowed(false);
  p.set_response_status(tlm::TLM_INCOMPLETE_RESPONSE);
  sc_time delay = t - sc_core::sc_time_stamp();
  socket->b_transport(p, delay);
  if (p.is_response_error())
    throw std::logic_error("MemoryX refused a SwarmX transaction at " + std::to_string(addr) + ": " + p.get_response_string());
  return sc_core::sc_time_stamp() + delay;
}

SwarmX::Stream SwarmX::broadcast(uint64_t addr, int64_t count, sc_time t0) {
  Stream s;
  s.values.resize(static_cast<size_t>(count));
  s.ready.resize(static_cast<size_t>(count));
  const int64_t per = std::max<int64_t>(1, cfg_.memoryx_burst / 4);
  for (int64_t i = 0; i < count; i += per) {
    const int64_t n = std::min(per, count - i);
    // MemoryX transfers the burst; the tree passes it on behind the previous one.
    const sc_time got = transact(tlm::TLM_READ_COMMAND, addr + static_cast<uint64_t>(i) * 4, s.values.data() + i, n, t0);
    const sc_time start = std::max(got, tree_busy_);
    tree_busy_ = start + seconds(static_cast<double>(n * 4) / cfg_.swarmx_bandwidth);
    const sc_time at = tree_busy_ + seconds(cfg_.swarmx_latency);
    log_.push_back({StreamTransfer::broadcast, start, tree_busy_, n * 4, at});
    std::fill(s.ready.begin() + i, s.ready.begin() + i + n, at);
    stats_.bytes_broadcast += n * 4;
  }
  return s;
}

sc_time SwarmX::reduce_update(uint64_t addr, const std::vector<std::vector<float>>& streams, sc_time t0) {
  if (streams.empty()) return t0;
  const size_t n = streams.front().size();
  std::vector<float> sum(n, 0.0f);
  for (const auto& st : streams) {
    if (st.size() != n) throw std::logic_error("SwarmX::reduce_update: streams of different lengths");
    for (size_t i = 0; i < n; ++i) sum[i] += st[i];
  }
  // The tree sums as the streams pass (one pass of the reduced bytes), then MemoryX applies it.
  const sc_time start = std::max(t0, tree_busy_);
  tree_busy_ = start + seconds(static_cast<double>(n * 4) / cfg_.swarmx_bandwidth);
  const sc_time at = tree_busy_ + seconds(cfg_.swarmx_latency);
  log_.push_back({StreamTransfer::reduce, start, tree_busy_, static_cast<int64_t>(n * 4 * streams.size()), at});
  stats_.bytes_reduced += static_cast<int64_t>(n * 4 * streams.size());
  sc_time done = at;
  const int64_t per = std::max<int64_t>(1, cfg_.memoryx_burst / 4);
  for (int64_t i = 0; i < static_cast<int64_t>(n); i += per) {
    const int64_t k = std::min<int64_t>(per, static_cast<int64_t>(n) - i);
    done = transact(tlm::TLM_WRITE_COMMAND, MemoryX::kUpdateWindow + addr + static_cast<uint64_t>(i) * 4, sum.data() + i, k, at);
  }
  return done;
}

}  // namespace tessera::wafer
