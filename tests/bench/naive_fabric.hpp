#pragma once
// A naive baseline for bench_wafer_fabric: the row-stream workload written the way a first
// SystemC model would be -- one sc_module with one SC_METHOD per PE (its router included),
// wavelets held in std::deque buffers and handed on by timed sc_event notifications, the cycle
// read from sc_time_stamp() over a fixed clock period. It models the same timing as models/wafer
// for this workload (docs/wafer-model.md): the sender's DSD op starts after dsd.setup_cycles and pushes up to
// `width` wavelets per cycle into its output queue (readable by the router one cycle later), each
// router forwards one wavelet per cycle per link if the receiving buffer (router.buffer_depth) or
// input queue has room, a hop takes router.hop_latency cycles, a RAMP delivery one, the receiver's
// microthread pops up to `width` per cycle into SRAM (a vector here), then its `done` task halts.
// Hop counting matches FabricStats: injections (PE -> router), router -> router links, deliveries.
#include <cstdint>
#include <deque>
#include <memory>
#include <systemc>
#include <vector>

#include "isa/wafer/isa.hpp"

namespace tessera::bench {

class NaiveRowFabric {
 public:
  struct Wv {
    uint32_t payload;
    int64_t ready;  // first cycle it may leave
  };
  struct Counters {
    int64_t injections = 0, hops = 0, deliveries = 0, activations = 0;
    int64_t end_cycle = 0;  // last halt (absolute)
  };
  class Pe;

  // side x side PEs; every row streams n fp32 wavelets (payload `value`) from x = 0 to x = side-1.
  // send_width / recv_width: elements per cycle of the sender's and receiver's DSD ops.
  NaiveRowFabric(const wafer::WaferConfig& cfg, int side, int n, float value, int send_width, int recv_width);
  ~NaiveRowFabric();
  void start();  // kicks a run at the current SystemC time; then sc_start()
  const Counters& counters() const { return ctr_; }
  int64_t start_cycle() const { return c0_; }
  bool complete() const;                // every receiver got n wavelets and halted
  double received_sum() const;          // sum of all received payloads (as fp32)

 private:
  friend class Pe;
  std::vector<Pe*> pes_;
  Counters ctr_;
  uint64_t period_fs_;
  sc_core::sc_time period_;
  int64_t c0_ = 0;
};

}  // namespace tessera::bench
