// The naive baseline (naive_fabric.hpp): one sc_module + SC_METHOD per PE, wavelets through
// std::deque buffers and timed sc_event notifications.
#include "tests/bench/naive_fabric.hpp"

#include <string>

#include "isa/numeric.hpp"

namespace tessera::bench {

class NaiveRowFabric::Pe : public sc_core::sc_module {
 public:
  enum class Role { sender, relay, receiver };
  SC_HAS_PROCESS(Pe);
  Pe(sc_core::sc_module_name name, NaiveRowFabric& fab, const wafer::WaferConfig& cfg, Role role, int n, float value, int width)
      : sc_core::sc_module(name), fab_(fab), role_(role), n_(n), width_(width), payload_(float_bits(value)),
        setup_(cfg.setup_cycles), hop_(cfg.hop_latency), buf_depth_(static_cast<size_t>(cfg.buffer_depth)),
        out_depth_(static_cast<size_t>(cfg.output_depth.at(2))), in_depth_(static_cast<size_t>(cfg.input_depth.at(1))) {
    SC_METHOD(step);
    sensitive << wake_;
    dont_initialize();
  }

  Pe* east = nullptr;
  Pe* west = nullptr;

  void reset(int64_t c0) {
    c0_ = c0;
    done_ = 0;
    halted_ = false;
    halt_cycle_ = -1;
    outq_.clear();
    buf_w_.clear();
    inq_.clear();
    y_.assign(role_ == Role::receiver ? static_cast<size_t>(n_) : 0, 0.0f);
    if (role_ != Role::relay) notify_at(c0);  // the PEs with a program start their task
  }
  bool finished() const { return role_ == Role::relay || (halted_ && done_ == n_); }
  int64_t halt_cycle() const { return halt_cycle_; }
  double sum() const {
    double s = 0;
    for (float v : y_) s += v;
    return s;
  }

 private:
  // A fixed clock period (whole femtoseconds); every notification lands on a cycle boundary.
  int64_t now_cycle() const { return static_cast<int64_t>(sc_core::sc_time_stamp().value() / fab_.period_fs_); }
  void notify_at(int64_t cycle) { wake_.notify(fab_.period_ * static_cast<double>(cycle - now_cycle())); }

  void step() {
    const int64_t t = now_cycle();
    ++fab_.ctr_.activations;
    int64_t next = INT64_MAX;
    // The PE (before its router, as in the fabric model's calendar).
    if (role_ == Role::sender && done_ < n_) {
      // fmovs out, xm: issued at c0, elements from c0 + setup, `width` per cycle into output queue 2.
      if (t >= c0_ + setup_) {
        for (int k = 0; k < width_ && done_ < n_ && outq_.size() < out_depth_; ++k) {
          outq_.push_back({payload_, t + 1});
          ++done_;
        }
        if (done_ == n_) {  // op done at t + 1, then `halt` takes one cycle
          halted_ = true;
          halt_cycle_ = t + 2;
          fab_.ctr_.end_cycle = std::max(fab_.ctr_.end_cycle, halt_cycle_);
        } else if (outq_.size() < out_depth_) {
          next = std::min(next, t + 1);
        }  // else: woken when the router drains the queue
      } else {
        next = std::min(next, c0_ + setup_);
      }
    }
    if (role_ == Role::receiver && !halted_) {
      // fmovs ym, in async activate=done: a microthread from c0 + setup, then task `done`: halt.
      if (t >= c0_ + setup_) {
        int k = 0;
        for (; k < width_ && done_ < n_ && !inq_.empty() && inq_.front().ready <= t; ++k) {
          y_[static_cast<size_t>(done_++)] = bits_float(inq_.front().payload);
          inq_.pop_front();
        }
        if (done_ == n_) {  // the microthread activates `done`, which the main thread picks at once
          halted_ = true;
          halt_cycle_ = t + 1;
          fab_.ctr_.end_cycle = std::max(fab_.ctr_.end_cycle, halt_cycle_);
        } else if (!inq_.empty()) {
          next = std::min(next, std::max(t + 1, inq_.front().ready));
        }
      } else {
        next = std::min(next, c0_ + setup_);
      }
    }
    // The router: one input (the output queue at the sender, the west buffer elsewhere), one link.
    std::deque<Wv>& in = role_ == Role::sender ? outq_ : buf_w_;
    if (!in.empty()) {
      const Wv w = in.front();
      if (w.ready <= t) {
        bool sent = false;
        if (role_ == Role::receiver) {  // RAMP: into input queue 1, readable next cycle
          if (inq_.size() < in_depth_) {
            inq_.push_back({w.payload, t + 1});
            ++fab_.ctr_.deliveries;
            next = std::min(next, t + 1);
            sent = true;
          }
        } else if (east->buf_w_.size() < buf_depth_) {  // E: into the east router's west buffer
          east->buf_w_.push_back({w.payload, t + hop_});
          east->notify_at(t + hop_);
          if (role_ == Role::sender) ++fab_.ctr_.injections;
          ++fab_.ctr_.hops;
          sent = true;
        }
        if (sent) {
          in.pop_front();
          if (role_ == Role::sender) {
            next = std::min(next, t + 1);  // room in the output queue
          } else {
            west->notify_at(t + 1);  // room in our west buffer
          }
          if (!in.empty()) next = std::min(next, std::max(t + 1, in.front().ready));
        }  // else: woken when the receiving side frees room
      } else {
        next = std::min(next, w.ready);
      }
    }
    if (next != INT64_MAX) notify_at(next);
  }

  NaiveRowFabric& fab_;
  Role role_;
  int n_, width_;
  uint32_t payload_;
  int64_t setup_, hop_;
  size_t buf_depth_, out_depth_, in_depth_;
  sc_core::sc_event wake_;
  int64_t c0_ = 0, halt_cycle_ = -1;
  int done_ = 0;
  bool halted_ = false;
  std::deque<Wv> outq_, buf_w_, inq_;
  std::vector<float> y_;
};

NaiveRowFabric::NaiveRowFabric(const wafer::WaferConfig& cfg, int side, int n, float value, int send_width, int recv_width)
    : period_fs_(static_cast<uint64_t>(1e15 / cfg.clock_hz + 0.5)), period_(sc_core::sc_time::from_value(period_fs_)) {
  pes_.reserve(static_cast<size_t>(side) * static_cast<size_t>(side));
  for (int y = 0; y < side; ++y)
    for (int x = 0; x < side; ++x) {
      const auto role = x == 0 ? Pe::Role::sender : x == side - 1 ? Pe::Role::receiver : Pe::Role::relay;
      const std::string name = "naive" + std::to_string(side) + "_pe_" + std::to_string(x) + "_" + std::to_string(y);
      pes_.push_back(new Pe(name.c_str(), *this, cfg, role, n, value, role == Pe::Role::sender ? send_width : recv_width));
    }
  for (int y = 0; y < side; ++y)
    for (int x = 0; x < side; ++x) {
      Pe* p = pes_[static_cast<size_t>(y * side + x)];
      if (x + 1 < side) p->east = pes_[static_cast<size_t>(y * side + x + 1)];
      if (x > 0) p->west = pes_[static_cast<size_t>(y * side + x - 1)];
    }
}

// The modules live until the process ends (SystemC's teardown of many modules is O(n^2)).
NaiveRowFabric::~NaiveRowFabric() = default;

void NaiveRowFabric::start() {
  const uint64_t now = sc_core::sc_time_stamp().value();
  c0_ = static_cast<int64_t>((now + period_fs_ - 1) / period_fs_);
  ctr_ = Counters{};
  for (Pe* p : pes_) p->reset(c0_);
}

bool NaiveRowFabric::complete() const {
  for (const Pe* p : pes_)
    if (!p->finished()) return false;
  return true;
}

double NaiveRowFabric::received_sum() const {
  double s = 0;
  for (const Pe* p : pes_) s += p->sum();
  return s;
}

}  // namespace tessera::bench
