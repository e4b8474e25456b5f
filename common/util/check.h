// BATON_CHECK: broken internal invariants abort with file and line.
// Errors that callers can cause are returned as absl::Status instead.
#pragma once

#include <cstdio>
#include <cstdlib>

namespace baton::internal {
[[noreturn]] inline void check_failed(const char* file, int line, const char* expr,
                                      const char* msg) {
  std::fprintf(stderr, "BATON_CHECK failed at %s:%d: %s%s%s\n", file, line, expr,
               msg[0] ? " -- " : "", msg);
  std::fflush(stderr);
  std::abort();
}
}  // namespace baton::internal

// BATON_CHECK(cond) or BATON_CHECK(cond, "why")
#define BATON_CHECK(cond, ...)                                                        \
  do {                                                                                \
    if (!(cond)) [[unlikely]]                                                         \
      ::baton::internal::check_failed(__FILE__, __LINE__, #cond, "" __VA_ARGS__);    \
  } while (0)

// Return early with the status when an absl::Status expression is not OK.
#define BATON_RETURN_IF_ERROR(expr)                 \
  do {                                              \
    ::absl::Status baton_status_ = (expr);          \
    if (!baton_status_.ok()) return baton_status_; \
  } while (0)

#define BATON_CONCAT_INNER_(a, b) a##b
#define BATON_CONCAT_(a, b) BATON_CONCAT_INNER_(a, b)
// BATON_ASSIGN_OR_RETURN(auto x, StatusOrExpr());
#define BATON_ASSIGN_OR_RETURN(lhs, expr)                                    \
  auto BATON_CONCAT_(baton_sor_, __LINE__) = (expr);                         \
  if (!BATON_CONCAT_(baton_sor_, __LINE__).ok())                             \
    return BATON_CONCAT_(baton_sor_, __LINE__).status();                     \
  lhs = std::move(*BATON_CONCAT_(baton_sor_, __LINE__))
