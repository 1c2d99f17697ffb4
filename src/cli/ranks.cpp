// Data-parallel runs under torchrun (see ranks.h).
#include "cli/ranks.h"

#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <memory>

#include "support/error.h"

namespace mutwo::cli {

namespace {

std::unique_ptr<runtime::ProcessGroup>& group() {
  static std::unique_ptr<runtime::ProcessGroup> g;
  return g;
}

int env_int(const char* name, int dflt) {
  const char* s = std::getenv(name);
  if (!s || !*s) return dflt;
  char* end = nullptr;
  long v = std::strtol(s, &end, 10);
  MUTWO_CHECK(*end == '\0' && v >= 0 && v < (1L << 30), "{}={} is not a number; torchrun sets it, or unset it", name, s);
  return static_cast<int>(v);
}

std::string env_str(const char* name, const char* dflt) {
  const char* s = std::getenv(name);
  return s && *s ? s : dflt;
}

}  // namespace

std::optional<runtime::Launch> launch_from_env() {
  runtime::Launch l;
  l.world_size = env_int("WORLD_SIZE", 1);
  if (l.world_size <= 1) return std::nullopt;
  MUTWO_CHECK(std::getenv("RANK"), "WORLD_SIZE={} but RANK is not set; launch with torchrun --nproc-per-node N", l.world_size);
  l.rank = env_int("RANK", 0);
  l.local_rank = env_int("LOCAL_RANK", l.rank);
  l.master_addr = env_str("MASTER_ADDR", "127.0.0.1");
  l.master_port = env_int("MASTER_PORT", 29500);
  l.agent_store = env_str("TORCHELASTIC_USE_AGENT_STORE", "") == "True";
  l.gloo_interface = env_str("GLOO_SOCKET_IFNAME", "");
  return l;
}

void join_ranks(const runtime::Launch& l, std::string& device) {
  if (device.rfind("cuda", 0) == 0) {
    MUTWO_CHECK(device == "cuda", "--device {} on several ranks: give --device cuda; rank r runs on cuda:LOCAL_RANK", device);
    device = "cuda:" + std::to_string(l.local_rank);
  }
  group() = std::make_unique<runtime::ProcessGroup>(l, c10::Device(device));
  runtime::set_process_group(group().get());
  if (l.rank > 0) {  // rank 0 prints what one process would; errors still reach stderr
    std::fflush(stdout);
    int null = ::open("/dev/null", O_WRONLY);
    if (null >= 0) {
      ::dup2(null, STDOUT_FILENO);
      ::close(null);
    }
  }
}

void leave_ranks() {
  if (!group()) return;
  group()->barrier();
  runtime::set_process_group(nullptr);
  group().reset();
}

runtime::ProcessGroup* ranks() { return group().get(); }
int rank() { return group() ? group()->rank() : 0; }
int world_size() { return group() ? group()->world_size() : 1; }

std::string rank_dir(const std::string& out) { return rank() == 0 ? out : fmt::format("{}/rank{}", out, rank()); }

std::vector<double> rank_mean(std::vector<double> values) {
  return group() ? group()->mean(std::move(values)) : values;
}

void add_rank_json(nlohmann::json& j) {
  j["rank"] = rank();
  j["world_size"] = world_size();
  if (group()) j["backend"] = group()->backend();
}

}  // namespace mutwo::cli
