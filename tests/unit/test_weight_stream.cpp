// MemoryX and SwarmX (models/wafer/weight_stream.hpp): TLM-2.0 transactions and their timing
// contracts, written from the documented formulas (a transaction of n bytes takes
// memoryx.latency + n / memoryx.bandwidth, one at a time; SwarmX passes each burst on in
// n / swarmx.bandwidth behind the previous one, plus swarmx.latency), and the SGD update.
#include <catch2/catch.hpp>

#include <systemc>

#include "isa/error.hpp"
#include "models/common/clock.hpp"
#include "models/wafer/weight_stream.hpp"

using namespace tessera;
using namespace tessera::wafer;
using Catch::Matchers::Contains;
using sc_core::sc_time;

namespace {

WaferConfig config() {
  WaferConfig c = preset_config("wse2");
  c.memoryx_bandwidth = 1e9;   // 1 byte per ns
  c.memoryx_latency = 100e-9;  // 100 ns
  c.memoryx_burst = 64;        // 16 floats per transaction
  c.swarmx_bandwidth = 2e9;    // 2 bytes per ns
  c.swarmx_latency = 50e-9;
  c.memoryx_capacity = 4096;
  return c;
}

struct Top {
  WaferConfig cfg = config();
  MemoryX mx{"memoryx", cfg};
  SwarmX sx{"swarmx", cfg};
  Top() {
    models::set_fs_resolution();
    sx.socket.bind(mx.socket);
  }
};

double ns(const sc_time& t) { return t.to_seconds() * 1e9; }

}  // namespace

TEST_CASE("weight-stream: a broadcast arrives burst by burst: MemoryX one transfer at a time, SwarmX pipelined behind", "[weight-stream]") {
  Top t;
  std::vector<float> w(40);
  for (size_t i = 0; i < w.size(); ++i) w[i] = 0.5f * static_cast<float>(i);
  const uint64_t a = t.mx.add_tensor("W", w);
  const SwarmX::Stream s = t.sx.broadcast(a, 40, sc_core::SC_ZERO_TIME);
  REQUIRE(s.values == w);
  // Bursts of 16, 16, 8 floats (64, 64, 32 bytes). MemoryX moves them one after another at 1 byte
  // per ns (0-64, 64-128, 128-160) and each completes 100 ns (latency) after its transfer: 164,
  // 228, 260. SwarmX: each burst passes in bytes/2 ns once MemoryX has it and the tree is free,
  // then 50 ns of latency: 164 + 32 + 50 = 246, 228 + 32 + 50 = 310, 260 + 16 + 50 = 326.
  CHECK(ns(s.ready[0]) == Approx(246));
  CHECK(ns(s.ready[15]) == Approx(246));
  CHECK(ns(s.ready[16]) == Approx(310));
  CHECK(ns(s.ready[39]) == Approx(326));
  CHECK(t.mx.stats().transactions == 3);
  CHECK(t.mx.stats().bytes_read == 160);
  CHECK(t.sx.stats().bytes_broadcast == 160);
}

TEST_CASE("weight-stream: a reduce sums the gradient streams and MemoryX applies SGD after the transfer", "[weight-stream]") {
  Top t;
  const uint64_t a = t.mx.add_tensor("W", {1.0f, 2.0f, 3.0f, 4.0f});
  t.mx.set_sgd(0.5);
  const sc_time t0(1000, sc_core::SC_NS);
  const sc_time done = t.sx.reduce_update(a, {{1.0f, 0.0f, -2.0f, 4.0f}, {1.0f, 2.0f, 0.0f, -4.0f}}, t0);
  // Sum {2, 2, -2, 0}; w - 0.5 g = {0, 1, 4, 4}.
  CHECK(t.mx.values("W") == std::vector<float>{0.0f, 1.0f, 4.0f, 4.0f});
  // 16 bytes: the tree 8 ns + 50 ns latency, then MemoryX 100 ns + 16 ns.
  CHECK(ns(done) == Approx(1000 + 8 + 50 + 100 + 16));
  CHECK(t.mx.stats().updates == 1);
  CHECK(t.sx.stats().bytes_reduced == 32);
  CHECK_THROWS_WITH(t.sx.reduce_update(a, {{1.0f}, {1.0f, 2.0f}}, t0), Contains("different lengths"));
}

TEST_CASE("weight-stream: MemoryX refuses tensors past its capacity and bad transactions", "[weight-stream]") {
  Top t;
  t.mx.add_tensor("a", std::vector<float>(1000));
  CHECK_THROWS_WITH(t.mx.add_tensor("b", std::vector<float>(25)), Contains("needs 4100 bytes of MemoryX; it holds 4096"));
  CHECK_THROWS_WITH(t.mx.add_tensor("a", {}), Contains("is declared twice"));
  tlm::tlm_generic_payload p;
  float buf[4];
  p.set_command(tlm::TLM_READ_COMMAND);
  p.set_address(4000);  // past the end
  p.set_data_ptr(reinterpret_cast<unsigned char*>(buf));
  p.set_data_length(16);
  sc_time d = sc_core::SC_ZERO_TIME;
  t.sx.socket->b_transport(p, d);
  CHECK(p.get_response_status() == tlm::TLM_ADDRESS_ERROR_RESPONSE);
  p.set_address(MemoryX::kUpdateWindow);  // an update must be a write
  p.set_response_status(tlm::TLM_INCOMPLETE_RESPONSE);
  t.sx.socket->b_transport(p, d);
  CHECK(p.get_response_status() == tlm::TLM_ADDRESS_ERROR_RESPONSE);
}
