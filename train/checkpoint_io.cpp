// train/checkpoint_io.cpp — see checkpoint_io.h.
#include "train/checkpoint_io.h"

#include <fcntl.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "core/error.h"

namespace moezero::checkpoint::io {

namespace fs = std::filesystem;

uint32_t crc32_of(const void* data, size_t bytes, uint32_t crc) {
  return static_cast<uint32_t>(
      crc32_z(crc, static_cast<const Bytef*>(data), static_cast<z_size_t>(bytes)));
}

std::string crc_hex(uint32_t crc) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "0x%08x", crc);
  return buf;
}

std::vector<char> rank_header(int rank, int64_t step) {
  std::vector<char> h(kRankHeaderBytes, 0);
  std::memcpy(h.data(), "MZCKPT\0\0", 8);
  const uint32_t version = kFormatVersion, r = static_cast<uint32_t>(rank);
  std::memcpy(h.data() + 8, &version, 4);  // little-endian hosts (x86-64, aarch64)
  std::memcpy(h.data() + 12, &r, 4);
  std::memcpy(h.data() + 16, &step, 8);
  return h;
}

AtomicFile::AtomicFile(std::string path, uint64_t fail_after_bytes)
    : path_(std::move(path)), tmp_(path_ + ".tmp"), fail_after_(fail_after_bytes) {
  fd_ = ::open(tmp_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd_ < 0) MOEZERO_USER_ERROR("checkpoint: cannot create '", tmp_, "': ", std::strerror(errno));
}

AtomicFile::~AtomicFile() {
  if (fd_ >= 0) {
    ::close(fd_);
    ::unlink(tmp_.c_str());
  }
}

void AtomicFile::write(const void* data, size_t bytes) {
  const char* p = static_cast<const char*>(data);
  size_t left = bytes;
  if (bytes_ + left > fail_after_) {  // test hook: write what fits, then fail
    left = static_cast<size_t>(fail_after_ - bytes_);
    bytes = left;
  }
  crc_ = crc32_of(p, left, crc_);
  while (left > 0) {
    const ssize_t n = ::write(fd_, p, left);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0)
      MOEZERO_USER_ERROR("checkpoint: writing '", tmp_, "' failed: ", std::strerror(errno));
    p += n;
    left -= static_cast<size_t>(n);
  }
  bytes_ += bytes;
  if (bytes_ >= fail_after_)
    MOEZERO_USER_ERROR("checkpoint: writing '", tmp_, "' failed after ", bytes_,
                       " bytes (injected fault)");
}

void AtomicFile::commit() {
  if (::fsync(fd_) != 0)
    MOEZERO_USER_ERROR("checkpoint: fsync of '", tmp_, "' failed: ", std::strerror(errno));
  ::close(fd_);
  fd_ = -1;
  if (::rename(tmp_.c_str(), path_.c_str()) != 0) {
    const int e = errno;
    ::unlink(tmp_.c_str());
    MOEZERO_USER_ERROR("checkpoint: renaming '", tmp_, "' to '", path_,
                       "' failed: ", std::strerror(e));
  }
  fsync_dir(fs::path(path_).parent_path().string());
}

void crash_point(const char* point, int64_t step) {
  static const char* const want = std::getenv("MOEZERO_TEST_CRASH_AT");
  if (want == nullptr || *want == '\0') return;
  if (std::string(want) != std::string(point) + "@" + std::to_string(step)) return;
  const char msg[] = "moezero: MOEZERO_TEST_CRASH_AT: crashing now (test hook)\n";
  [[maybe_unused]] const ssize_t n = ::write(2, msg, sizeof msg - 1);
  ::_exit(86);
}

void fsync_dir(const std::string& dir) {
  const int fd = ::open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0)
    MOEZERO_USER_ERROR("checkpoint: cannot open directory '", dir, "': ", std::strerror(errno));
  const int rc = ::fsync(fd);
  const int e = errno;
  ::close(fd);
  if (rc != 0)
    MOEZERO_USER_ERROR("checkpoint: fsync of directory '", dir, "' failed: ", std::strerror(e));
}

bool replace_dir(const std::string& from, const std::string& to) {
  namespace fs = std::filesystem;
  const std::string parent = fs::path(to).parent_path().string();
  bool swapped = false;
  if (fs::exists(to)) {
    if (::renameat2(AT_FDCWD, from.c_str(), AT_FDCWD, to.c_str(), RENAME_EXCHANGE) == 0) {
      swapped = true;
      fsync_dir(parent);
      fs::remove_all(from);  // now the old directory
    } else if (errno == EINVAL || errno == ENOSYS || errno == EOPNOTSUPP) {
      fs::remove_all(to);  // no atomic swap on this file system
    } else {
      MOEZERO_USER_ERROR("checkpoint: cannot swap '", from, "' and '", to,
                         "': ", std::strerror(errno));
    }
  }
  if (!swapped && ::rename(from.c_str(), to.c_str()) != 0)
    MOEZERO_USER_ERROR("checkpoint: cannot rename '", from, "' to '", to,
                       "': ", std::strerror(errno));
  fsync_dir(parent);
  return swapped;
}

std::pair<uint64_t, uint32_t> write_text_atomic(const std::string& path, const std::string& text) {
  AtomicFile f(path);
  f.write(text.data(), text.size());
  f.commit();
  return {f.bytes(), f.crc()};
}

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) MOEZERO_USER_ERROR("checkpoint: cannot read '", path, "'");
  return std::string(std::istreambuf_iterator<char>(in), {});
}

void read_range(const std::string& path, uint64_t offset, size_t bytes, void* dst) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) MOEZERO_USER_ERROR("checkpoint: cannot open '", path, "': ", std::strerror(errno));
  char* p = static_cast<char*>(dst);
  size_t done = 0;
  while (done < bytes) {
    const ssize_t n = ::pread(fd, p + done, bytes - done, static_cast<off_t>(offset + done));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int e = errno;
      ::close(fd);
      if (n == 0)
        MOEZERO_USER_ERROR("checkpoint: '", path, "' is truncated: reading bytes [", offset, ", ",
                           offset + bytes, ") hit the end of the file after ", offset + done);
      MOEZERO_USER_ERROR("checkpoint: reading '", path, "' failed: ", std::strerror(e));
    }
    done += static_cast<size_t>(n);
  }
  ::close(fd);
}

uint32_t file_crc(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) MOEZERO_USER_ERROR("checkpoint: cannot read '", path, "'");
  std::vector<char> buf(1 << 20);
  uint32_t crc = 0;
  while (in) {
    in.read(buf.data(), static_cast<std::streamsize>(buf.size()));
    crc = crc32_of(buf.data(), static_cast<size_t>(in.gcount()), crc);
  }
  return crc;
}

// ---- Manifest ------------------------------------------------------------------------------

namespace {

uint32_t parse_crc(const nlohmann::json& v) {
  return static_cast<uint32_t>(std::stoul(v.get<std::string>(), nullptr, 16));
}

}  // namespace

const FileEntry& Manifest::file(const std::string& name) const {
  for (const auto& f : files)
    if (f.name == name) return f;
  MOEZERO_USER_ERROR("checkpoint: '", dir, "/manifest.json' lists no file '", name, "'");
}

const GroupEntry* Manifest::group(const std::string& name) const {
  for (const auto& g : groups)
    if (g.name == name) return &g;
  return nullptr;
}

std::string manifest_text(const Manifest& m) {
  nlohmann::ordered_json j;  // fields in the order of docs/checkpoints.md
  j["format"] = kFormatName;
  j["format_version"] = kFormatVersion;
  j["step"] = m.step;
  j["engine_step"] = m.engine_step;
  j["world_size"] = m.world_size;
  j["ep_size"] = m.ep_size;
  j["zero_stage"] = m.zero_stage;
  j["dtype"] = m.dtype;
  j["frequency_model"] = m.frequency_model;
  auto files = nlohmann::ordered_json::array();
  for (const auto& f : m.files)
    files.push_back({{"name", f.name}, {"bytes", f.bytes}, {"crc32", crc_hex(f.crc)}});
  j["files"] = files;
  auto groups = nlohmann::ordered_json::array();
  for (const auto& g : m.groups) {
    auto segs = nlohmann::ordered_json::array();
    for (const auto& s : g.segments)
      segs.push_back({{"rank", s.rank},
                      {"begin", s.begin},
                      {"count", s.count},
                      {"file", s.file},
                      {"offset", s.offset},
                      {"crc32", crc_hex(s.crc)}});
    groups.push_back({{"name", g.name}, {"numel", g.numel}, {"shards", segs}});
  }
  j["groups"] = groups;
  auto orders = nlohmann::ordered_json::array();
  for (const auto& per_rank : m.prefetch_orders) {
    auto o = nlohmann::ordered_json::object();
    for (const auto& [key, ids] : per_rank) o[key] = ids;
    orders.push_back(o);
  }
  j["prefetch_orders"] = orders;
  if (!m.expert_bias.empty()) j["expert_bias"] = m.expert_bias;
  j["config"] = nlohmann::ordered_json::parse(m.config.dump());
  return j.dump(1);
}

namespace {

// The manifest's fields into m; an Error names the file (`path`) and the field.
void read_manifest_fields(const nlohmann::json& j, const std::string& path, Manifest& m) {
  std::string where = "format";
  try {
    if (!j.is_object() || j.value("format", "") != kFormatName)
      MOEZERO_USER_ERROR("checkpoint: '", path,
                         "' is not a moezero checkpoint manifest (format is not \"", kFormatName,
                         "\")");
    where = "format_version";
    const int version = j.at("format_version").get<int>();
    if (version != kFormatVersion)
      MOEZERO_USER_ERROR("checkpoint: '", path, "': unknown format_version ", version,
                         " (this build reads version ", kFormatVersion, ")");
    for (const char* k : {"step", "engine_step", "world_size", "ep_size", "zero_stage"}) {
      where = k;
      (void)j.at(k).get<int64_t>();
    }
    m.step = j["step"].get<int64_t>();
    m.engine_step = j["engine_step"].get<int64_t>();
    m.world_size = j["world_size"].get<int>();
    m.ep_size = j["ep_size"].get<int>();
    m.zero_stage = j["zero_stage"].get<int>();
    where = "dtype";
    m.dtype = j.at("dtype").get<std::string>();
    where = "frequency_model";
    m.frequency_model = j.at("frequency_model").get<std::string>();
    where = "config";
    m.config = j.at("config");
    // Sizes, offsets and element counts: non-negative integers (a -1 would wrap to 2^64 - 1).
    const auto count = [&](const nlohmann::json& v, const char* field) -> uint64_t {
      if (!v.is_number_unsigned())
        MOEZERO_USER_ERROR("checkpoint: '", path, "': field '", where, ".", field,
                           "' must be a non-negative integer, got ", v.dump());
      return v.get<uint64_t>();
    };
    where = "files";
    for (const auto& f : j.at("files"))
      m.files.push_back({f.at("name").get<std::string>(), count(f.at("bytes"), "bytes"),
                         parse_crc(f.at("crc32"))});
    where = "groups";
    for (const auto& g : j.at("groups")) {
      GroupEntry e{g.at("name").get<std::string>(), g.at("numel").get<int64_t>(), {}};
      where = "groups." + e.name;
      for (const auto& s : g.at("shards")) {
        const int rank = s.at("rank").get<int>();
        if (rank < 0 || rank >= m.world_size)
          MOEZERO_USER_ERROR("checkpoint: '", path, "': field '", where, "': shard of rank ", rank,
                             " outside the saving run's world of ", m.world_size, " rank(s)");
        e.segments.push_back({rank, static_cast<int64_t>(count(s.at("begin"), "begin")),
                              static_cast<int64_t>(count(s.at("count"), "count")),
                              s.at("file").get<std::string>(), count(s.at("offset"), "offset"),
                              parse_crc(s.at("crc32"))});
      }
      m.groups.push_back(std::move(e));
    }
    where = "prefetch_orders";
    for (const auto& r : j.at("prefetch_orders")) {
      PrefetchOrders o;
      for (const auto& [key, ids] : r.items()) o.emplace_back(key, ids.get<std::vector<int>>());
      m.prefetch_orders.push_back(std::move(o));
    }
    where = "expert_bias";
    if (j.contains("expert_bias"))
      m.expert_bias = j["expert_bias"].get<std::vector<std::vector<float>>>();
  } catch (const nlohmann::json::exception& e) {
    MOEZERO_USER_ERROR("checkpoint: '", path, "': field '", where,
                       "' is missing or malformed: ", e.what());
  } catch (const std::logic_error& e) {  // stoul of a crc
    MOEZERO_USER_ERROR("checkpoint: '", path, "': field '", where,
                       "' has a malformed crc32: ", e.what());
  }
}

// Segments tile each group and lie inside their (listed) files. Sorts each group's segments.
void check_segments(Manifest& m, const std::string& path) {
  for (auto& g : m.groups) {
    std::sort(g.segments.begin(), g.segments.end(),
              [](const Segment& a, const Segment& b) { return a.begin < b.begin; });
    int64_t next = 0;
    for (const auto& s : g.segments) {
      if (s.begin != next || s.count <= 0)
        MOEZERO_USER_ERROR("checkpoint: '", path, "': group '", g.name, "': shard of rank ", s.rank,
                           " covers [", s.begin, ", ", s.begin + s.count,
                           "), expected to start at ", next, " (the shards must tile [0, ", g.numel,
                           "))");
      next += s.count;
      const FileEntry& f = m.file(s.file);
      if (s.offset + uint64_t(kStateTensors) * 4 * uint64_t(s.count) > f.bytes)
        MOEZERO_USER_ERROR("checkpoint: '", path, "': group '", g.name, "': shard of rank ", s.rank,
                           " lies past the end of '", s.file, "' (", f.bytes, " bytes)");
    }
    if (next != g.numel)
      MOEZERO_USER_ERROR("checkpoint: '", path, "': group '", g.name, "': shards cover [0, ", next,
                         "), expected [0, ", g.numel, ")");
  }
}

}  // namespace

Manifest read_manifest(const std::string& step_dir) {
  const std::string path = step_dir + "/manifest.json";
  if (!fs::exists(path))
    MOEZERO_USER_ERROR("checkpoint: '", path,
                       "' does not exist (an incomplete or foreign directory)");
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(read_text(path));
  } catch (const nlohmann::json::exception& e) {
    MOEZERO_USER_ERROR("checkpoint: '", path, "' is not valid JSON: ", e.what());
  }
  Manifest m;
  m.dir = step_dir;
  read_manifest_fields(j, path, m);
  check_segments(m, path);
  return m;
}

void check_files(const Manifest& m) {
  for (const auto& f : m.files) {
    const std::string path = m.dir + "/" + f.name;
    std::error_code ec;
    const auto size = fs::file_size(path, ec);
    if (ec)
      MOEZERO_USER_ERROR("checkpoint: '", path,
                         "' is missing (listed in manifest.json): ", ec.message());
    if (size < f.bytes)
      MOEZERO_USER_ERROR("checkpoint: '", path, "' is truncated: ", size,
                         " bytes, manifest.json says ", f.bytes);
    if (size > f.bytes)
      MOEZERO_USER_ERROR("checkpoint: '", path, "' is ", size, " bytes, manifest.json says ",
                         f.bytes, " (overwritten or appended to)");
  }
}

std::string step_dir_name(int64_t step) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "step_%08lld", static_cast<long long>(step));
  return buf;
}

std::string resolve_step_dir(const std::string& dir) {
  if (!fs::is_directory(dir)) MOEZERO_USER_ERROR("checkpoint: '", dir, "' is not a directory");
  if (fs::exists(dir + "/manifest.json")) return dir;
  const std::string latest = dir + "/latest";
  if (!fs::exists(latest))
    MOEZERO_USER_ERROR("checkpoint: no checkpoint in '", dir,
                       "': it holds neither manifest.json nor a 'latest' pointer");
  std::string name = read_text(latest);
  while (!name.empty() && (name.back() == '\n' || name.back() == ' ')) name.pop_back();
  if (name.empty() || name.find('/') != std::string::npos)
    MOEZERO_USER_ERROR("checkpoint: '", latest, "' does not name a step directory (got '", name,
                       "')");
  const std::string step_dir = dir + "/" + name;
  if (!fs::exists(step_dir + "/manifest.json"))
    MOEZERO_USER_ERROR("checkpoint: '", latest, "' names '", name, "', but '", step_dir,
                       "/manifest.json' does not exist");
  return step_dir;
}

}  // namespace moezero::checkpoint::io
