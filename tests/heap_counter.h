// Counting the heap a test takes: the replacement operator new and delete
// defined here count every block's bytes, the heap in use and the most in use
// since reset_heap_peak(). Include it in one source file of a test
// executable only (the operators are that program's).
#pragma once

#include <malloc.h>

#include <atomic>
#include <cstddef>
#include <cstdlib>
#include <new>

namespace heap_counter {

inline std::atomic<std::size_t> in_use{0};
inline std::atomic<std::size_t> peak{0};

inline void* allocate(std::size_t bytes) {
  void* p = std::malloc(bytes == 0 ? 1 : bytes);
  if (!p) throw std::bad_alloc();
  const std::size_t now = in_use += malloc_usable_size(p);
  std::size_t most = peak.load();
  while (now > most && !peak.compare_exchange_weak(most, now)) {
  }
  return p;
}

inline void release(void* p) {
  if (!p) return;
  in_use -= malloc_usable_size(p);
  std::free(p);
}

}  // namespace heap_counter

// The bytes in use now, and the peak set back to them.
inline std::size_t reset_heap_peak() {
  heap_counter::peak = heap_counter::in_use.load();
  return heap_counter::in_use.load();
}

// The most in use since reset_heap_peak().
inline std::size_t heap_peak() {
  return heap_counter::peak.load();
}

void* operator new(std::size_t bytes) {
  return heap_counter::allocate(bytes);
}
void* operator new[](std::size_t bytes) {
  return heap_counter::allocate(bytes);
}
void operator delete(void* p) noexcept {
  heap_counter::release(p);
}
void operator delete[](void* p) noexcept {
  heap_counter::release(p);
}
void operator delete(void* p, std::size_t) noexcept {
  heap_counter::release(p);
}
void operator delete[](void* p, std::size_t) noexcept {
  heap_counter::release(p);
}
