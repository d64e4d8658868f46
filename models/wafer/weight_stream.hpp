#pragma once
// MemoryX and SwarmX (docs/wafer-model.md, "Weight streaming"): the off-wafer weight store and the
// broadcast/reduce tree between it and the fabric's edge ports, as SystemC modules connected by
// TLM-2.0 (blocking transport, loosely timed: each transaction returns with its delay annotated,
// nothing waits). wafer.md "Execution modes": MemoryX holds the fp32 master weights and applies
// the optimizer; SwarmX broadcasts weight streams to the wafer and sums gradient streams on the
// way back.
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <systemc>
#include <tlm>
#include <tlm_utils/simple_initiator_socket.h>
#include <tlm_utils/simple_target_socket.h>

#include "isa/wafer/isa.hpp"

namespace tessera::wafer {

// One transfer through MemoryX or the SwarmX tree (for traces and bandwidth figures): the store
// or tree busy from `start` to `end` moving `bytes`; the data is there at `done` (after the
// pipelined latency).
struct StreamTransfer {
  enum Kind : uint8_t { read, write, update, broadcast, reduce };
  Kind kind;
  sc_core::sc_time start, end;
  int64_t bytes;
  sc_core::sc_time done;
};
const char* transfer_kind_name(StreamTransfer::Kind k);

// The weight store: fp32 tensors at byte addresses. One transfer at a time, in arrival order; a
// transaction of n bytes that arrives at t occupies the store from s = max(t, busy) for
// n / memoryx.bandwidth and completes memoryx.latency after that (the latency is pipelined:
// bursts of one stream follow each other at the bandwidth). Reads and writes below kUpdateWindow move data; a write at
// kUpdateWindow + a is a gradient for the weights at a: MemoryX applies its optimizer as part of
// the write, in fp32: SGD w -= learning_rate * g; with momentum mu (torch.optim.SGD's, no
// dampening) v = mu v + g, w -= learning_rate * v, the velocity v kept in MemoryX beside w; with
// weight decay wd the gradient is g + w wd first (torch.optim.SGD's weight_decay).
class MemoryX : public sc_core::sc_module {
 public:
  static constexpr uint64_t kUpdateWindow = uint64_t{1} << 62;
  tlm_utils::simple_target_socket<MemoryX> socket;

  MemoryX(sc_core::sc_module_name name, const WaferConfig& cfg);
  // Host side (between runs): a named tensor of fp32 values; returns its address. Throws
  // InputError when memoryx.capacity would be exceeded or the name is taken.
  uint64_t add_tensor(const std::string& name, std::vector<float> values);
  bool has(const std::string& name) const { return tensors_.count(name) != 0; }
  uint64_t address(const std::string& name) const { return tensors_.at(name).first; }
  int64_t count(const std::string& name) const { return static_cast<int64_t>(tensors_.at(name).second); }
  std::vector<float> values(const std::string& name) const { return slice(mem_, name); }
  void set_sgd(double learning_rate, double momentum = 0, double weight_decay = 0) {
    lr_ = learning_rate;
    mu_ = momentum;
    wd_ = weight_decay;
  }
  // Adam (torch.optim.Adam, L2 weight decay added to the gradient first), in the reference graph's
  // fp32 operations: m = m b1 + g (1 - b1), v = v b2 + g^2 (1 - b2), w -= (m / bc1 lr) /
  // (sqrt(v / bc2) + eps) with bc = 1 - b^t; m is velocity()'s storage, v second_moment()'s; t, the
  // number of the update (1-based), is set before each step's gradients.
  void set_adam(double learning_rate, double beta1, double beta2, double eps, double weight_decay) {
    adam_ = true;
    lr_ = learning_rate, b1_ = beta1, b2_ = beta2, eps_ = eps, wd_ = weight_decay;
  }
  void set_adam_step(int64_t t) { adam_t_ = t; }
  // A learning-rate schedule: the rate of the gradients that arrive next.
  void set_learning_rate(double lr) { lr_ = lr; }
  std::vector<float> second_moment(const std::string& name) const { return slice(vel2_, name); }
  void set_second_moment(const std::string& name, const std::vector<float>& v) { set_slice(vel2_, name, v); }
  // Dynamic loss scaling: the gradients that arrive next are divided by `scale` (S) before the
  // optimizer, or, when `apply` is false (a gradient of the step was not finite), taken without
  // changing the weights or their velocities.
  void set_gradient_scale(double scale, bool apply) {
    gscale_ = scale;
    apply_ = apply;
  }
  // Gradient accumulation (micro-batches): while `on`, the gradients that arrive are added to a
  // sum per weight (fp32, in arrival order) and nothing is updated; the next gradient after it is
  // added to the sum, which the optimizer then applies (and starts again from 0).
  void set_accumulate(bool on) { accumulate_ = on; }
  // The optimizer state of a tensor (the momentum's velocity; zeros until the first update).
  std::vector<float> velocity(const std::string& name) const { return slice(vel_, name); }
  void set_velocity(const std::string& name, const std::vector<float>& v) { set_slice(vel_, name, v); }

  struct Stats {
    int64_t bytes_read = 0, bytes_written = 0, updates = 0, transactions = 0;
  };
  const Stats& stats() const { return stats_; }
  const std::vector<StreamTransfer>& transfers() const { return log_; }  // in service order

 private:
  void b_transport(tlm::tlm_generic_payload& p, sc_core::sc_time& delay);
  const WaferConfig& cfg_;
  std::vector<float> mem_;                                      // all tensors, fp32
  std::vector<float> vel_;                                      // their velocities (momentum)
  std::map<std::string, std::pair<uint64_t, size_t>> tensors_;  // name -> (address, count)
  std::vector<float> slice(const std::vector<float>& a, const std::string& name) const;
  void set_slice(std::vector<float>& a, const std::string& name, const std::vector<float>& v);
  double lr_ = 0, mu_ = 0, wd_ = 0, gscale_ = 1, b1_ = 0.9, b2_ = 0.999, eps_ = 1e-8;
  bool apply_ = true, adam_ = false, accumulate_ = false;
  std::vector<float> gsum_;  // the gradients summed over micro-batches (empty until the first)
  int64_t adam_t_ = 1;
  std::vector<float> vel2_;  // Adam's second moments
  sc_core::sc_time busy_until_ = sc_core::SC_ZERO_TIME;
  Stats stats_;
  std::vector<StreamTransfer> log_;
};

// The broadcast/reduce tree. Its bursts (memoryx.burst_bytes) pass the tree in swarmx.latency
// plus bytes / swarmx.bandwidth, pipelined behind the MemoryX transfers.
class SwarmX : public sc_core::sc_module {
 public:
  tlm_utils::simple_initiator_socket<SwarmX> socket;
  SwarmX(sc_core::sc_module_name name, const WaferConfig& cfg);

  // A weight stream: `count` fp32 values read from MemoryX at `addr`, burst by burst from time
  // `t0`; `ready[i]` is when value i reaches the edge ports (every port gets the same stream).
  struct Stream {
    std::vector<float> values;
    std::vector<sc_core::sc_time> ready;
  };
  Stream broadcast(uint64_t addr, int64_t count, sc_core::sc_time t0);
  // A gradient: the elementwise fp32 sum of `streams` (in order), which are complete at `t0`,
  // written to MemoryX's update window for the weights at `addr`. Returns when the update is done.
  sc_core::sc_time reduce_update(uint64_t addr, const std::vector<std::vector<float>>& streams, sc_core::sc_time t0);

  struct Stats {
    int64_t bytes_broadcast = 0, bytes_reduced = 0;
  };
  const Stats& stats() const { return stats_; }
  const std::vector<StreamTransfer>& transfers() const { return log_; }  // tree passes, in order

 private:
  // One transaction to MemoryX at time t; returns its completion time.
  sc_core::sc_time transact(tlm::tlm_command cmd, uint64_t addr, float* data, int64_t n, sc_core::sc_time t);
  const WaferConfig& cfg_;
  sc_core::sc_time tree_busy_ = sc_core::SC_ZERO_TIME;
  Stats stats_;
  std::vector<StreamTransfer> log_;
};

}  // namespace tessera::wafer
