// What an AllocationSource (runtime/memory.h) served ahead of a device's
// allocator: the one rule both allocator wrappers follow, the counting CPU
// allocator (memory.cpp) and the CUDA caching allocator's (cuda_source.cpp).
// The source installed is asked first, for allocations on the thread that
// installed it (the executor's); each address it gave is remembered with it,
// so that the free of that address goes back to it, whichever thread frees.
#pragma once

#include <cstddef>
#include <memory>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <utility>

#include "runtime/memory.h"

namespace mutwo::runtime {

class Served {
 public:
  // Installs `source` for this thread's allocations (null: none); returns the one before.
  std::shared_ptr<AllocationSource> set(std::shared_ptr<AllocationSource> source) {
    std::lock_guard<std::mutex> lock(mu_);
    thread_ = std::this_thread::get_id();
    std::swap(source_, source);
    return source;
  }

  // An address for `bytes` from the source, or null: leave it to the allocator.
  void* take(size_t bytes) {
    std::shared_ptr<AllocationSource> source;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (source_ && bytes > 0 && std::this_thread::get_id() == thread_) source = source_;
    }
    if (!source) return nullptr;
    void* p = source->take(bytes);
    if (p != nullptr) {
      std::lock_guard<std::mutex> lock(mu_);
      served_.emplace(p, std::move(source));
    }
    return p;
  }

  // Whether `p` was served; if so it is given back to its source. Checked
  // before the allocator's own table: the source's memory may start at p too.
  bool give_back(void* p) {
    std::shared_ptr<AllocationSource> source;
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = served_.find(p);
      if (it == served_.end()) return false;
      source = std::move(it->second);
      served_.erase(it);
    }
    source->give_back(p);  // the source, perhaps its memory too, is let go here, outside the lock
    return true;
  }

  bool has(void* p) const {
    std::lock_guard<std::mutex> lock(mu_);
    return served_.count(p) != 0;
  }

 private:
  mutable std::mutex mu_;
  std::unordered_map<void*, std::shared_ptr<AllocationSource>> served_;
  std::shared_ptr<AllocationSource> source_;
  std::thread::id thread_;
};

}  // namespace mutwo::runtime
