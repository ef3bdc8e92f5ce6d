// core/error.h — the one exception type of moezero and the checks that throw it.
//
// Library code throws moezero::Error (or a subclass) carrying what failed, where (file:line)
// and the values involved; programs catch at main, print e.what() on one line, exit non-zero.
// MOEZERO_CHECK(cond, ...) streams its trailing arguments into the message, so the values that
// made the check fail are always in the error:
//     MOEZERO_CHECK(a.cols() == b.rows(), "gemm: inner dims differ: ", a.cols(), " vs ", b.rows());
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>

namespace moezero {

class Error : public std::runtime_error {
 public:
  Error(std::string what, const char* file, int line);
  // True for UserError: what the user gave was wrong; what() carries no source location.
  bool user_error() const { return user_error_; }
  // The message without the location suffix.
  const std::string& message() const { return message_; }
  const char* file() const { return file_; }
  int line() const { return line_; }

 protected:
  // user_error: what() is the message alone (no "[file:line]").
  Error(std::string what, const char* file, int line, bool user_error);

 private:
  std::string message_;
  const char* file_;
  int line_;
  bool user_error_ = false;
};

// Wrong input from the user (flags, config, data and checkpoint files, a run that cannot fit):
// what() is the message alone, which must say what is wrong and where; the source location
// (file(), line()) stays available to debuggers but is not printed. Internal errors (Error,
// MOEZERO_CHECK) keep "[file:line]" in what().
class UserError : public Error {
 public:
  UserError(std::string what, const char* file, int line)
      : Error(std::move(what), file, line, true) {}
};

// A collective or wait that could not complete in time. Separate type so that callers (and
// tests) can tell a timeout from a shape error.
class TimeoutError : public Error {
 public:
  using Error::Error;
};

// Out of memory (a device allocator, a host allocation, or a run refused by the memory
// estimate): names what was asked and what was available. A resource limit, not a bug: what()
// carries no source location.
class OutOfMemoryError : public Error {
 public:
  OutOfMemoryError(std::string what, const char* file, int line)
      : Error(std::move(what), file, line, true) {}
};

namespace detail {
template <typename... Args>
std::string concat(Args&&... args) {
  std::ostringstream os;
  (os << ... << std::forward<Args>(args));
  return os.str();
}
}  // namespace detail

}  // namespace moezero

#define MOEZERO_THROW_AS(Type, ...) \
  throw Type(::moezero::detail::concat(__VA_ARGS__), __FILE__, __LINE__)
#define MOEZERO_THROW(...) MOEZERO_THROW_AS(::moezero::Error, __VA_ARGS__)
// Wrong user input (UserError): printed without the source location.
#define MOEZERO_USER_ERROR(...) MOEZERO_THROW_AS(::moezero::UserError, __VA_ARGS__)
#define MOEZERO_CHECK(cond, ...)                                                          \
  do {                                                                                    \
    if (!(cond)) [[unlikely]] {                                                           \
      MOEZERO_THROW("check failed: " #cond ": ", ::moezero::detail::concat(__VA_ARGS__)); \
    }                                                                                     \
  } while (0)
// A check of what the user gave (flags, files, config): throws UserError with the message
// alone, which must say what is wrong and where; MOEZERO_CHECK (an internal invariant) also
// prints the condition and the source location.
#define MOEZERO_REQUIRE(cond, ...)     \
  do {                                 \
    if (!(cond)) [[unlikely]] {        \
      MOEZERO_USER_ERROR(__VA_ARGS__); \
    }                                  \
  } while (0)
