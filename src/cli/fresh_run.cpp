// A rewritten step trained in a fresh process (see fresh_run.h): the child's
// command line, the child run with its output in files, its JSON line read.
#include "cli/fresh_run.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <sstream>
#include <stdexcept>

#include "cli/commands.h"
#include "runtime/memory.h"
#include "support/files.h"

extern char** environ;

namespace mutwo::cli {

namespace {

namespace fs = std::filesystem;

// An argument as a POSIX shell reads it back: quoted unless plainly safe.
std::string shell_word(const std::string& a) {
  if (!a.empty() && a.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_./=:,+") ==
                        std::string::npos)
    return a;
  std::string q = "'";
  for (char c : a) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

std::string shell_line(const std::vector<std::string>& argv) {
  std::string s;
  for (const std::string& a : argv) s += (s.empty() ? "" : " ") + shell_word(a);
  return s;
}

// The executable the child runs: this one, unless a test names a wrapper.
std::string own_executable() {
  if (const char* exe = std::getenv("MUTWO_TEST_FRESH_EXE"); exe && *exe) return exe;
  return this_executable();
}

// The child's exit: its code, or -signal where a signal ended it. `err` empty: stderr passed on.
int spawn_and_wait(const std::vector<std::string>& argv, const std::string& out, const std::string& err) {
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&fa, 1, out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (!err.empty()) posix_spawn_file_actions_addopen(&fa, 2, err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid = 0;
  const int rc = posix_spawn(&pid, args[0], &fa, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  if (rc != 0) throw std::runtime_error(fmt::format("could not start {}: {}", argv[0], std::strerror(rc)));
  int status = 0;
  while (waitpid(pid, &status, 0) < 0)
    if (errno != EINTR) throw std::runtime_error(fmt::format("waiting for {}: {}", argv[0], std::strerror(errno)));
  return WIFEXITED(status) ? WEXITSTATUS(status) : -WTERMSIG(status);
}

// The last non-empty line of `text` ("" if none).
std::string last_line(const std::string& text) {
  std::istringstream in(text);
  std::string line, last;
  while (std::getline(in, line))
    if (line.find_first_not_of(" \t\r") != std::string::npos) last = line;
  return last;
}

// mutwo's own out-of-memory line, or an error line that says so in a CUDA
// library's words (a child whose cuBLAS could not make its handle on a full
// card: CUBLAS_STATUS_ALLOC_FAILED; runtime::says_out_of_memory).
bool ran_out_of_memory(const std::string& err) {
  std::istringstream in(err);
  for (std::string line; std::getline(in, line);)
    if (line.rfind(kOutOfMemoryLine, 0) == 0 || (line.rfind("mutwo: ", 0) == 0 && runtime::says_out_of_memory(line)))
      return true;
  return false;
}

}  // namespace

std::string this_executable() { return fs::read_symlink("/proc/self/exe").string(); }

int run_child(const std::vector<std::string>& argv, const std::string& out) { return spawn_and_wait(argv, out, ""); }

std::vector<std::string> fresh_run_argv(const std::string& exe, const std::string& graph_path, const FreshOptions& o) {
  std::vector<std::string> argv{exe, "run", "--graph", graph_path, "--device", o.device.name};
  // The cap as bytes: `free` read again in the child would be what is free then.
  if (const int64_t cap = o.device_memory_bytes >= 0 ? o.device_memory_bytes : o.device.memory_cap(o.opened); cap > 0) {
    argv.push_back("--device-memory");
    argv.push_back(std::to_string(cap));
  }
  for (std::string a : {std::string("--seed"), std::to_string(o.device.seed), std::string("--steps"),
                        std::to_string(kFreshRunSteps), std::string("--json")})
    argv.push_back(std::move(a));
  // Said either way where the child's default differs by device (on CUDA, run --graph under a cap takes the arena).
  if (o.arena) argv.push_back("--arena");
  else if (o.opened.is_cuda()) argv.push_back("--no-arena");
  return argv;
}

FreshRun run_fresh(const std::string& step_text, const std::string& what, const FreshOptions& o) {
  static int count = 0;
  const std::string stem = (fs::temp_directory_path() / fmt::format("mutwo-fresh-{}-{}", getpid(), ++count)).string();
  const std::string graph = stem + ".ir", out = stem + ".stdout", err = stem + ".stderr";
  write_file(graph, step_text);
  const std::vector<std::string> argv = fresh_run_argv(own_executable(), graph, o);
  const auto t0 = std::chrono::steady_clock::now();
  const int code = spawn_and_wait(argv, out, err);
  FreshRun r;
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const std::string stdout_text = read_file(out), stderr_text = read_file(err);
  fs::remove(out);
  fs::remove(err);
  auto fail = [&](const std::string& why) {
    const std::string said = last_line(stderr_text);
    throw std::runtime_error(fmt::format(
        "{}: the fresh-process check of {} failed: {}{}; re-run it alone to see why: {}{}", o.command, what, why,
        said.empty() ? "" : fmt::format(" (its stderr: {})", said), shell_line(argv),
        o.skip_flag ? fmt::format(" (or skip the check with {})", o.skip_flag) : ""));
  };
  if (code != 0 && ran_out_of_memory(stderr_text)) {
    r.out_of_memory = true;
  } else if (code == kExitInfeasible && o.arena) {  // its arena refused over the cap: it does not fit either
    r.arena_over_cap = true;
  } else if (code != 0) {
    fail(code < 0 ? fmt::format("the child was killed by signal {}", -code) : fmt::format("the child exited {}", code));
  } else {
    const nlohmann::json j = nlohmann::json::parse(last_line(stdout_text), nullptr, /*allow_exceptions=*/false);
    if (!j.is_object() || j.value("command", "") != "run" || !j.contains("peak_bytes") ||
        !j["peak_bytes"].is_number_integer() || !j.contains("device_peak_bytes") ||
        !j["device_peak_bytes"].is_number_integer())
      fail(fmt::format("its last line on stdout is not `run --json`'s JSON object with peak_bytes and "
                       "device_peak_bytes: '{}'",
                       last_line(stdout_text).substr(0, 200)));
    r.peak_bytes = j["peak_bytes"].get<int64_t>();
    r.device_peak_bytes = j["device_peak_bytes"].get<int64_t>();
  }
  fs::remove(graph);  // kept above, for the command that re-runs it, where the check failed
  return r;
}

}  // namespace mutwo::cli
