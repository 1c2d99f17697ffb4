// The fresh-process check of an answer and its pieces (see max_batch_fresh.h).
#include "cli/max_batch_fresh.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>

#include "support/progress.h"
#include "support/units.h"

namespace mutwo::cli {

using nlohmann::json;

namespace {

// The count to try after `n` did not fit in a fresh process (confirm_fresh's step down). 0 or less: none.
int64_t step_down(int64_t n, const FreshRun& r, int64_t cap) {
  const int64_t high = std::max(r.peak_bytes, r.device_peak_bytes);
  const int64_t per_unit = std::max<int64_t>(1, high / n);
  const int64_t down = !r.measured() ? n / 20 : (high - cap + per_unit - 1) / per_unit;
  return n - std::max<int64_t>(1, down);
}

// "max-batch: mutwo: batch 12 fitted in this process but not in a fresh one (out of memory); trying 11 and below".
std::string warning(const std::string& subject, const FreshRun& r, int64_t cap, int64_t next, bool more) {
  const int64_t high = std::max(r.peak_bytes, r.device_peak_bytes);
  return fmt::format("{} fitted in this process but not in a fresh one ({}){}", subject,
                     r.out_of_memory    ? std::string("out of memory")
                     : r.arena_over_cap ? std::string("its arena passed --memory")
                                        : fmt::format("peak {}, {} over --memory", format_bytes(high),
                                                      format_bytes(high - cap)),
                     more && next > 0 ? fmt::format("; trying {} and below", next) : "");
}

}  // namespace

FreshAnswer confirm_fresh(int64_t n, const FreshCheck& c, Progress& progress) {
  FreshAnswer a;
  json tries = json::array();
  for (int attempt = 0; attempt < kFreshTries && n > 0; ++attempt) {
    const FreshRun r = c.train(n);
    tries.push_back(fresh_try(n, r, c.cap, c.arena, c.key));
    a = {n, tries.back()["fits"].get<bool>(), json()};
    if (a.fits) break;
    const int64_t next = step_down(n, r, c.cap);
    const bool more = attempt + 1 < kFreshTries;
    progress.warn(warning(c.subject(n), r, c.cap, next, more));
    if (more) n = next > 0 ? c.below(next) : 0;
  }
  if (!tries.empty()) a.row = fresh_summary(tries, c.cap, c.key);
  if (n == 0) a.n = 0;
  return a;
}

json fresh_try(int64_t n, const FreshRun& r, int64_t cap, bool arena, const char* key) {
  const int64_t high = std::max(r.peak_bytes, r.device_peak_bytes);
  json t{{key, n},
         {"fits", r.measured() && high <= cap},
         {"out_of_memory", r.out_of_memory},
         {"peak_bytes", r.measured() ? json(r.peak_bytes) : json()},
         {"device_peak_bytes", r.measured() ? json(r.device_peak_bytes) : json()},
         {"seconds", r.seconds}};
  if (arena) t["arena_over_cap"] = r.arena_over_cap;
  return t;
}

json fresh_summary(const json& tries, int64_t cap, const char* key) {
  const json& last = tries.back();
  return {{key, last[key]},
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
