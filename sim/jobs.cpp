#include "sim/jobs.hpp"

#include "sim/scenario.hpp"

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <stdexcept>
#include <thread>

#ifdef TESSERA_HAVE_MPI
#include <mpi.h>
#endif

#include "isa/error.hpp"
#include "isa/fileio.hpp"
#include "isa/host_threads.hpp"
#include "sim/console.hpp"
#include "sim/report.hpp"
#include "sim/run.hpp"

extern char** environ;

namespace tessera::sim {

using json = nlohmann::json;
namespace fs = std::filesystem;

namespace {

// The run's stderr into OUT/NAME/run.log once it has ended (OUT/NAME is the new run's directory, or
// the previous one when the run failed, or a new one holding only the log).
void keep_log(const Job& job) {
  std::error_code ec;
  if (!fs::exists(job.dir, ec)) {
    fs::create_directories(job.dir, ec);
    write_file_atomic((fs::path(job.dir) / ".tessera-run").string(), "The output directory of a tessera run.\n");
  }
  fs::rename(job.log_tmp, job.log, ec);
  if (ec) fs::remove(job.log_tmp, ec);
}

// Every absolute path of an existing file named in the resolved scenario (model, program, inputs).
void referenced_files(const json& j, std::vector<fs::path>& out) {
  if (j.is_object() || j.is_array()) {
    for (const auto& v : j) referenced_files(v, out);
  } else if (j.is_string()) {
    const std::string s = j.get<std::string>();
    std::error_code ec;
    if (!s.empty() && s[0] == '/' && fs::is_regular_file(s, ec)) out.emplace_back(s);
  }
}

std::string first_line_of(const std::string& path) {
  std::ifstream f(path);
  std::string line;
  while (std::getline(f, line)) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    if (line.rfind("error: ", 0) == 0) line = line.substr(7);
    return line;
  }
  return "";
}

std::string fmt_wall(double s) {
  char b[32];
  std::snprintf(b, sizeof b, "%.1f s", s);
  return b;
}

// `tessera run` for one job in a child process (stdin, stdout /dev/null; stderr to its log).
pid_t spawn(const Job& job, const JobsOptions& opt) {
  fs::create_directories(fs::path(job.log_tmp).parent_path());
  std::vector<std::string> args = {"tessera", "run", job.scenario_file, "--out", job.dir, "--quiet"};
  if (opt.no_numerics) args.push_back("--no-numerics");
  for (const auto& st : job.sets) args.insert(args.end(), {"--set", st});
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&fa, STDOUT_FILENO, "/dev/null", O_WRONLY, 0);
  posix_spawn_file_actions_addopen(&fa, STDERR_FILENO, job.log_tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  // N runs at once share the host's threads: each child's numerics get hardware_concurrency / N
  // (TESSERA_HOST_THREADS, isa/host_threads.hpp), unless the user set it.
  std::vector<std::string> env_s;
  // (not the MPI launcher's variables: a child run under a distributed sweep is one process, not
  // a rank of a partitioned fabric -- sim/fabric_ranks.hpp)
  for (char** e = environ; *e; ++e)
    if (std::strncmp(*e, "OMPI_", 5) != 0 && std::strncmp(*e, "PMIX_", 5) != 0 && std::strncmp(*e, "PMI_", 4) != 0) env_s.emplace_back(*e);
  if (opt.jobs > 1 && !std::getenv("TESSERA_HOST_THREADS"))
    env_s.push_back("TESSERA_HOST_THREADS=" + std::to_string(std::max(1u, host_threads() / static_cast<unsigned>(opt.jobs))));
  std::vector<char*> envp;
  for (auto& e : env_s) envp.push_back(e.data());
  envp.push_back(nullptr);
  pid_t pid = 0;
  const int rc = posix_spawn(&pid, opt.exe.c_str(), &fa, nullptr, argv.data(), envp.data());
  posix_spawn_file_actions_destroy(&fa);
  if (rc != 0) throw std::runtime_error("cannot start " + opt.exe + ": " + std::strerror(rc));
  Console::get().detail(opt.what + ": started " + job.name + " (pid " + std::to_string(pid) + ")");
  return pid;
}

// The result of a finished run from its exit status and its output directory.
CompareResult result_of(const Job& job, int status, const std::string& first_log_line, std::string& what) {
  CompareResult cr;
  if (WIFEXITED(status) && (WEXITSTATUS(status) == 0 || WEXITSTATUS(status) == 1)) {
    const fs::path rp = fs::path(job.dir) / "report.json";
    std::ifstream f(rp, std::ios::binary);
    json r = json::parse(f, nullptr, false);
    if (r.is_discarded() || !r.is_object()) {
      cr = error_row(job.name, job.scenario_file, "exit " + std::to_string(WEXITSTATUS(status)) + " but no readable report.json in " + job.dir);
      cr.target = job.target;
    } else {
      cr = result_from_report(r, rp.string());
      cr.origin = "ran";
      if (WEXITSTATUS(status) == 1 && cr.status == CompareStatus::pass) {
        cr.status = CompareStatus::check_failed;
        if (cr.detail.empty()) cr.detail = first_log_line;
      }
    }
    what = WEXITSTATUS(status) == 0 ? "ok" : "check failed";
    return cr;
  }
  std::string detail = first_log_line;
  if (WIFEXITED(status) && WEXITSTATUS(status) == 130) detail = "interrupted";
  if (WIFEXITED(status) && WEXITSTATUS(status) == 143) detail = "terminated";
  if (WIFSIGNALED(status)) detail = "killed by signal " + std::to_string(WTERMSIG(status));
  if (detail.empty()) detail = "exit " + std::to_string(WIFEXITED(status) ? WEXITSTATUS(status) : -1);
  cr = error_row(job.name, job.scenario_file, detail + " (log: " + job.log + ")");
  cr.target = job.target;
  what = "could not run: " + detail;
  return cr;
}

// The children of this process: started, polled, forwarded a SIGINT.
class Children {
 public:
  struct Done {
    size_t job;
    int status;
    double wall;
  };
  size_t size() const { return running_.size(); }
  void start(size_t j, const Job& job, const JobsOptions& opt) { running_[spawn(job, opt)] = {j, std::chrono::steady_clock::now()}; }
  void interrupt() {
    for (const auto& [pid, r] : running_) ::kill(pid, interrupt_signal());
  }
  // One finished child (its log kept), or none.
  std::optional<Done> poll(const std::vector<Job>& queue) {
    int status = 0;
    const pid_t pid = ::waitpid(-1, &status, WNOHANG);
    if (pid > 0) {
      auto it = running_.find(pid);
      if (it == running_.end()) return std::nullopt;
      const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - it->second.t0).count();
      const size_t j = it->second.job;
      running_.erase(it);
      return Done{j, status, wall};
    }
    if (pid < 0 && errno != EINTR && errno != ECHILD) throw std::runtime_error(std::string("waitpid: ") + std::strerror(errno));
    (void)queue;
    return std::nullopt;
  }

 private:
  struct Running {
    size_t job;
    std::chrono::steady_clock::time_point t0;
  };
  std::map<pid_t, Running> running_;
};

#ifdef TESSERA_HAVE_MPI
bool g_mpi = false, g_mpi_checked = false;
int g_rank = 0, g_ranks = 1;
// Message tags: a rank asks for a job; rank 0 answers with its index (-1: none left); a rank
// reports a finished job {index, wait status, wall time in microseconds}; a rank tells rank 0 it
// was interrupted; rank 0 tells the others to stop.
constexpr int kAsk = 1, kJob = 2, kDone = 3, kInterrupted = 4, kStop = 5;

void init_mpi() {
  if (g_mpi_checked) return;
  g_mpi_checked = true;
  // Only under a launcher: a plain `tessera sweep` never starts MPI (singleton init is slow and
  // chatty). Open MPI, MPICH/Hydra and PMIx set these.
  const char* size = std::getenv("OMPI_COMM_WORLD_SIZE");
  if (!size) size = std::getenv("PMI_SIZE");
  if (!size) size = std::getenv("PMIX_SIZE");
  if (!size || std::atoi(size) <= 1) return;
  int provided = 0;
  MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SINGLE, &provided);
  MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &g_ranks);
  g_mpi = g_ranks > 1;
}
#endif

}  // namespace

uint64_t string_hash(const std::string& s, uint64_t h) {
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ULL;
  return h;
}

std::string safe_dir_name(const std::string& name) {
  std::string s;
  for (char c : name) s += (std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.') ? c : '_';
  return s.empty() || s == "." || s == ".." ? "scenario" : s;
}

std::string abs_path(const std::string& p) { return fs::absolute(p).lexically_normal().string(); }

Job job_for(const Scenario& s, const std::string& scenario_file, const std::string& name, const std::string& out_root,
            const std::string& dir_name, std::vector<std::string> sets) {
  Job job;
  job.scenario_file = scenario_file;
  job.name = name;
  job.dir = (fs::path(out_root) / dir_name).string();
  job.log = (fs::path(job.dir) / "run.log").string();
  job.log_tmp = (fs::path(out_root) / ("." + dir_name + ".run.log")).string();
  job.resolved = s.resolved;
  job.target = s.kind + (s.preset.empty() ? "" : "/" + s.preset);
  job.sets = std::move(sets);
  return job;
}

std::optional<json> reusable_report(const Job& job, const std::string& exe, std::string& why_not) {
  const fs::path rp = fs::path(job.dir) / "report.json";
  std::error_code ec;
  if (!fs::is_regular_file(rp, ec)) return std::nullopt;
  const auto rt = fs::last_write_time(rp, ec);
  if (ec) return std::nullopt;
  std::vector<fs::path> deps = {job.scenario_file, exe};
  referenced_files(job.resolved, deps);
  for (const auto& d : deps) {
    const auto t = fs::last_write_time(d, ec);
    if (ec) continue;
    if (t >= rt) {
      why_not = d.filename().string() + " is newer than the report";
      return std::nullopt;
    }
  }
  std::ifstream f(rp, std::ios::binary);
  json r = json::parse(f, nullptr, false);
  if (r.is_discarded() || !r.is_object() || !r.contains("schema") || r["schema"] != kReportSchema) {
    why_not = "the report is not a " + std::string(kReportSchema) + " document";
    return std::nullopt;
  }
  if (r.value("scenario_file", "") != job.scenario_file || !r.contains("scenario") || r["scenario"] != report_scenario(job.resolved)) {
    why_not = "the report records another scenario";
    return std::nullopt;
  }
  return r;
}

CompareResult error_row(const std::string& name, const std::string& file, const std::string& detail) {
  CompareResult r;
  r.name = name;
  r.scenario_file = file;
  r.status = CompareStatus::error;
  r.detail = detail;
  return r;
}

bool distributed() {
#ifdef TESSERA_HAVE_MPI
  init_mpi();
  return g_mpi;
#else
  return false;
#endif
}

int rank() {
#ifdef TESSERA_HAVE_MPI
  init_mpi();
  return g_rank;
#else
  return 0;
#endif
}

int ranks() {
#ifdef TESSERA_HAVE_MPI
  init_mpi();
  return g_ranks;
#else
  return 1;
#endif
}

void abort_distributed(int code) {
#ifdef TESSERA_HAVE_MPI
  if (g_mpi) MPI_Abort(MPI_COMM_WORLD, code);
#else
  (void)code;
#endif
}

void finish_distributed() {
#ifdef TESSERA_HAVE_MPI
  if (g_mpi) {
    MPI_Finalize();
    g_mpi = false;
  }
#endif
}

std::vector<CompareResult> run_jobs(const std::vector<Job>& queue, const JobsOptions& opt) {
  auto& con = Console::get();
  std::vector<CompareResult> results(queue.size());
  const bool mpi = distributed();
  Children local;
  size_t next = 0, done = 0;
  bool interrupted = false, forwarded = false;
  auto finish = [&](const Children::Done& d, const std::string& first_log_line) {
    const Job& job = queue[d.job];
    ++done;
    std::string what;
    results[d.job] = result_of(job, d.status, first_log_line, what);
    con.info("[" + std::to_string(done) + "/" + std::to_string(queue.size()) + "] " + job.name + ": " + what + ", " + fmt_wall(d.wall));
  };
  // A local child's end: its first log line (read before its log moves into OUT/NAME), its log kept.
  auto reap_local = [&](const Children::Done& d) {
    const std::string first = first_line_of(queue[d.job].log_tmp);
    keep_log(queue[d.job]);
    return first;
  };
  auto stop_children = [&] {
    if (interrupted && !forwarded) {
      // Ctrl-C reaches the children through the process group; a SIGINT sent to this process
      // alone is passed on. Each run then stops without leaving partial outputs.
      local.interrupt();
      forwarded = true;
    }
  };
  auto idle = [] { std::this_thread::sleep_for(std::chrono::milliseconds(10)); };
  // More to start here: not after an interruption.
  auto more = [&] { return !interrupted && next < queue.size(); };
  // One step of this process's own runs: start one in a free slot, or take one that ended; false
  // when there was nothing to do.
  auto local_step = [&] {
    if (more() && local.size() < static_cast<size_t>(opt.jobs)) {
      local.start(next, queue[next], opt);
      ++next;
      return true;
    }
    if (auto d = local.poll(queue)) {
      finish(*d, reap_local(*d));
      return true;
    }
    return false;
  };

  if (!mpi) {
    while (more() || local.size() > 0) {
      interrupted = interrupted || interrupt_requested();
      stop_children();
      if (!local_step()) idle();
    }
    if (interrupted) throw_interrupted();
    return results;
  }

#ifdef TESSERA_HAVE_MPI
  const int me = rank();
  // Every rank built its queue from the same files before anything ran (the barrier), so the
  // queues agree: only indices travel. A rank whose queue differs (the same runs, the same
  // directories and overrides) stops the job.
  MPI_Barrier(MPI_COMM_WORLD);
  {
    uint64_t h = string_hash("");  // over every job's directory and --set, each ended by a newline
    for (const Job& j : queue) {
      h = string_hash(j.dir + "\n", h);
      for (const auto& st : j.sets) h = string_hash(st + "\n", h);
    }
    unsigned long long h0 = h;
    MPI_Bcast(&h0, 1, MPI_UNSIGNED_LONG_LONG, 0, MPI_COMM_WORLD);
    if (h0 != static_cast<unsigned long long>(h)) {
      con.error("MPI rank " + std::to_string(me) + " has other runs to do than rank 0 (" + std::to_string(queue.size()) +
                " of them): do the ranks see the same files? (OUT must be one directory every rank sees; docs/sweep.md)");
      MPI_Abort(MPI_COMM_WORLD, 2);
    }
  }
  if (me == 0) {
    // Rank 0 runs jobs itself and hands the others out as ranks ask (dynamic load balancing: a
    // rank with a long run asks again only when it has a free slot). An interruption here or on
    // any rank stops every rank's runs: no more jobs are handed out and the others are told.
    size_t remote_running = 0;
    int asking = g_ranks - 1;  // ranks not yet told that no job is left
    bool told = false;
    while (more() || local.size() > 0 || remote_running > 0 || asking > 0) {
      interrupted = interrupted || interrupt_requested();
      stop_children();
      if (interrupted && !told) {
        for (int r = 1; r < g_ranks; ++r) {
          int dummy = 0;
          MPI_Send(&dummy, 1, MPI_INT, r, kStop, MPI_COMM_WORLD);
        }
        told = true;
      }
      int flag = 0;
      MPI_Status st;
      MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &flag, &st);
      if (flag && st.MPI_TAG == kAsk) {
        int dummy = 0;
        MPI_Recv(&dummy, 1, MPI_INT, st.MPI_SOURCE, kAsk, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        int j = -1;
        if (more()) {
          j = static_cast<int>(next++);
          ++remote_running;
          con.detail(opt.what + ": " + queue[static_cast<size_t>(j)].name + " to rank " + std::to_string(st.MPI_SOURCE));
        } else {
          --asking;
        }
        MPI_Send(&j, 1, MPI_INT, st.MPI_SOURCE, kJob, MPI_COMM_WORLD);
        continue;
      }
      if (flag && st.MPI_TAG == kDone) {
        long long m[3] = {0, 0, 0};
        MPI_Recv(m, 3, MPI_LONG_LONG, st.MPI_SOURCE, kDone, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        --remote_running;
        finish({static_cast<size_t>(m[0]), static_cast<int>(m[1]), static_cast<double>(m[2]) * 1e-6}, first_line_of(queue[static_cast<size_t>(m[0])].log));
        continue;
      }
      if (flag && st.MPI_TAG == kInterrupted) {
        int dummy = 0;
        MPI_Recv(&dummy, 1, MPI_INT, st.MPI_SOURCE, kInterrupted, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        interrupted = true;
        continue;
      }
      if (!local_step()) idle();
    }
    if (interrupted) throw_interrupted();
    return results;
  }
  // Another rank: ask for a job whenever a slot is free, run it, report it; stop when told none is
  // left. (The reports are in OUT, which every rank sees: docs/sweep.md.) Interrupted here, it
  // tells rank 0 (which stops the others) and asks no more than to be told that nothing is left.
  bool none_left = false, reported = false;
  while (!none_left || local.size() > 0) {
    int flag = 0;
    MPI_Iprobe(0, kStop, MPI_COMM_WORLD, &flag, MPI_STATUS_IGNORE);
    if (flag) {
      int dummy = 0;
      MPI_Recv(&dummy, 1, MPI_INT, 0, kStop, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      interrupted = true;
      reported = true;  // rank 0 knows
    }
    interrupted = interrupted || interrupt_requested();
    stop_children();
    if (interrupted && !reported) {
      int dummy = 0;
      MPI_Send(&dummy, 1, MPI_INT, 0, kInterrupted, MPI_COMM_WORLD);
      reported = true;
    }
    if (!none_left && (interrupted || local.size() < static_cast<size_t>(opt.jobs))) {
      int dummy = 0, j = -1;
      MPI_Send(&dummy, 1, MPI_INT, 0, kAsk, MPI_COMM_WORLD);
      MPI_Recv(&j, 1, MPI_INT, 0, kJob, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      if (j < 0) {
        none_left = true;
      } else if (interrupted) {  // (cannot happen: rank 0 knew before this ask) reported, not run
        long long m[3] = {j, 130 << 8, 0};
        MPI_Send(m, 3, MPI_LONG_LONG, 0, kDone, MPI_COMM_WORLD);
      } else {
        local.start(static_cast<size_t>(j), queue[static_cast<size_t>(j)], opt);
      }
      continue;
    }
    if (auto d = local.poll(queue)) {
      keep_log(queue[d->job]);
      long long m[3] = {static_cast<long long>(d->job), d->status, static_cast<long long>(d->wall * 1e6)};
      MPI_Send(m, 3, MPI_LONG_LONG, 0, kDone, MPI_COMM_WORLD);
    } else {
      idle();
    }
  }
  // (Rank 0 read this rank's reports; its kStop, if it sent one after this rank stopped asking, is
  // still to be received before MPI ends.)
  if (!interrupted) return {};
  throw_interrupted();
#endif
  return {};
}

}  // namespace tessera::sim
