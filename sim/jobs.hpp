#pragma once
// Runs of `tessera run` in child processes, for the verbs that run many scenarios (compare, sweep):
// one simulation per process (SystemC elaborates once per process), --jobs at once, reusing an
// up-to-date report, and -- when tessera was built with MPI and started by mpirun -- spread over
// the MPI ranks with dynamic load balancing (docs/sweep.md).
#include <nlohmann/json.hpp>
#include <cstdint>
#include <string>
#include <vector>

#include "sim/compare.hpp"

namespace tessera::sim {

// One run: `tessera run SCENARIO --out DIR --quiet [--no-numerics] [--set S]...`.
struct Job {
  std::string scenario_file;  // absolute
  std::string name;           // what the progress lines and error rows call it
  std::string dir;            // OUT/NAME: the run's output directory
  std::string log;            // OUT/NAME/run.log, where the run's stderr ends up
  std::string log_tmp;        // a sibling of OUT/NAME while it runs: the run replaces OUT/NAME as a whole
  std::string target;         // "neuroncore/trn1"
  std::vector<std::string> sets;  // --set arguments of this run
  nlohmann::json resolved;        // the scenario as the run will resolve it (with `sets`)
};

// The report in job.dir when it is newer than the scenario, the files it names and the simulator,
// and records the same resolved scenario; nothing otherwise (why_not says why, when there was one).
std::optional<nlohmann::json> reusable_report(const Job& job, const std::string& exe, std::string& why_not);

// A result row for a scenario that could not run.
CompareResult error_row(const std::string& name, const std::string& file, const std::string& detail);

// FNV-1a of a string, continuing from `h` (a short, stable key: directory names, run lists).
uint64_t string_hash(const std::string& s, uint64_t h = 1469598103934665603ULL);

// A name usable as a directory ("scenario" for an empty or dot name).
std::string safe_dir_name(const std::string& name);

// The form load_scenario records in Scenario::file.
std::string abs_path(const std::string& p);

struct Scenario;
// The job that runs scenario `s` (its file `scenario_file`) into out_root/dir_name with `sets`,
// shown as `name`: the run's directory and logs, its target and resolved scenario.
Job job_for(const Scenario& s, const std::string& scenario_file, const std::string& name, const std::string& out_root,
            const std::string& dir_name, std::vector<std::string> sets);

struct JobsOptions {
  int jobs = 1;               // child processes at once (per MPI rank)
  bool no_numerics = false;   // --no-numerics on every run
  std::string exe = "/proc/self/exe";
  std::string what = "run";   // the verb, for messages
};

// Runs every job and returns its result, in the order of `queue`. Progress lines on stderr. With
// MPI (distributed() true) every rank must call it with the same queue: rank 0 hands out the jobs
// as ranks ask for them and returns the results; the other ranks run what they are given and
// return an empty vector. Throws Interrupted after SIGINT (the children stopped).
std::vector<CompareResult> run_jobs(const std::vector<Job>& queue, const JobsOptions& opt);

// MPI: true when tessera was built with MPI and runs under mpirun with more than one rank (MPI is
// initialised on the first call); rank() is 0 otherwise. finish_distributed() ends MPI (at exit).
bool distributed();
int rank();
int ranks();
void finish_distributed();
// After an error on one rank: ends every rank's process with `code` (the others may wait for it).
// Does nothing without MPI.
void abort_distributed(int code);

}  // namespace tessera::sim
