// core/output_file.h — every file moezero writes for the user (metrics, --json, --html, an
// export) goes through here: each write, the flush and the close are checked, and a failure
// (a full disk, /dev/full, a missing directory, no permission) throws one UserError that names
// the file and the reason, so that a command never exits 0 having written a short file.
#pragma once

#include <cstdio>
#include <string>
#include <string_view>

namespace moezero {

// Writes `text` to `path` (created or truncated), flushed and closed, every step checked.
// `what` names the output in the error ("--json", "export"): "WHAT: cannot write 'PATH': REASON".
void write_output_file(const std::string& path, std::string_view text, std::string_view what);

// A file written piece by piece (the metrics file: a line per step). Throws UserError naming
// the file when it cannot be opened, and on any failed write, flush or close.
class OutputFile {
 public:
  OutputFile() = default;
  // append: keep what the file holds (a resumed run's metrics); else create or truncate.
  OutputFile(const std::string& path, bool append, std::string what);
  OutputFile(OutputFile&& other) noexcept;
  OutputFile& operator=(OutputFile&& other) noexcept;
  OutputFile(const OutputFile&) = delete;
  OutputFile& operator=(const OutputFile&) = delete;
  ~OutputFile();  // closes without a check: call close() to know the file is complete

  bool is_open() const { return f_ != nullptr; }
  const std::string& path() const { return path_; }
  void write(std::string_view bytes);
  void flush();
  void close();

 private:
  [[noreturn]] void fail(const char* step, int err);
  std::FILE* f_ = nullptr;
  std::string path_, what_;
};

}  // namespace moezero
