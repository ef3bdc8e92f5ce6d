// core/output_file.cpp — checked output files (output_file.h).
#include "core/output_file.h"

#include <cerrno>
#include <cstring>
#include <utility>

#include "core/error.h"

namespace moezero {

OutputFile::OutputFile(const std::string& path, bool append, std::string what)
    : path_(path), what_(std::move(what)) {
  f_ = std::fopen(path.c_str(), append ? "ab" : "wb");
  if (!f_) fail("open", errno);
}

OutputFile::OutputFile(OutputFile&& other) noexcept
    : f_(std::exchange(other.f_, nullptr)),
      path_(std::move(other.path_)),
      what_(std::move(other.what_)) {}

OutputFile& OutputFile::operator=(OutputFile&& other) noexcept {
  if (this != &other) {
    if (f_) std::fclose(f_);
    f_ = std::exchange(other.f_, nullptr);
    path_ = std::move(other.path_);
    what_ = std::move(other.what_);
  }
  return *this;
}

OutputFile::~OutputFile() {
  if (f_) std::fclose(f_);
}

void OutputFile::fail(const char* step, int err) {
  if (f_ && std::string_view(step) != "close") std::fclose(f_);
  f_ = nullptr;
  MOEZERO_USER_ERROR(what_, ": cannot ", step, " '", path_,
                     "': ", err ? std::strerror(err) : "unknown error");
}

void OutputFile::write(std::string_view bytes) {
  MOEZERO_CHECK(f_, "OutputFile::write on a closed file '", path_, "'");
  errno = 0;
  if (std::fwrite(bytes.data(), 1, bytes.size(), f_) != bytes.size()) fail("write", errno);
}

void OutputFile::flush() {
  MOEZERO_CHECK(f_, "OutputFile::flush on a closed file '", path_, "'");
  errno = 0;
  if (std::fflush(f_) != 0) fail("write", errno);
}

void OutputFile::close() {
  if (!f_) return;
  flush();
  errno = 0;
  const int rc = std::fclose(std::exchange(f_, nullptr));
  if (rc != 0) fail("close", errno);
}

void write_output_file(const std::string& path, std::string_view text, std::string_view what) {
  OutputFile f(path, /*append=*/false, std::string(what));
  f.write(text);
  f.close();
}

}  // namespace moezero
