// The sequencer (compile.hpp Compiled::sequenced; docs/wafer-compiler.md "Many kernels"): weight
// streaming of a chain of more kernels than a PE has task ids and colors for one set each. Every
// kernel runs on the one rectangle, one after another, so one set of tasks serves them all:
//
//   ld, ldb, ldc, ldd  the weight loads, kernel r10 (the load in progress; training: r10 >= n is
//                      the backward pass's reload c.reloads[r10 - n], which waits on r13);
//   onxA, onxB         the x tasks of the kernels with K along the columns (A) and along the rows
//                      (B), one x color each; their body is the same for every kernel, which the
//                      registers describe (r3 nb, r4 kb, r5 rows, r6 y's offset in the arena
//                      Yar) along with the DSDs wcolA/B and yrowA/B;
//   red, out, gs       the reduce, the hand-off and the im2col gather, kernel r8 (the reduce next);
//   send               the graph input's sends (kernel 0).
//
// A task whose body differs by kernel dispatches on its register with a binary search (sub, blz).
// r7 counts the kernels whose x tasks have ended on this PE, r9 the kernels whose weights are in.
// Order on a PE follows from the chain: kernel l + 1's x values reach a PE from the chain end of
// its own kernel-l line, so after the PE's reduce of kernel l; loads run ahead by at most one
// buffer (kernel m's load waits until the x tasks of the kernel before it with the same
// orientation, whose buffer it takes, are done: kernel m - 2 in an alternating chain).
// A follower -- a kernel of the same orientation as the one before it, reading a holder on the
// edge that one's input came from (RegNet's block after its shortcut) -- takes its x values from
// the same chain ends right after that kernel's (the gather `gsf`, r11 the follower).
// Training (always sequenced; no followers): the x tasks also save each x value (r12 the kernel's
// offset in the arena Xsv), and the backward pass (training.cpp backward_tasks) counts on r11 (the
// kernels whose gradient has left this PE) and r13 (whose dy tasks have ended).
#include <functional>
#include <string>
#include <vector>

#include "mapper/wafer/internal.hpp"

namespace tessera::wafer::detail {

namespace {

constexpr int kRt = kSeqScratch, kNb = 3, kKb = 4, kRows = 5, kYoff = 6, kXdone = 7, kRed = 8, kLoaded = kRegLoaded, kLoad = 10, kFollow = kRegFollow, kXsOff = 12;
constexpr int kBdone = kRegBdone, kGdone = kRegGdone;
// Task ids (priorities, as in layer_tasks): loads, x tasks, reduce, hand-off, gather, the input's
// sends, the followers' gathers. With followers the reduce goes before the x tasks (ids 4, and 6-7):
// a follower's x values reach a PE right after the previous kernel's, before its reduce has run,
// and the end of the follower's x loop must not activate `red` while it is still pending.
constexpr int kIdLd = 0, kIdOnx = 4, kIdRed = 6, kIdOut = 7, kIdGs = 8, kIdSend = 9, kIdGsf = 10;
// (with followers: red 4, out 5, onxA/B 6-7 -- `out` dispatches on r8 too, so it must run before
// the next reduce can move r8 on)

const char* group_name(const DenseKernel& k) { return k.k_on_columns ? "A" : "B"; }

// Kernel m's registers and x-task DSD lengths: it is the next whose x values this PE takes.
void setup(const Compiled& c, size_t m, ProgramTemplate& t) {
  const DenseKernel& k = c.kernels[m];
  const std::string G = group_name(k);
  t.op(Op::mov, {reg(kNb), imm(k.nb)});
  t.op(Op::mov, {reg(kKb), imm(k.kb)});
  t.op(Op::mov, {reg(kRows), imm(k.B)});
  t.op(Op::mov, {reg(kYoff), imm(c.y_off[m])});
  if (c.training) t.op(Op::mov, {reg(kXsOff), imm(c.xs_off[m])});
  t.op(Op::dsd_len, {"wcol" + G, imm(k.nb)});
  t.op(Op::dsd_len, {"yrow" + G, imm(k.nb)});
}

std::vector<int64_t> range(size_t n) {
  std::vector<int64_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<int64_t>(i);
  return v;
}

}  // namespace

void dispatch(ProgramTemplate& t, int r, const std::vector<int64_t>& keys, const std::string& tag, const std::function<void(int64_t)>& emit) {
  std::function<void(size_t, size_t)> go = [&](size_t lo, size_t hi) {
    if (hi - lo == 1) return emit(keys[lo]);
    const size_t mid = (lo + hi) / 2;
    const std::string below = tag + "_" + std::to_string(keys[lo]) + "_" + std::to_string(keys[mid]);
    t.op(Op::sub, {reg(kRt), reg(r), imm(keys[mid])});
    t.op(Op::blz, {reg(kRt), below});
    go(mid, hi);
    t.label(below);
    go(lo, mid);
  };
  go(0, keys.size());
}

// The number of compare steps a dispatch over n cases takes at most (the estimate's cost).
int dispatch_depth(size_t n) {
  int d = 0;
  while ((size_t{1} << d) < n) ++d;
  return d;
}

void sequenced_tasks(const Compiled& c, ProgramTemplate& t) {
  const size_t n = c.kernels.size();
  const TaskNames tn = task_names(c, 0);
  const std::vector<int64_t> fl = followers(c);
  const bool fw_any = !fl.empty();
  const int id_onx = fw_any ? kIdOnx + 2 : kIdOnx, id_red = fw_any ? kIdOnx : kIdRed, id_out = fw_any ? kIdOnx + 1 : kIdOut;
  const Op mov = c.half() ? Op::fmovh : Op::fmovs;
  t.comment("---- the sequencer: shared tasks run every kernel in turn (r7 x tasks done, r8 next reduce, r9 loaded, r10 loading)");
  bool has[2] = {false, false};  // an orientation with kernels (A: K along the columns; a one-kernel chain has one)
  for (const auto& k : c.kernels) has[k.k_on_columns ? 0 : 1] = true;
  for (const char* G : {"A", "B"}) {  // the x tasks' DSDs: lengths and offsets set at run time
    if (!has[G[0] == 'A' ? 0 : 1]) continue;
    t.mem1d(std::string("wcol") + G, G[0] == 'A' ? "Wa" : "Wb", 0, 1);
    t.mem1d(std::string("yrow") + G, "Yar", 0, 1);
  }
  if (c.training) t.mem1d("xsv", "Xsv", 0, 1);
  if (c.kernels[0].input_layer) input_sends(c, 0, t, kIdSend);

  // The x tasks: y[b, :] (+)= W[:, j] * x for the current kernel; after its last x value the
  // reduce, the load waiting for the buffer, the next kernel's registers, and the x task of the
  // next kernel's orientation if its weights are in.
  for (const bool cols : {true, false}) {
    const std::string G = cols ? "A" : "B", O = cols ? "B" : "A";
    int64_t color = -1;
    std::vector<int64_t> next;  // the kernels after this orientation's
    for (size_t l = 0; l < n; ++l)
      if (c.kernels[l].k_on_columns == cols) color = c.kernels[l].cx, next.push_back(static_cast<int64_t>(l) + 1);
    if (color < 0) continue;
    t.task("onx" + G, TaskKind::data, id_onx + (cols ? 0 : 1), color, 0, false, true, "one x value of the current kernel");
    if (c.training) {  // keep x[b, j] for the weight gradient: Xsv[xs_off + b kb + j]
      t.op(Op::mul, {reg(kRt), reg(1), reg(kKb)});
      t.op(Op::add, {reg(kRt), reg(kRt), reg(0)});
      t.op(Op::add, {reg(kRt), reg(kRt), reg(kXsOff)});
      t.op(Op::dsd_off, {"xsv", reg(kRt)});
      t.op(mov, {"xsv", kWv});  // (in the compute type: the 16-bit x as it came)
    }
    t.op(Op::mul, {reg(kRt), reg(0), reg(kNb)});
    t.op(Op::dsd_off, {"wcol" + G, reg(kRt)});
    t.op(Op::mul, {reg(kRt), reg(1), reg(kNb)});
    t.op(Op::add, {reg(kRt), reg(kRt), reg(kYoff)});
    t.op(Op::dsd_off, {"yrow" + G, reg(kRt)});
    x_product(c, t, reg(0), "yrow" + G, "wcol" + G, G);
    t.op(Op::add, {reg(0), reg(0), imm(1)});
    t.op(Op::sub, {reg(kRt), reg(0), reg(kKb)});
    t.op(Op::bnz, {reg(kRt), "x" + G});
    t.op(Op::mov, {reg(0), imm(0)});
    t.op(Op::add, {reg(1), reg(1), imm(1)});
    t.op(Op::sub, {reg(kRt), reg(1), reg(kRows)});
    t.op(Op::bnz, {reg(kRt), "x" + G});
    t.op(Op::mov, {reg(1), imm(0)});
    t.op(Op::activate, {tn.red});
    t.op(Op::unblock, {tn.ld}, "a load waiting for this kernel's buffer goes on");
    t.op(Op::add, {reg(kXdone), reg(kXdone), imm(1)});
    t.op(Op::block, {"onx" + G});
    // (the next kernel's orientation: the other one's, or this one's for a follower)
    bool same = false;
    dispatch(t, kXdone, next, "n" + G, [&](int64_t m) {
      const bool f = m < static_cast<int64_t>(n) && c.kernels[static_cast<size_t>(m)].k_on_columns == cols;
      same = same || f;
      if (m < static_cast<int64_t>(n)) setup(c, static_cast<size_t>(m), t);
      t.op(Op::jmp, {(f ? "s" : "e") + G});
    });
    for (const bool f : {false, true}) {
      if (f && !same) continue;
      t.label((f ? "s" : "e") + G);
      t.op(Op::sub, {reg(kRt), reg(kLoaded), reg(kXdone)});
      t.op(Op::bz, {reg(kRt), "x" + G});
      if (f || has[cols ? 1 : 0]) t.op(Op::unblock, {"onx" + (f ? G : O)}, "the next kernel's weights are in");
      if (same) t.op(Op::ret, {});  // (else the ret below)
    }
    t.label("x" + G);
    t.op(Op::ret, {});
  }

  t.task(tn.red, TaskKind::local, id_red, -1, -1, false, false, "the reduce of kernel r8");
  dispatch(t, kRed, range(n), "r", [&](int64_t l) {
    t.op(Op::mov, {reg(kRed), imm(l + 1)});
    red_body(c, static_cast<size_t>(l), t, tn);
  });

  std::vector<int64_t> outs, gathers;  // r8 values (kernel + 1) of the kernels with a reader, a conv reader
  for (size_t l = 0; l + 1 < n; ++l) {
    outs.push_back(static_cast<int64_t>(l) + 1);
    if (c.kernels[l + 1].spatial() && !follower(c, l + 1)) gathers.push_back(static_cast<int64_t>(l) + 1);
  }
  if (!outs.empty()) {
    t.task(tn.out, TaskKind::local, id_out, -1, -1, false, false, "the hand-off of kernel r8 - 1 at its chain ends");
    dispatch(t, kRed, outs, "o", [&](int64_t m) {
      t.if_("last" + std::to_string(m - 1));
      out_first(c, static_cast<size_t>(m - 1), t, tn);
      t.endif();
      t.op(Op::ret, {});
    });
  }
  // Kernel r's im2col gather at the chain ends handing its x values off (`task`, sending on `out`),
  // then, if a follower comes next, that one's (gsf, r11 the follower).
  auto gather_case = [&](size_t r, const std::string& task, const std::string& label, const std::string& out) {
    const DenseKernel& nk = c.kernels[r];
    const ConvWalk cw = conv_walk(c, r);
    const bool fw = r + 1 < n && follower(c, r + 1);
    t.if_("last" + std::to_string(handoff_from(c, r)));
    if (!nk.spatial()) {  // a dense follower: its holder's rows in one send (out_first's source)
      if (fw) t.op(Op::mov, {reg(kFollow), imm(static_cast<int64_t>(r) + 1)});
      t.op_async(mov, {out, rows_source(c, r)}, fw ? "gsf" : "");
      t.endif();
      t.op(Op::ret, {});
      return;
    }
    gather_ops(t, task, label, "gx" + std::to_string(r), out, cw.H * cw.W * nk.cblk, nk.samples, kRt, mov, false,
               [&] { if (fw) t.op(Op::mov, {reg(kFollow), imm(static_cast<int64_t>(r) + 1)}); }, fw ? "gsf" : "");
    t.endif();
    t.op(Op::ret, {});
  };
  if (!gathers.empty()) {
    t.task(tn.gs, TaskKind::local, kIdGs, -1, -1, false, false, "one sample's im2col rows of kernel r8 - 1's output per send");
    dispatch(t, kRed, gathers, "g", [&](int64_t m) {
      const std::string P = std::to_string(m - 1);
      gather_case(static_cast<size_t>(m), tn.gs, "gz" + P, "yout" + P);
    });
  }
  std::vector<int64_t> sent;  // the followers the chain ends send (those of the graph input: its sources, input_sends)
  for (const int64_t m : fl)
    if (c.kernels[static_cast<size_t>(m)].src >= 0) sent.push_back(m);
  if (!sent.empty()) {
    t.task("gsf", TaskKind::local, kIdGsf, -1, -1, false, false, "follower r11's x values: one sample's im2col rows (a Conv) or its holder's rows per send");
    dispatch(t, kFollow, sent, "f", [&](int64_t m) {
      const std::string F = std::to_string(m);
      gather_case(static_cast<size_t>(m), "gsf", "gf" + F, "xo" + F);
    });
  }

  // The loads, r10: kernel r10's (r10 < n), then (training) the backward pass's reload
  // c.reloads[r10 - n]. Kernel m's load waits until the previous kernel of its orientation is done
  // with the buffer; a reload until the backward pass of the kernel whose block the buffer holds is.
  const size_t nl = n + c.reloads.size();
  auto kernel_of = [&](int64_t r) { return static_cast<size_t>(r < static_cast<int64_t>(n) ? r : c.reloads[static_cast<size_t>(r) - n]); };
  t.task(tn.ld, TaskKind::local, kIdLd, -1, -1, true, false, "take this PE's block of kernel r10 from the line's weight stream");
  dispatch(t, kLoad, range(nl), "l", [&](int64_t r) {
    const std::string M = std::to_string(r);
    const size_t m = kernel_of(r);
    if (r == 0) setup(c, 0, t);
    const bool reload = r >= static_cast<int64_t>(n);
    const int64_t pm = reload ? buffer_after(c, m) : buffer_before(c, m);
    if (pm >= 0) {
      if (reload)  // < 0: kernel pm's backward is done here (r13 counts them, from the last kernel)
        t.op(Op::sub, {reg(kRt), imm(static_cast<int64_t>(n) - pm - 1), reg(kBdone)});
      else  // < 0: kernel pm's x tasks are done
        t.op(Op::sub, {reg(kRt), imm(pm), reg(kXdone)});
      t.op(Op::blz, {reg(kRt), "lgo" + M});
      t.op(Op::block, {tn.ld}, "the buffer is kernel " + std::to_string(pm) + "'s still");
      t.op(Op::activate, {tn.ld});
      t.op(Op::ret, {});
      t.label("lgo" + M);
    }
    ld_body(c, m, t, tn);
  });
  t.task(tn.ldb, TaskKind::local, kIdLd + 1);
  dispatch(t, kLoad, range(nl), "lb", [&](int64_t r) { ldb_body(c, kernel_of(r), t, tn); });
  t.task(tn.ldc, TaskKind::local, kIdLd + 2);
  dispatch(t, kLoad, range(nl), "lc", [&](int64_t r) { ldc_body(c, kernel_of(r), t, tn); });
  t.task(tn.ldd, TaskKind::local, kIdLd + 3, -1, -1, false, false, "kernel r10's block is in place");
  dispatch(t, kLoad, range(nl), "ld", [&](int64_t r) {
    const std::string M = std::to_string(r);
    const size_t m = kernel_of(r);
    t.op(Op::mov, {reg(kLoaded), imm(r + 1)});
    if (r < static_cast<int64_t>(n)) {
      t.op(Op::sub, {reg(kRt), reg(kXdone), imm(r)});
      t.op(Op::bnz, {reg(kRt), "ldn" + M});
      t.op(Op::unblock, {std::string("onx") + group_name(c.kernels[m])}, "its x values are next");
    } else {  // the backward pass of kernel m goes on once the one after it has sent its gradient (r11 counts those)
      t.op(Op::sub, {reg(kRt), reg(kGdone), imm(static_cast<int64_t>(n) - 1 - static_cast<int64_t>(m))});
      t.op(Op::blz, {reg(kRt), "ldn" + M});
      t.op(Op::unblock, {"bdy" + std::to_string(m)}, "its weights are in again");
    }
    t.label("ldn" + M);
    if (r + 1 < static_cast<int64_t>(nl)) {
      t.op(Op::mov, {reg(kLoad), imm(r + 1)});
      t.op(Op::activate, {tn.ld});
    }
    t.op(Op::ret, {});
  });
}

}  // namespace tessera::wafer::detail
