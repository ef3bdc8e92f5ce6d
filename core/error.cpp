// core/error.cpp — moezero::Error and the message building of the check macros (error.h).
#include "core/error.h"

namespace moezero {

namespace {
std::string with_location(const std::string& what, const char* file, int line) {
  return what + " [" + file + ":" + std::to_string(line) + "]";
}
}  // namespace

Error::Error(std::string what, const char* file, int line)
    : Error(std::move(what), file, line, false) {}

Error::Error(std::string what, const char* file, int line, bool user_error)
    : std::runtime_error(user_error ? what : with_location(what, file, line)),
      message_(std::move(what)),
      file_(file),
      line_(line),
      user_error_(user_error) {}

}  // namespace moezero
