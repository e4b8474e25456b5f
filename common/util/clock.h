#pragma once
// Time helpers shared by the services and tools: intervals on the steady
// clock in milliseconds, and wall-clock time as Unix milliseconds.
#include <chrono>
#include <cstdint>

namespace baton {

using SteadyClock = std::chrono::steady_clock;

// end - begin, milliseconds (fractional).
inline double ms_between(SteadyClock::time_point begin, SteadyClock::time_point end) {
  return std::chrono::duration<double, std::milli>(end - begin).count();
}

// now - start, milliseconds (fractional).
inline double ms_since(SteadyClock::time_point start) { return ms_between(start, SteadyClock::now()); }

// Now as milliseconds since the Unix epoch (wall clock).
inline int64_t unix_ms_now() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace baton
