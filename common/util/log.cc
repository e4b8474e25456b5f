#include "common/util/log.h"

#include <atomic>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>

namespace baton {
namespace {

LogLevel level_from_env() {
  const char* env = std::getenv("BATON_LOG_LEVEL");
  if (env == nullptr) return LogLevel::kInfo;
  if (std::strcmp(env, "debug") == 0) return LogLevel::kDebug;
  if (std::strcmp(env, "warn") == 0) return LogLevel::kWarn;
  if (std::strcmp(env, "error") == 0) return LogLevel::kError;
  return LogLevel::kInfo;
}

std::atomic<int>& level_storage() {
  static std::atomic<int> level{static_cast<int>(level_from_env())};
  return level;
}

}  // namespace

LogLevel log_level() { return static_cast<LogLevel>(level_storage().load(std::memory_order_relaxed)); }
void set_log_level(LogLevel level) { level_storage().store(static_cast<int>(level)); }

void log_message(LogLevel level, const char* func, const char* fmt, ...) {
  static const char* kNames[] = {"D", "I", "W", "E"};
  char line[2048];
  timespec ts{};
  clock_gettime(CLOCK_REALTIME, &ts);
  tm local{};
  localtime_r(&ts.tv_sec, &local);
  int n = std::snprintf(line, sizeof(line), "%s %02d:%02d:%02d.%03ld %s: ",
                        kNames[static_cast<int>(level)], local.tm_hour, local.tm_min,
                        local.tm_sec, ts.tv_nsec / 1000000, func);
  va_list args;
  va_start(args, fmt);
  if (n > 0 && n < static_cast<int>(sizeof(line)))
    std::vsnprintf(line + n, sizeof(line) - n, fmt, args);
  va_end(args);
  std::fprintf(stderr, "%s\n", line);
}

}  // namespace baton
