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
  // The message without the location suffix.
  const std::string& message() const { return message_; }
  const char* file() const { return file_; }
  int line() const { return line_; }

 private:
  std::string message_;
  const char* file_;
  int line_;
};

// A collective or wait that could not complete in time. Separate type so that callers (and
// tests) can tell a timeout from a shape error.
class TimeoutError : public Error {
 public:
  using Error::Error;
};

// Out of memory on a device: names the tag and the request size.
class OutOfMemoryError : public Error {
 public:
  using Error::Error;
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
#define MOEZERO_CHECK(cond, ...)                                                          \
  do {                                                                                    \
    if (!(cond)) [[unlikely]] {                                                           \
      MOEZERO_THROW("check failed: " #cond ": ", ::moezero::detail::concat(__VA_ARGS__)); \
    }                                                                                     \
  } while (0)
// A check of what the user gave (flags, files, config): the message alone, which must say what
// is wrong and where; MOEZERO_CHECK (an internal invariant) also prints the condition.
#define MOEZERO_REQUIRE(cond, ...) \
  do {                             \
    if (!(cond)) [[unlikely]] {    \
      MOEZERO_THROW(__VA_ARGS__);  \
    }                              \
  } while (0)
