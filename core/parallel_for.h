// One thread-pool loop for the whole code base: fn(i) for every i in [0, n) on up to `threads`
// threads (0: one per hardware thread), each taking the next index as it finishes one.
#pragma once

#include <cstddef>
#include <functional>

namespace loom {

// Returns once every fn(i) has returned. The calling thread works too. `fn` must not throw, and
// calls for different i run concurrently (serialise shared state yourself).
void parallel_for(std::size_t n, int threads, const std::function<void(std::size_t)>& fn);

// `threads` if positive, else the hardware threads (at least 1).
unsigned thread_count(int threads);

}  // namespace loom
