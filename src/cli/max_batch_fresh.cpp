// max-batch's fresh-process check's shared pieces (see max_batch_fresh.h).
#include "cli/max_batch_fresh.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>

#include "support/units.h"

namespace mutwo::cli {

using nlohmann::json;

json fresh_try(int64_t b, const FreshRun& r, int64_t cap, bool arena) {
  const int64_t high = std::max(r.peak_bytes, r.device_peak_bytes);
  json t{{"batch", b},
         {"fits", r.measured() && high <= cap},
         {"out_of_memory", r.out_of_memory},
         {"peak_bytes", r.measured() ? json(r.peak_bytes) : json()},
         {"device_peak_bytes", r.measured() ? json(r.device_peak_bytes) : json()},
         {"seconds", r.seconds}};
  if (arena) t["arena_over_cap"] = r.arena_over_cap;
  return t;
}

int64_t fresh_step_down(int64_t b, const FreshRun& r, int64_t cap) {
  const int64_t high = std::max(r.peak_bytes, r.device_peak_bytes);
  const int64_t per_sample = std::max<int64_t>(1, high / b);
  const int64_t down = !r.measured() ? b / 20 : (high - cap + per_sample - 1) / per_sample;
  return b - std::max<int64_t>(1, down);
}

std::string fresh_warning(const std::string& planner, int64_t b, const FreshRun& r, int64_t cap, int64_t next,
                          bool more) {
  const int64_t high = std::max(r.peak_bytes, r.device_peak_bytes);
  return fmt::format("max-batch: {}: batch {} fitted in this process but not in a fresh one ({}){}", planner, b,
                     r.out_of_memory    ? std::string("out of memory")
                     : r.arena_over_cap ? std::string("its arena passed --memory")
                                        : fmt::format("peak {}, {} over --memory", format_bytes(high),
                                                      format_bytes(high - cap)),
                     more && next > 0 ? fmt::format("; trying {} and below", next) : "");
}

json fresh_summary(const json& tries, int64_t cap) {
  const json& last = tries.back();
  return {{"batch", last["batch"]},
          {"fits", last["fits"]},
          {"peak_bytes", last["peak_bytes"]},
          {"device_peak_bytes", last["device_peak_bytes"]},
          {"margin_bytes", last["peak_bytes"].is_null()
                               ? json()
                               : json(cap - std::max(last["peak_bytes"].get<int64_t>(),
                                                     last["device_peak_bytes"].get<int64_t>()))},
          {"seconds", last["seconds"]},
          {"tries", tries}};
}

std::string fresh_cell(const json& f) {
  if (f.is_null()) return "not run";
  if (f["margin_bytes"].is_null()) return fmt::format("batch {}: OUT OF MEMORY", f["batch"].get<int64_t>());
  const int64_t margin = f["margin_bytes"].get<int64_t>();
  return f["fits"].get<bool>() ? fmt::format("fits, {} to spare", format_bytes(margin))
                               : fmt::format("batch {}: {} OVER", f["batch"].get<int64_t>(), format_bytes(-margin));
}

std::string unconfirmed_text(const std::vector<std::string>& planners) {
  return fmt::format("max-batch: an answer fitted in this process but not in a fresh one, after {} tries each: {}; "
                     "the rows say what each fresh process measured (their max_batch is the last batch tried, "
                     "unconfirmed); lower --memory by the overshoot, or re-run max-batch",
                     kFreshTries, fmt::join(planners, "; "));
}

std::vector<std::string> planner_list(const std::string& planners) {
  std::vector<std::string> v;
  size_t pos = 0;
  while (pos <= planners.size()) {
    size_t c = planners.find(',', pos);
    v.push_back(planners.substr(pos, c == std::string::npos ? std::string::npos : c - pos));
    if (c == std::string::npos) break;
    pos = c + 1;
  }
  return v;
}

}  // namespace mutwo::cli
