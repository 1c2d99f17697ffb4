// max-batch's search over batches (see batch_search.h).
#include "cli/batch_search.h"

#include <algorithm>
#include <map>

namespace mutwo::cli {

int64_t largest_fitting(int64_t guess, int64_t limit, const std::function<bool(int64_t)>& fits) {
  guess = std::clamp<int64_t>(guess, 1, limit);
  int64_t lo = 0, hi = limit + 1;  // lo fits (0: none known), hi does not
  if (fits(guess)) {
    lo = guess;
    for (int64_t step = 1; lo + step < hi; step *= 2) {
      if (!fits(lo + step)) {
        hi = lo + step;
        break;
      }
      lo += step;
    }
  } else {
    hi = guess;
    for (int64_t step = 1; hi - step > lo; step *= 2) {
      if (fits(hi - step)) {
        lo = hi - step;
        break;
      }
      hi -= step;
    }
  }
  while (hi - lo > 1) {
    const int64_t mid = lo + (hi - lo) / 2;
    (fits(mid) ? lo : hi) = mid;
  }
  return lo;
}

int64_t batch_above(int64_t answer) { return std::max(answer + 1, (answer * 105 + 99) / 100); }

BatchSearch search_batches(int64_t guess, int64_t limit, const std::function<bool(int64_t)>& fits) {
  BatchSearch s;
  std::map<int64_t, bool> seen;
  auto once = [&](int64_t b) {
    auto it = seen.find(b);
    if (it == seen.end()) {
      it = seen.emplace(b, fits(b)).first;
      s.tried.emplace_back(b, it->second);
    }
    return it->second;
  };
  int64_t answer = largest_fitting(guess, limit, once);
  s.first_answer = answer;
  for (;;) {
    s.above = batch_above(answer);
    s.above_fits = answer > 0 && s.above <= limit && once(s.above);
    if (!s.above_fits) break;
    answer = std::max(answer, largest_fitting(s.above, limit, once));  // on from the batch above, which fits
  }
  // The largest that fitted (bisection from a guess may settle below a fit it saw), and whether any fit sits above a miss.
  int64_t lowest_miss = limit + 1;
  for (const auto& [b, fit] : seen) {
    if (fit) {
      s.answer = std::max(s.answer, b);
      s.monotone = s.monotone && b < lowest_miss;
    } else {
      lowest_miss = std::min(lowest_miss, b);
    }
  }
  return s;
}

}  // namespace mutwo::cli
