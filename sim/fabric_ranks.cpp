// wafer::RankComm over MPI (sim/fabric_ranks.hpp). Point-to-point messages are byte buffers on one
// tag of a duplicated communicator (MPI keeps their order per pair of ranks); sends are
// non-blocking and their buffers kept until MPI is done with them.
#include "sim/fabric_ranks.hpp"

#include <list>

#include "sim/jobs.hpp"

#ifdef TESSERA_HAVE_MPI
#include <mpi.h>
#endif

namespace tessera::sim {

#ifdef TESSERA_HAVE_MPI
namespace {
class MpiComm final : public wafer::RankComm {
 public:
  MpiComm() {
    MPI_Comm_dup(MPI_COMM_WORLD, &comm_);
    MPI_Comm_rank(comm_, &rank_);
    MPI_Comm_size(comm_, &size_);
  }
  ~MpiComm() override {
    int done = 0;
    MPI_Finalized(&done);
    if (done) return;
    for (auto& p : pending_) MPI_Request_free(&p.req);  // (an error may have ended the run: a receiver may be gone)
    MPI_Comm_free(&comm_);
  }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  void send(int to, std::vector<uint8_t> msg) override {
    pending_.push_back({MPI_REQUEST_NULL, std::move(msg)});
    Pending& p = pending_.back();
    MPI_Isend(p.buf.data(), static_cast<int>(p.buf.size()), MPI_BYTE, to, kTag, comm_, &p.req);
    reap();
  }
  bool poll(int& from, std::vector<uint8_t>& msg) override {
    int flag = 0;
    MPI_Status st;
    MPI_Iprobe(MPI_ANY_SOURCE, kTag, comm_, &flag, &st);
    if (!flag) {
      reap();
      return false;
    }
    int n = 0;
    MPI_Get_count(&st, MPI_BYTE, &n);
    msg.resize(static_cast<size_t>(n));
    MPI_Recv(msg.data(), n, MPI_BYTE, st.MPI_SOURCE, kTag, comm_, MPI_STATUS_IGNORE);
    from = st.MPI_SOURCE;
    return true;
  }
  void bcast(int root, std::vector<uint8_t>& bytes) override {
    uint64_t n = bytes.size();
    MPI_Bcast(&n, 1, MPI_UINT64_T, root, comm_);
    bytes.resize(static_cast<size_t>(n));
    for (uint64_t at = 0; at < n; at += kChunk)
      MPI_Bcast(bytes.data() + at, static_cast<int>(std::min<uint64_t>(kChunk, n - at)), MPI_BYTE, root, comm_);
  }
  void barrier() override {
    for (auto& p : pending_) MPI_Wait(&p.req, MPI_STATUS_IGNORE);  // (received: every rank has drained)
    pending_.clear();
    MPI_Barrier(comm_);
  }
  std::vector<std::vector<uint8_t>> allgather(const std::vector<uint8_t>& mine) override {
    std::vector<std::vector<uint8_t>> all(static_cast<size_t>(size_));
    for (int r = 0; r < size_; ++r) {
      if (r == rank_) all[static_cast<size_t>(r)] = mine;
      bcast(r, all[static_cast<size_t>(r)]);
    }
    return all;
  }

 private:
  static constexpr int kTag = 77;
  static constexpr uint64_t kChunk = uint64_t{1} << 30;
  struct Pending {
    MPI_Request req;
    std::vector<uint8_t> buf;
  };
  void reap() {  // sends MPI has finished with, oldest first
    while (!pending_.empty()) {
      int done = 0;
      MPI_Test(&pending_.front().req, &done, MPI_STATUS_IGNORE);
      if (!done) break;
      pending_.pop_front();
    }
  }
  MPI_Comm comm_ = MPI_COMM_NULL;
  int rank_ = 0, size_ = 1;
  std::list<Pending> pending_;
};
}  // namespace
#endif

std::shared_ptr<wafer::RankComm> fabric_comm() {
#ifdef TESSERA_HAVE_MPI
  if (!distributed()) return nullptr;
  static std::shared_ptr<wafer::RankComm> comm = std::make_shared<MpiComm>();
  return comm;
#else
  return nullptr;
#endif
}

}  // namespace tessera::sim
