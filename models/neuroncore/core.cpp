#include "models/neuroncore/core.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <sstream>

#include "isa/error.hpp"

namespace tessera::neuroncore {

using sc_core::sc_time;
using sc_core::SC_FS;

std::string_view stall_name(Stall s) {
  static constexpr std::string_view names[] = {"unit_busy", "dependency", "semaphore", "port_conflict"};
  return names[static_cast<size_t>(s)];
}

namespace {

bool touches(const Instr& in, Space s) {
  for (const AccessPattern* ap : {&in.dst, &in.src0, &in.src1, &in.aux})
    if (ap->present() && ap->space == s) return true;
  return false;
}

}  // namespace

NeuronCore::NeuronCore(sc_core::sc_module_name name, const CoreConfig& cfg, CoreOptions opt)
    : sc_core::sc_module(name), cfg_(cfg), opt_(opt), mem_(cfg) {
  for (int l = 0; l < kLanes; ++l) clocks_[static_cast<size_t>(l)] = ClockDomain(lane_clock_hz(static_cast<Lane>(l), cfg_));
  const auto nq = static_cast<size_t>(cfg_.dma_engines * cfg_.dma_queues_per_engine);
  dma_ = DmaEngines(cfg_.dma_engines, cfg_.dma_queues_per_engine, cfg_.hbm_bandwidth, cfg_.hbm_latency);
  stats_.dma_queue_bytes.assign(nq, 0);
  stats_.dma_queue_transfers.assign(nq, 0);
  sc_core::sc_spawn_options thread_opt;
  sc_core::sc_spawn([this] { issue_thread(); }, sc_core::sc_gen_unique_name("issue"), &thread_opt);
  for (int l = 0; l < kLanes; ++l) {
    // Each lane retires its instructions in its own process, at their end times.
    auto* q = new sc_core::sc_event_queue(sc_core::sc_gen_unique_name("retire_q"));
    retire_q_[static_cast<size_t>(l)] = q;
    sc_core::sc_spawn_options o;
    o.spawn_method();
    o.dont_initialize();
    o.set_sensitivity(&q->default_event());
    sc_core::sc_spawn([this, l] { retire(l); }, sc_core::sc_gen_unique_name("retire"), &o);
  }
}

void NeuronCore::retire(int lane) { ++retired_[static_cast<size_t>(lane)]; }

void NeuronCore::load(const Program& p) {
  if (!finished_) throw std::logic_error("NeuronCore::load: the previous program is still running");
  prog_ = &p;
  finished_ = false;
  error_.reset();
  start_pending_ = true;  // seen by the issue thread even when load() runs before sc_start
  start_ev_.notify(sc_core::SC_ZERO_TIME);
}

void NeuronCore::issue_thread() {
  while (true) {
    if (!start_pending_) sc_core::wait(start_ev_);
    start_pending_ = false;
    try {
      run_program();
    } catch (const std::exception& e) {
      error_ = std::string("internal error in the NeuronCore model: ") + e.what();
    }
    finished_ = true;
    finished_ev_.notify(sc_core::SC_ZERO_TIME);
  }
}

void NeuronCore::fail(int32_t bundle, Lane lane, const std::string& msg) {
  const int line = prog_ && bundle >= 0 && bundle < static_cast<int32_t>(prog_->bundles.size())
                       ? prog_->bundles[static_cast<size_t>(bundle)].line
                       : 0;
  std::ostringstream s;
  s << "bundle " << bundle << " lane " << lane_name(lane);
  if (prog_ && line) s << " (" << prog_->source << ":" << line << ")";
  s << ": " << msg;
  // Recorded, not thrown: an exception unwinding a SystemC coroutine stack confuses ASan
  // (google/sanitizers#189), and the run loop stops at the next check anyway.
  if (!error_) error_ = s.str();
}

void NeuronCore::sync_to(Femtos t) {
  const Femtos now = static_cast<Femtos>(sc_core::sc_time_stamp().value());
  if (t > now) sc_core::wait(sc_time::from_value(static_cast<uint64_t>(t - now)));
}

Footprint NeuronCore::region(const AccessPattern& ap) const { return footprint(ap, CoreMemory::base_offset(ap, regs_)); }

Femtos NeuronCore::ready_time(const Instr& in, Lane, bool& raw, std::vector<int32_t>* after) {
  Femtos t = 0;
  raw = false;
  auto consider = [&](const Footprint& r, bool is_write) {
    for (auto& p : pending_) {
      // Reads wait for pending writes (RAW); writes wait for pending reads and writes (WAR, WAW).
      if (!(p.write || is_write) || !p.r.overlaps(r)) continue;
      if (p.op >= 0) {
        if (after) {  // a DMA waits for it in the engines
          for (const int32_t id : dma_ops_[static_cast<size_t>(p.op)].pieces) after->push_back(id);
          continue;
        }
        p.end = op_end(p.op);  // an instruction waits for it: nothing issues before it ends
        p.op = -1;
      }
      if (p.end > t) {
        t = p.end;
        raw = p.write && !is_write;
      }
    }
  };
  for (const AccessPattern* ap : {&in.src0, &in.src1})
    if (ap->present()) consider(region(*ap), false);
  // select reads aux; activation writes it.
  if (in.aux.present()) consider(region(in.aux), in.op == Op::activation);
  if (in.dst.present()) consider(region(in.dst), true);
  return t;
}

void NeuronCore::add_pending(const Instr& in, Lane lane, Femtos end, int32_t op) {
  for (const AccessPattern* ap : {&in.src0, &in.src1})
    if (ap->present()) pending_.push_back({region(*ap), end, false, lane, op});
  if (in.aux.present()) pending_.push_back({region(in.aux), end, in.op == Op::activation, lane, op});
  if (in.dst.present()) {
    const Footprint r = region(in.dst);
    pending_.push_back({r, end, true, lane, op});
    if (r.space == Space::sbuf) stats_.sbuf_high_water = std::max(stats_.sbuf_high_water, r.b_hi);
    if (r.space == Space::psum) stats_.psum_high_water = std::max(stats_.psum_high_water, r.b_hi);
  }
}

Femtos NeuronCore::op_end(int32_t op) {
  DmaOp& d = dma_ops_[static_cast<size_t>(op)];
  if (d.done) return d.end;
  double e = 0, s0 = std::numeric_limits<double>::infinity();
  for (const int32_t id : d.pieces) {
    e = std::max(e, dma_.end(id));
    s0 = std::min(s0, dma_.start(id));
  }
  d.done = true;
  d.end = fs(e);
  d.start = fs(s0);
  if (opt_.record && d.record >= 0) {
    records_[static_cast<size_t>(d.record)].start = d.start;
    records_[static_cast<size_t>(d.record)].end = d.end;
  }
  if (d.sem >= 0) sem_signals_[static_cast<size_t>(d.sem)].push_back({d.end, 1});
  const Femtos now = static_cast<Femtos>(sc_core::sc_time_stamp().value());
  retire_q_[static_cast<size_t>(d.lane)]->notify(sc_time::from_value(static_cast<uint64_t>(std::max<Femtos>(0, d.end - now))));
  return d.end;
}

void NeuronCore::settle(Femtos t) {
  dma_.advance(secs(t));
  std::vector<int32_t> still;
  for (const int32_t op : dma_open_) {
    bool fin = true;
    for (const int32_t id : dma_ops_[static_cast<size_t>(op)].pieces) fin = fin && dma_.finished(id);
    if (fin) op_end(op);
    else still.push_back(op);
  }
  dma_open_.swap(still);
  for (auto& p : pending_)
    if (p.op >= 0 && dma_ops_[static_cast<size_t>(p.op)].done) {
      p.end = dma_ops_[static_cast<size_t>(p.op)].end;
      p.op = -1;
    }
}

int32_t NeuronCore::track_dma_flow(const Instr& in, bool is_dma, int32_t record_index) {
  int32_t from = -1;
  for (const AccessPattern* ap : {&in.src0, &in.src1, &in.aux}) {
    if (!ap->present() || (ap == &in.aux && in.op == Op::activation)) continue;  // (an activation writes aux)
    const Footprint r = region(*ap);
    for (const auto& [w, idx] : dma_writes_)
      if (w.overlaps(r)) from = std::max(from, idx);
  }
  if (in.dst.present()) {
    const Footprint d = region(in.dst);
    dma_writes_.erase(std::remove_if(dma_writes_.begin(), dma_writes_.end(),
                                     [&](const auto& e) { return e.first.overlaps(d); }),
                      dma_writes_.end());
    if (is_dma) dma_writes_.push_back({d, record_index});
  }
  return from;
}


void NeuronCore::prune(Femtos t) {
  settle(t);  // nothing issues before t
  pending_.erase(std::remove_if(pending_.begin(), pending_.end(), [t](const Pending& p) { return p.op < 0 && p.end <= t; }),
                 pending_.end());
}

Femtos NeuronCore::semaphore_time(int sem, int64_t value, int32_t bundle) {
  if (value <= 0) return 0;
  // When the signals recorded so far reach `value` (-1: they do not).
  auto reached = [&] {
    auto signals = sem_signals_[static_cast<size_t>(sem)];
    std::sort(signals.begin(), signals.end());
    int64_t v = 0;
    for (const auto& [t, d] : signals) {
      v += d;
      if (v >= value) return t;
    }
    return Femtos{-1};
  };
  // DMAs in flight signal it when they end. The engines run only as far as the wait needs -- to
  // where the known signals suffice, or to the next of these DMAs' ends -- so that the transfers
  // issued after the wait are in the engines before anything later is decided (DmaEngines).
  while (true) {
    std::vector<int32_t> pieces;
    for (const int32_t op : dma_open_)
      if (dma_ops_[static_cast<size_t>(op)].sem == sem)
        for (const int32_t id : dma_ops_[static_cast<size_t>(op)].pieces) pieces.push_back(id);
    const Femtos t = reached();
    if (pieces.empty() || (t >= 0 && t <= fs(dma_.now()))) {
      if (t >= 0) return t;
      break;
    }
    if (t >= 0) settle(t);  // a DMA ending before t may count sooner
    else settle(fs(dma_.run_until_any(pieces)));
    if (t >= 0 && reached() == t) return t;
  }
  int64_t v = 0;
  for (const auto& sig : sem_signals_[static_cast<size_t>(sem)]) v += sig.second;
  std::ostringstream s;
  s << "sem_wait s" << sem << " value=" << value << " can never be satisfied: the signals issued before it add up to "
    << v << " (deadlock)";
  fail(bundle, Lane::sync, s.str());
  return 0;
}

void NeuronCore::run_program() {
  const Program& p = *prog_;
  const Femtos now = static_cast<Femtos>(sc_core::sc_time_stamp().value());
  t_start_ = now;
  next_issue_ = now;
  unit_free_.fill(now);
  loader_free_ = now;
  dma_.reset(0.0);
  dma_ops_.clear();
  dma_open_.clear();
  pending_.clear();
  dma_writes_.clear();
  for (auto& s : sem_signals_) s.clear();
  gpsimd_sbuf_until_ = scalar_psum_until_ = vector_sbuf_until_ = vector_psum_until_ = now;
  stats_ = CoreStats{};
  const auto nq = static_cast<size_t>(cfg_.dma_engines * cfg_.dma_queues_per_engine);
  stats_.dma_queue_bytes.assign(nq, 0);
  stats_.dma_queue_transfers.assign(nq, 0);
  records_.clear();
  Femtos last_end = now;
  const ClockDomain& seq = clocks_[static_cast<size_t>(Lane::control)];

  int32_t pc = 0;
  const int32_t nb = static_cast<int32_t>(p.bundles.size());
  while (pc >= 0 && pc < nb) {
    const Bundle& b = p.bundles[static_cast<size_t>(pc)];
    const Femtos t0 = next_issue_;
    prune(t0);
    // 1. When can the bundle issue?
    Femtos T = t0;
    Stall cause = Stall::unit_busy;
    auto raise = [&](Femtos t, Stall c) {
      if (t > T) {
        T = t;
        cause = c;
      }
    };
    for (int l = 0; l < kLanes; ++l) {
      const int32_t idx = b.slot[static_cast<size_t>(l)];
      if (idx < 0) continue;
      const Instr& in = p.instrs[static_cast<size_t>(idx)];
      const Lane lane = static_cast<Lane>(l);
      if (lane == Lane::dma0 || lane == Lane::dma1) continue;  // transfers wait in their queue, not here
      if (in.op == Op::load_stationary) raise(loader_free_, Stall::unit_busy);
      else raise(unit_free_[static_cast<size_t>(l)], Stall::unit_busy);
      if (cfg_.port_conflicts) {
        // NeuronCore-v2: vector and gpsimd share the SBUF port, vector and scalar the PSUM port.
        if (lane == Lane::vector && touches(in, Space::sbuf)) raise(gpsimd_sbuf_until_, Stall::port_conflict);
        if (lane == Lane::gpsimd && touches(in, Space::sbuf)) raise(vector_sbuf_until_, Stall::port_conflict);
        if (lane == Lane::vector && touches(in, Space::psum)) raise(scalar_psum_until_, Stall::port_conflict);
        if (lane == Lane::scalar && touches(in, Space::psum)) raise(vector_psum_until_, Stall::port_conflict);
      }
      bool raw = false;
      Femtos dep = ready_time(in, lane, raw);
      // Waiting on a result costs a hand-off gap after it ([A2]: ~100 cycles extra when dependent
      // back to back; isa.dependent_gap is calibrated on the NKI guide's 264-cycle measurement).
      if (raw) dep = clocks_[static_cast<size_t>(l)].time_of(clocks_[static_cast<size_t>(l)].cycle_at_or_after(dep) + cfg_.dependent_gap);
      raise(dep, Stall::dependency);
      if (in.op == Op::sem_wait) raise(semaphore_time(in.sem, static_cast<int64_t>(in.imm[0]), pc), Stall::semaphore);
    }
    if (error_) return;
    stats_.stall_fs[static_cast<size_t>(cause)] += T - t0;
    if (opt_.max_time && T - t_start_ > opt_.max_time) {
      fail(pc, Lane::control, "watchdog: the program ran past the time limit without halting");
      return;
    }

    // 2. Issue: numerics in program order, timing per lane.
    const RegFile regs_at_issue = regs_;
    int32_t next_pc = pc + 1;
    bool halt = false;
    ++stats_.bundles;
    for (int l = 0; l < kLanes; ++l) {
      const int32_t idx = b.slot[static_cast<size_t>(l)];
      if (idx < 0) continue;
      const Instr& in = p.instrs[static_cast<size_t>(idx)];
      const Lane lane = static_cast<Lane>(l);
      const ClockDomain& ck = clocks_[static_cast<size_t>(l)];
      const int64_t c0 = ck.cycle_at_or_after(T);
      const Femtos start = ck.time_of(c0);
      ++stats_.instructions[static_cast<size_t>(l)];
      if (in.op == Op::dma) {
        // The lane hands the descriptor to the queue's engine; the transfer waits for its
        // operands (triggered from another engine: + dma.trigger_latency) and its queue/engine.
        const Femtos issued = ck.time_of(c0 + 1);
        bool x = false;
        std::vector<int32_t> after;
        const Femtos known = std::max(issued, ready_time(in, lane, x, &after));
        // Its pieces go into the engines' round-robin (DmaEngines); each starts once issued and its
        // operands are ready (triggered from another engine: + dma.trigger_latency).
        const auto op = static_cast<int32_t>(dma_ops_.size());
        DmaOp d;
        d.lane = lane;
        d.sem = in.sem;
        for (const DmaEngines::Piece& t : dma_pieces(in, cfg_, secs(issued), secs(known), after)) {
          d.pieces.push_back(dma_.submit(t));
          if (t.hbm_bytes > 0) (in.src0.space == Space::hbm ? stats_.hbm_read_bytes : stats_.hbm_write_bytes) += t.bytes;
          stats_.dma_queue_bytes[static_cast<size_t>(t.queue)] += t.bytes;
          ++stats_.dma_queue_transfers[static_cast<size_t>(t.queue)];
        }
        add_pending(in, lane, 0, op);
        unit_free_[static_cast<size_t>(l)] = issued;
        if (opt_.record) {
          const auto ri = static_cast<int32_t>(records_.size());
          d.record = ri;
          records_.push_back({pc, idx, lane, T, issued, issued, 0, track_dma_flow(in, true, ri)});
        }
        dma_ops_.push_back(std::move(d));
        dma_open_.push_back(op);
        if (opt_.numerics) {
          try {
            execute(in, mem_, regs_at_issue, te_);
          } catch (const std::exception& ex) {
            fail(pc, lane, ex.what());
            return;
          }
        }
        continue;
      }
      const int64_t cycles = instr_cycles(in, cfg_);
      const Femtos end = ck.time_of(c0 + cycles);
      if (in.op == Op::load_stationary) loader_free_ = end;
      else unit_free_[static_cast<size_t>(l)] = end;
      stats_.busy_cycles[static_cast<size_t>(l)] += cycles;
      if (cfg_.port_conflicts) {
        if (lane == Lane::gpsimd && touches(in, Space::sbuf)) gpsimd_sbuf_until_ = end;
        if (lane == Lane::scalar && touches(in, Space::psum)) scalar_psum_until_ = end;
        if (lane == Lane::vector && touches(in, Space::sbuf)) vector_sbuf_until_ = end;
        if (lane == Lane::vector && touches(in, Space::psum)) vector_psum_until_ = end;
      }
      add_pending(in, lane, end);
      if (opt_.record) records_.push_back({pc, idx, lane, T, start, end, cycles, track_dma_flow(in, false, -1)});
      retire_q_[static_cast<size_t>(l)]->notify(sc_time::from_value(static_cast<uint64_t>(end - static_cast<Femtos>(sc_core::sc_time_stamp().value()))));
      last_end = std::max(last_end, end);
      switch (in.op) {
        case Op::sem_signal: sem_signals_[static_cast<size_t>(in.sem)].push_back({end, static_cast<int64_t>(in.imm[0])}); break;
        case Op::set_reg: regs_[static_cast<size_t>(in.reg)] = static_cast<int64_t>(in.imm[0]); break;
        case Op::add_reg: regs_[static_cast<size_t>(in.reg)] += static_cast<int64_t>(in.imm[0]); break;
        case Op::dec_branch_nz:
          if (--regs_[static_cast<size_t>(in.reg)] != 0) next_pc = in.target;
          break;
        case Op::branch_nz:
          if (regs_[static_cast<size_t>(in.reg)] != 0) next_pc = in.target;
          break;
        case Op::jump: next_pc = in.target; break;
        case Op::halt: halt = true; break;
        case Op::sem_wait:
        case Op::step_marker:
        case Op::nop: break;
        default:
          if (opt_.numerics) {
            try {
              execute(in, mem_, regs_at_issue, te_);
            } catch (const std::exception& ex) {
              fail(pc, lane, ex.what());
              return;
            }
          }
      }
    }
    // The load of a stationary overlaps the array's work, but a matmul needs it loaded: the
    // array waits for the loader (tracked through the scoreboard would miss it: the stationary
    // lives in the array, not in memory).
    if (b.slot[0] >= 0) {
      const Instr& in = p.instrs[static_cast<size_t>(b.slot[0])];
      if (in.op == Op::load_stationary) unit_free_[0] = std::max(unit_free_[0], loader_free_);
    }
    next_issue_ = seq.time_of(seq.cycle_at_or_after(T) + 1);
    if (next_issue_ - static_cast<Femtos>(sc_core::sc_time_stamp().value()) > opt_.quantum) {
      settle(next_issue_);  // DMAs ending by then retire on time
      sync_to(next_issue_);
    }
    if (halt) break;
    pc = next_pc;
  }
  dma_.drain();
  for (const int32_t op : dma_open_) op_end(op);
  dma_open_.clear();
  for (const DmaOp& d : dma_ops_) last_end = std::max(last_end, d.end);
  stats_.end_time = last_end;
  sync_to(last_end);
}

}  // namespace tessera::neuroncore
