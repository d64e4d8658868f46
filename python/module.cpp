// tessera._tessera: the C++ side of the Python API (python/tessera/__init__.py). A run elaborates
// SystemC, which a process can do once, so every run happens in a child process forked from the
// Python interpreter: the child loads the scenario and runs it with the same code as `tessera run`
// and reports back through a pipe (a JSON document: the exit code, or the error with its
// diagnostics), then leaves with _exit. The parent waits with the GIL released and forwards Ctrl-C
// (KeyboardInterrupt) to the child, which stops like the CLI does (--out left as it was).
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <new>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "isa/error.hpp"
#include "isa/interrupt.hpp"
#include "sim/console.hpp"
#include "sim/run.hpp"
#include "sim/scenario.hpp"
#include "sim/version.hpp"

namespace py = pybind11;
using json = nlohmann::json;
using namespace tessera;

namespace {

struct Request {
  std::string scenario;   // a path, or JSON text when `from_json`
  bool from_json = false;
  std::string json_file;  // from_json: the file the document stands for (relative paths, the name)
  std::string out;        // empty: out/<name>
  std::vector<std::string> sets;
  bool check_only = false;
  bool quiet = false;
};

json diagnostics_json(const std::vector<Diagnostic>& diags) {
  json a = json::array();
  for (const auto& d : diags) a.push_back({{"where", d.where}, {"message", d.message}, {"hint", d.hint}, {"text", d.str()}});
  return a;
}

// In the child: the run, its result as JSON.
json child_run(const Request& r) {
  try {
    sim::Scenario s = r.from_json ? sim::load_scenario_json(json::parse(r.scenario), r.json_file, r.sets)
                                  : sim::load_scenario(r.scenario, r.sets);
    sim::RunOptions ro;
    ro.out_dir = r.out.empty() ? (std::filesystem::path("out") / s.name).string() : r.out;
    ro.check_only = r.check_only;
    std::vector<std::string> checked;
    ro.checked = &checked;
    const int code = sim::run_scenario(s, ro);
    return {{"code", code}, {"out_dir", ro.out_dir}, {"name", s.name}, {"checked", checked}};
  } catch (const InputError& e) {
    return {{"code", 2}, {"error", "input"}, {"diagnostics", diagnostics_json(e.diagnostics())}};
  } catch (const Interrupted& e) {
    return {{"code", interrupt_exit_code(e.signal)}, {"error", "interrupted"}, {"message", e.what()}, {"phase", current_phase()}};
  } catch (const CheckFailed& e) {
    return {{"code", 1}, {"error", "check"}, {"message", e.what()}};
  } catch (const std::bad_alloc&) {
    return {{"code", 2}, {"error", "input"},
            {"diagnostics", diagnostics_json({{"host memory", std::string("this machine ran out of memory during ") + current_phase(),
                                               "run a smaller model, batch or fabric; run.host_memory sets the budget tessera checks"}})}};
  } catch (const std::exception& e) {
    return {{"code", 3}, {"error", "internal"}, {"message", e.what()}};
  }
}

void write_all(int fd, const std::string& s) {
  size_t off = 0;
  while (off < s.size()) {
    const ssize_t n = ::write(fd, s.data() + off, s.size() - off);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    off += static_cast<size_t>(n);
  }
}

py::dict run_forked(const Request& r) {
  int fds[2];
  if (::pipe(fds) != 0) throw std::runtime_error(std::string("tessera: pipe failed: ") + std::strerror(errno));
  std::fflush(nullptr);
  std::cout.flush();
  const pid_t pid = ::fork();
  if (pid < 0) throw std::runtime_error(std::string("tessera: fork failed: ") + std::strerror(errno));
  if (pid == 0) {  // the child: no Python from here on
    ::close(fds[0]);
    ::signal(SIGINT, SIG_DFL);
    sim::Console::get().set_verbosity(r.quiet ? sim::Verbosity::quiet : sim::Verbosity::normal);
    const json result = child_run(r);
    std::cout.flush();
    std::cerr.flush();
    std::fflush(nullptr);
    write_all(fds[1], result.dump());
    ::close(fds[1]);
    ::_exit(result.value("code", 3));
  }
  ::close(fds[1]);
  std::string text;
  bool interrupted = false;
  for (;;) {
    int n = 0;
    char buf[4096];
    {
      py::gil_scoped_release release;
      pollfd p{fds[0], POLLIN, 0};
      n = ::poll(&p, 1, 100);
      if (n > 0) n = static_cast<int>(::read(fds[0], buf, sizeof buf));
      else if (n == 0) n = -2;  // timeout
    }
    if (n > 0) {
      text.append(buf, static_cast<size_t>(n));
      continue;
    }
    if (n == 0) break;  // EOF: the child is done
    if (n == -1 && errno != EINTR) break;
    if (!interrupted && PyErr_CheckSignals() != 0) {  // Ctrl-C in Python: stop the child like the CLI
      interrupted = true;
      ::kill(pid, SIGINT);
    }
  }
  ::close(fds[0]);
  int status = 0;
  {
    py::gil_scoped_release release;
    while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
  }
  if (interrupted) throw py::error_already_set();  // the KeyboardInterrupt, after the child stopped
  json result;
  try {
    result = json::parse(text);
  } catch (const std::exception&) {
    const std::string how = WIFSIGNALED(status) ? "was killed by signal " + std::to_string(WTERMSIG(status))
                                                : "exited with " + std::to_string(WEXITSTATUS(status));
    result = {{"code", 3}, {"error", "internal"}, {"message", "the run's process " + how + " without a result"}};
  }
  return py::module_::import("json").attr("loads")(result.dump());
}

}  // namespace

PYBIND11_MODULE(_tessera, m) {
  m.doc() = "tessera's C++ side; use the tessera package (python/tessera/__init__.py)";
  m.def(
      "run",
      [](const std::string& scenario, bool from_json, const std::string& json_file, const std::string& out,
         const std::vector<std::string>& sets, bool check_only, bool quiet) {
        Request r{scenario, from_json, json_file, out, sets, check_only, quiet};
        return run_forked(r);
      },
      py::arg("scenario"), py::arg("from_json"), py::arg("json_file"), py::arg("out"), py::arg("sets"),
      py::arg("check_only"), py::arg("quiet"));
  m.def("version", [] { return sim::version_string(); });
  m.def("commit", [] { return sim::version_commit(); });
}
