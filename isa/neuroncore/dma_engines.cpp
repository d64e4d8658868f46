#include "isa/neuroncore/dma_engines.hpp"

#include <algorithm>
#include <limits>
#include <stdexcept>

namespace tessera::neuroncore {

DmaEngines::DmaEngines(int64_t engines, int64_t queues_per_engine, double hbm_bandwidth, double hbm_latency)
    : queues_(static_cast<size_t>(engines * queues_per_engine)), engines_(engines), hbm_bw_(hbm_bandwidth), hbm_latency_(hbm_latency) {
  per_engine_.assign(static_cast<size_t>(engines), 0);
}

void DmaEngines::reset(double t0) {
  pieces_.clear();
  dependents_.clear();
  for (auto& q : queues_) q.clear();
  busy_queues_.clear();
  now_ = last_end_ = t0;
}

int32_t DmaEngines::submit(const Piece& p) {
  const auto id = static_cast<int32_t>(pieces_.size());
  State s;
  s.p = p;
  s.left = p.work;
  for (const int32_t a : p.after)
    if (!finished(a)) {
      ++s.waiting;
      dependents_[static_cast<size_t>(a)].push_back(id);
    }
  pieces_.push_back(std::move(s));
  dependents_.emplace_back();
  State& n = pieces_.back();
  if (n.waiting == 0) {
    double r = n.p.ready;
    for (const int32_t a : n.p.after) r = std::max(r, pieces_[static_cast<size_t>(a)].end);
    if (r > n.p.issued) r += n.p.latency;
    // Callers run the engines no further than the next submission's issue (header): a transfer
    // ready before the engines' time would have changed what they computed.
    if (r < now_ - 1e-15) throw std::logic_error("DmaEngines: a transfer submitted ready before the engines' time");
    n.p.ready = std::max(r, now_);
    n.known = true;
  }
  auto& q = queues_[static_cast<size_t>(p.queue)];
  if (q.empty()) busy_queues_.push_back(p.queue);
  q.push_back(id);
  return id;
}

void DmaEngines::finish(int32_t id, double t) {
  State& s = pieces_[static_cast<size_t>(id)];
  s.end = t + (s.p.hbm_bytes > 0 ? hbm_latency_ : 0.0);
  last_end_ = std::max(last_end_, s.end);
  auto& q = queues_[static_cast<size_t>(s.p.queue)];
  q.pop_front();
  if (q.empty()) busy_queues_.erase(std::find(busy_queues_.begin(), busy_queues_.end(), s.p.queue));
  for (const int32_t d : dependents_[static_cast<size_t>(id)]) {
    State& w = pieces_[static_cast<size_t>(d)];
    if (--w.waiting > 0) continue;
    double r = w.p.ready;
    for (const int32_t a : w.p.after) r = std::max(r, pieces_[static_cast<size_t>(a)].end);
    if (r > w.p.issued) r += w.p.latency;
    w.p.ready = r;
    w.known = true;
  }
}

bool DmaEngines::step(double limit) {
  constexpr double kInf = std::numeric_limits<double>::infinity();
  active_.clear();
  double next_ready = kInf;
  std::fill(per_engine_.begin(), per_engine_.end(), 0);
  for (const int32_t q : busy_queues_) {
    const int32_t h = queues_[static_cast<size_t>(q)].front();
    const State& s = pieces_[static_cast<size_t>(h)];
    if (!s.known) continue;
    if (s.p.ready <= now_) {
      active_.push_back(h);
      ++per_engine_[static_cast<size_t>(q % engines_)];
    } else {
      next_ready = std::min(next_ready, s.p.ready);
    }
  }
  if (active_.empty()) {
    if (next_ready == kInf) return false;
    now_ = std::min(next_ready, limit);
    return true;
  }
  // Round-robin across an engine's ready queues: equal shares; HBM shared in proportion.
  rate_.resize(active_.size());
  double hbm_rate = 0;
  for (size_t i = 0; i < active_.size(); ++i) {
    const State& s = pieces_[static_cast<size_t>(active_[i])];
    rate_[i] = 1.0 / per_engine_[static_cast<size_t>(s.p.queue % engines_)];
    if (s.p.hbm_bytes > 0 && s.p.work > 0) hbm_rate += rate_[i] * s.p.hbm_bytes / s.p.work;
  }
  if (hbm_bw_ > 0 && hbm_rate > hbm_bw_) {
    const double scale = hbm_bw_ / hbm_rate;
    for (size_t i = 0; i < active_.size(); ++i)
      if (pieces_[static_cast<size_t>(active_[i])].p.hbm_bytes > 0) rate_[i] *= scale;
  }
  double dt = std::min(next_ready, limit) - now_;
  for (size_t i = 0; i < active_.size(); ++i) dt = std::min(dt, pieces_[static_cast<size_t>(active_[i])].left / rate_[i]);
  dt = std::max(dt, 0.0);
  const double t = now_ + dt;
  for (size_t i = 0; i < active_.size(); ++i) {
    State& s = pieces_[static_cast<size_t>(active_[i])];
    if (s.start < 0) s.start = now_;
    s.left -= rate_[i] * dt;
    // Done within rounding (a share of a transfer's own length).
    if (s.left <= s.p.work * 1e-12) s.left = 0;
  }
  now_ = t;
  for (size_t i = 0; i < active_.size(); ++i)
    if (pieces_[static_cast<size_t>(active_[i])].left == 0) finish(active_[i], t);
  return true;
}

double DmaEngines::end(int32_t id) {
  while (!finished(id))
    if (!step(std::numeric_limits<double>::infinity())) throw std::logic_error("DmaEngines: a transfer waits for one that never ends");
  return pieces_[static_cast<size_t>(id)].end;
}

double DmaEngines::start(int32_t id) {
  end(id);
  return pieces_[static_cast<size_t>(id)].start;
}

void DmaEngines::advance(double t) {
  while (now_ < t)
    if (!step(t)) {
      now_ = t;
      break;
    }
}

double DmaEngines::run_until_any(const std::vector<int32_t>& ids) {
  auto any = [&] {
    for (const int32_t id : ids)
      if (finished(id)) return true;
    return false;
  };
  while (!any())
    if (!step(std::numeric_limits<double>::infinity())) throw std::logic_error("DmaEngines: a transfer waits for one that never ends");
  return now_;
}

double DmaEngines::drain() {
  while (step(std::numeric_limits<double>::infinity())) {
  }
  return last_end_;
}

std::vector<DmaEngines::Piece> dma_pieces(const Instr& in, const CoreConfig& c, double issued, double ready, const std::vector<int32_t>& after) {
  int64_t bytes = 0, chunks = 0;
  dma_shape(in, bytes, chunks);
  const bool hbm = in.src0.space == Space::hbm || in.dst.space == Space::hbm;
  std::vector<DmaEngines::Piece> out;
  auto piece = [&](int64_t q, int64_t rows, int64_t all_rows) {
    DmaEngines::Piece p;
    p.queue = static_cast<int32_t>(q);
    p.issued = issued;
    p.ready = ready;
    p.latency = c.dma_trigger_latency;
    p.bytes = bytes * rows / all_rows;
    p.work = dma_transfer_seconds(p.bytes, std::max<int64_t>(1, chunks * rows / all_rows), c);
    p.hbm_bytes = hbm ? static_cast<double>(p.bytes) : 0.0;
    p.after = after;
    out.push_back(std::move(p));
  };
  if (spread_queue(in.queue)) {
    const int64_t rows = std::max<int32_t>(1, in.src0.parts);
    const int64_t groups = std::max<int64_t>(1, std::min<int64_t>(c.dma_engines, rows / 8));
    for (int64_t g = 0; g < groups; ++g) piece(c.dma_engines * -in.queue + g, rows * (g + 1) / groups - rows * g / groups, rows);
  } else {
    piece(in.queue, 1, 1);
  }
  return out;
}

}  // namespace tessera::neuroncore
