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
#include <optional>
#include <tuple>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "isa/error.hpp"
#include "isa/interrupt.hpp"
#include "isa/npy.hpp"
#include "sim/console.hpp"
#include "sim/params_table.hpp"
#include "sim/run.hpp"
#include "sim/scenario.hpp"
#include "sim/session.hpp"
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
  struct Closure {
    std::string name;
    std::vector<std::string> tensors;
    bool on_checkpoint = false;
  };
  std::vector<Closure> closures;  // called in the interpreter (the parent) through the pipes
};

// Messages from the child: a type byte ('C' a step closure call, 'R' the result), a 64-bit length
// and the payload. A call's payload is a JSON line {"closure", "step", "tensors": [[name, bytes]]}
// followed by the tensors as .npy files; the parent answers one byte: 'c' go on, 's' stop after
// this step (tessera.stop()), 'x' the closure raised (the child stops the run).
void write_all(int fd, const std::string& s);
void send(int fd, char type, const std::string& payload) {
  std::string m(1, type);
  const uint64_t n = payload.size();
  m.append(reinterpret_cast<const char*>(&n), sizeof n);
  m += payload;
  write_all(fd, m);
}

// Thrown in the child when a Python step closure raised: the run stops (nothing written).
struct ClosureRaised : std::runtime_error {
  using std::runtime_error::runtime_error;
};

json diagnostics_json(const std::vector<Diagnostic>& diags) {
  json a = json::array();
  for (const auto& d : diags) a.push_back({{"where", d.where}, {"message", d.message}, {"hint", d.hint}, {"text", d.str()}});
  return a;
}

// In the child: the run, its result as JSON.
json child_run(const Request& r, int out_fd, int in_fd) {
  try {
    sim::Scenario s = r.from_json ? sim::load_scenario_json(json::parse(r.scenario), r.json_file, r.sets)
                                  : sim::load_scenario(r.scenario, r.sets);
    sim::RunOptions ro;
    ro.out_dir = r.out.empty() ? (std::filesystem::path("out") / s.name).string() : r.out;
    ro.check_only = r.check_only;
    std::vector<std::string> checked;
    ro.checked = &checked;
    sim::Session session(std::move(s), ro);
    for (size_t i = 0; i < r.closures.size(); ++i) {
      const auto& c = r.closures[i];
      session.add_step_closure(c.name, c.tensors, [i, out_fd, in_fd, &c](int64_t step, const std::map<std::string, Tensor>& t) {
        json head = {{"closure", i}, {"step", step}, {"tensors", json::array()}};
        std::string blobs;
        for (const auto& name : c.tensors) {
          const std::string b = npy_encode(t.at(name));
          head["tensors"].push_back({name, b.size()});
          blobs += b;
        }
        send(out_fd, 'C', head.dump() + "\n" + blobs);
        char answer = 0;
        while (::read(in_fd, &answer, 1) < 0 && errno == EINTR) {
        }
        if (answer == 's') sim::request_stop();  // the closure called tessera.stop()
        else if (answer != 'c') throw ClosureRaised("step closure '" + c.name + "' raised at step " + std::to_string(step));
      }, c.on_checkpoint);
    }
    const int code = session.run();
    return {{"code", code}, {"out_dir", ro.out_dir}, {"name", session.scenario().name}, {"checked", checked}};
  } catch (const InputError& e) {
    return {{"code", 2}, {"error", "input"}, {"diagnostics", diagnostics_json(e.diagnostics())}};
  } catch (const Interrupted& e) {
    return {{"code", interrupt_exit_code(e.signal)}, {"error", "interrupted"}, {"message", e.what()}, {"phase", current_phase()}};
  } catch (const ClosureRaised& e) {
    return {{"code", 1}, {"error", "closure"}, {"message", e.what()}};
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

py::object run_forked(const Request& r, const py::object& dispatch) {
  int up[2], down[2];  // up: child -> parent messages; down: parent -> child answers
  if (::pipe(up) != 0 || ::pipe(down) != 0) throw std::runtime_error(std::string("tessera: pipe failed: ") + std::strerror(errno));
  std::fflush(nullptr);
  std::cout.flush();
  const pid_t pid = ::fork();
  if (pid < 0) throw std::runtime_error(std::string("tessera: fork failed: ") + std::strerror(errno));
  if (pid == 0) {  // the child: no Python from here on
    ::close(up[0]);
    ::close(down[1]);
    ::signal(SIGINT, SIG_DFL);
    sim::Console::get().set_verbosity(r.quiet ? sim::Verbosity::quiet : sim::Verbosity::normal);
    const json result = child_run(r, up[1], down[0]);
    std::cout.flush();
    std::cerr.flush();
    std::fflush(nullptr);
    send(up[1], 'R', result.dump());
    ::close(up[1]);
    ::_exit(result.value("code", 3));
  }
  ::close(up[1]);
  ::close(down[0]);
  std::string buf;        // bytes received and not yet taken as messages
  std::string result_text;
  bool interrupted = false, have_result = false;
  std::optional<py::error_already_set> raised;  // a step closure's exception, raised after the run
  for (;;) {
    // Whole messages first.
    while (buf.size() >= 9) {
      uint64_t n = 0;
      std::memcpy(&n, buf.data() + 1, sizeof n);
      if (buf.size() < 9 + n) break;
      const char type = buf[0];
      std::string payload = buf.substr(9, n);
      buf.erase(0, 9 + n);
      if (type == 'R') {
        result_text = std::move(payload);
        have_result = true;
        continue;
      }
      // 'C': call the closure in the interpreter, answer the child.
      const size_t nl = payload.find('\n');
      const json head = json::parse(payload.substr(0, nl));
      py::list tensors;
      size_t off = nl + 1;
      for (const auto& t : head["tensors"]) {
        const size_t len = t[1].get<size_t>();
        tensors.append(py::make_tuple(t[0].get<std::string>(), py::bytes(payload.data() + off, len)));
        off += len;
      }
      char answer = 'c';
      try {
        if (py::bool_(dispatch(head["closure"].get<size_t>(), head["step"].get<int64_t>(), tensors))) answer = 's';
      } catch (py::error_already_set& e) {
        if (e.matches(PyExc_KeyboardInterrupt) && !interrupted) {
          interrupted = true;
          ::kill(pid, SIGINT);
        }
        raised.emplace(std::move(e));
        answer = 'x';
      }
      write_all(down[1], std::string(1, answer));
    }
    int n = 0;
    char chunk[65536];
    {
      py::gil_scoped_release release;
      pollfd p{up[0], POLLIN, 0};
      n = ::poll(&p, 1, 100);
      if (n > 0) n = static_cast<int>(::read(up[0], chunk, sizeof chunk));
      else if (n == 0) n = -2;  // timeout
    }
    if (n > 0) {
      buf.append(chunk, static_cast<size_t>(n));
      continue;
    }
    if (n == 0) break;  // EOF: the child is done
    if (n == -1 && errno != EINTR) break;
    if (!interrupted && PyErr_CheckSignals() != 0) {  // Ctrl-C in Python: stop the child like the CLI
      interrupted = true;
      raised.emplace();  // fetches the KeyboardInterrupt
      ::kill(pid, SIGINT);
    }
  }
  ::close(up[0]);
  ::close(down[1]);
  int status = 0;
  {
    py::gil_scoped_release release;
    while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
  }
  if (raised) throw std::move(*raised);  // KeyboardInterrupt, or a closure's exception, after the child stopped
  json result;
  try {
    if (!have_result) throw std::runtime_error("no result");
    result = json::parse(result_text);
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
         const std::vector<std::string>& sets, bool check_only, bool quiet,
         const std::vector<std::tuple<std::string, std::vector<std::string>, bool>>& closures, const py::object& dispatch) {
        Request r{scenario, from_json, json_file, out, sets, check_only, quiet, {}};
        for (const auto& [name, tensors, on_checkpoint] : closures) r.closures.push_back({name, tensors, on_checkpoint});
        return run_forked(r, dispatch);
      },
      py::arg("scenario"), py::arg("from_json"), py::arg("json_file"), py::arg("out"), py::arg("sets"),
      py::arg("check_only"), py::arg("quiet"), py::arg("closures"), py::arg("dispatch"));
  m.def("params", [](const std::string& name) -> py::object {
    json r;
    try {
      const ParamSet set = sim::params_of(name);
      json rows = json::array();
      for (const auto& p : set.all()) {
        const ParamDecl& d = *p.decl;
        json value;
        if (d.type == ParamType::int_list) value = p.value.list;
        else if (d.type == ParamType::boolean) value = p.value.number != 0;
        else if (d.type == ParamType::integer) value = static_cast<int64_t>(p.value.number);
        else value = p.value.number;
        rows.push_back({{"name", d.name}, {"value", value}, {"text", format_param_value(d, p.value)},
                        {"unit", std::string(unit_symbol(d.unit))}, {"range", format_param_range(d)},
                        {"description", d.description}, {"source", p.source}});
      }
      r = {{"target", set.target().kind}, {"preset", set.preset().name}, {"params", rows}};
    } catch (const InputError& e) {
      r = {{"code", 2}, {"error", "input"}, {"diagnostics", diagnostics_json(e.diagnostics())}};
    }
    return py::module_::import("json").attr("loads")(r.dump());
  });
  m.def("version", [] { return sim::version_string(); });
  m.def("commit", [] { return sim::version_commit(); });
}
