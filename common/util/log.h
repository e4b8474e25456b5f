// One leveled, printf-style logging facility; every line names its function.
// Level from the BATON_LOG_LEVEL environment variable (debug|info|warn|error),
// default info. Output goes to stderr.
#pragma once

namespace baton {

enum class LogLevel { kDebug = 0, kInfo = 1, kWarn = 2, kError = 3 };

LogLevel log_level();
void set_log_level(LogLevel level);
void log_message(LogLevel level, const char* func, const char* fmt, ...)
    __attribute__((format(printf, 3, 4)));

}  // namespace baton

#define BATON_LOG(level, ...)                                                   \
  do {                                                                          \
    if (::baton::LogLevel::level >= ::baton::log_level())                       \
      ::baton::log_message(::baton::LogLevel::level, __func__, __VA_ARGS__);    \
  } while (0)
#define BATON_DEBUG(...) BATON_LOG(kDebug, __VA_ARGS__)
#define BATON_INFO(...) BATON_LOG(kInfo, __VA_ARGS__)
#define BATON_WARN(...) BATON_LOG(kWarn, __VA_ARGS__)
#define BATON_ERROR(...) BATON_LOG(kError, __VA_ARGS__)
