// max-batch's search over batches, on a fit test alone (a batch fits or not),
// so that tests give it a made-up sequence of fits: doubling from a guess,
// then bisection, then a look above the answer; where a batch above fits,
// fitting is not monotone in the batch and the search goes on from there.
#pragma once

#include <cstdint>
#include <functional>
#include <utility>
#include <vector>

namespace mutwo::cli {

// The largest batch in [0, limit] for which `fits` holds, assuming fitting is
// monotone in the batch: `fits` at `guess` (clamped to [1, limit]), then
// batches 1, 2, 4, ... away from it until the answer is bracketed, then
// bisection. From guess 1 this is the doubling search 1, 2, 4, 8, ...
int64_t largest_fitting(int64_t guess, int64_t limit, const std::function<bool(int64_t)>& fits);

// The batch 5% above `answer` (at least one more) that the search tries on its own.
int64_t batch_above(int64_t answer);

struct BatchSearch {
  int64_t answer = 0;    // the largest batch that fitted (0: none did)
  int64_t above = 0;     // the batch above the answer tried last (batch_above(answer))
  bool above_fits = false;  // it fitted (only where it is past `limit`'s reach: never, otherwise)
  // False where a batch fitted above one that did not: the fits seen are not
  // monotone in the batch (the answer is then still the largest that fitted).
  bool monotone = true;
  int64_t first_answer = 0;                   // the first bisection's answer, before any batch above fitted
  std::vector<std::pair<int64_t, bool>> tried;  // each batch tried, once, in order, and whether it fitted
};

// largest_fitting from `guess`, then batch_above(answer) tried: where it fits,
// the search goes on from it (doubling, bisection, a look above again), until
// the batch above the answer does not fit or passes `limit`. `fits` is asked
// once per batch. The answer is the largest batch that fitted.
BatchSearch search_batches(int64_t guess, int64_t limit, const std::function<bool(int64_t)>& fits);

}  // namespace mutwo::cli
