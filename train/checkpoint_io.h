// train/checkpoint_io.h — the file layer of checkpoints (docs/checkpoints.md): crc32 (zlib),
// atomic file writes (temporary file, fsync, rename, fsync of the directory) with a test hook
// that fails a write after N bytes, range reads that name the file when it is short, and the
// manifest: its fields, parsing and structural checks. No model or engine knowledge here.
#pragma once

#include <cstdint>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

namespace moezero::checkpoint::io {

constexpr int kFormatVersion = 1;
constexpr const char* kFormatName = "moezero-checkpoint";
constexpr size_t kRankHeaderBytes = 64;  // rank file: header, then the segments back to back
constexpr int kStateTensors = 3;         // per segment: master, exp_avg, exp_avg_sq (f32 each)

uint32_t crc32_of(const void* data, size_t bytes, uint32_t crc = 0);
std::string crc_hex(uint32_t crc);  // "0x1234abcd"

// The 64-byte header of rank file `rank`: "MZCKPT\0\0", u32 format version, u32 rank, i64
// step, zeros (little-endian). Its bytes are fixed, so a loader compares them exactly.
std::vector<char> rank_header(int rank, int64_t step);

// A file written atomically: bytes go to "<path>.tmp"; commit() fsyncs it, renames it to
// `path` and fsyncs the directory. Destroyed uncommitted: the temporary file is removed and
// `path` is untouched. `fail_after_bytes` (test hook): write() throws once that many bytes were
// written, as a full disk or a killed process would leave it.
class AtomicFile {
 public:
  explicit AtomicFile(std::string path,
                      uint64_t fail_after_bytes = std::numeric_limits<uint64_t>::max());
  ~AtomicFile();
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;
  void write(const void* data, size_t bytes);
  void commit();
  uint64_t bytes() const { return bytes_; }
  uint32_t crc() const { return crc_; }

 private:
  std::string path_, tmp_;
  int fd_ = -1;
  uint64_t bytes_ = 0, fail_after_;
  uint32_t crc_ = 0;
};

void fsync_dir(const std::string& dir);
// Test hook for crash safety: when the environment has MOEZERO_TEST_CRASH_AT=<point>@<step>
// and this is that point of the save of that step, the process ends at once (_exit(86), as
// kill -9 would: no destructor, no flush). Points: rank_file (half of rank 0's file written),
// rank_file_done, manifest (the manifest written in the temporary directory), step_dir (the
// step directory in place, 'latest' not yet moved), latest (after 'latest', before pruning).
void crash_point(const char* point, int64_t step);
// Moves directory `from` to `to`, replacing an existing `to` atomically where the file system
// can swap two directories (Linux renameat2 RENAME_EXCHANGE: ext4, xfs, btrfs, tmpfs): a crash
// leaves either the old or the new `to`, never neither; the old one is then removed. Elsewhere
// (e.g. NFS) the old `to` is removed first. Then fsyncs the parent directory. Returns whether
// the replacement was atomic (false also when `to` did not exist: a plain rename).
bool replace_dir(const std::string& from, const std::string& to);
// Writes `text` to `path` atomically; returns (bytes, crc32).
std::pair<uint64_t, uint32_t> write_text_atomic(const std::string& path, const std::string& text);
std::string read_text(const std::string& path);  // whole file; throws naming the path
// Reads exactly `bytes` at `offset` of `path`; a short file is reported as truncated.
void read_range(const std::string& path, uint64_t offset, size_t bytes, void* dst);
// crc32 of the whole file, streamed.
uint32_t file_crc(const std::string& path);

// ---- Manifest (manifest.json of one step directory) ----------------------------------------
struct Segment {  // one group's state on one rank: elements [begin, begin + count)
  int rank = 0;
  int64_t begin = 0, count = 0;
  std::string file;     // "rank_00001.bin"
  uint64_t offset = 0;  // bytes: master (count f32), then exp_avg, then exp_avg_sq
  uint32_t crc = 0;     // crc32 of the segment's 12 * count bytes
};
struct GroupEntry {
  std::string name;
  int64_t numel = 0;
  std::vector<Segment> segments;  // sorted by begin, tiling [0, numel)
};
struct FileEntry {
  std::string name;
  uint64_t bytes = 0;
  uint32_t crc = 0;
};
using PrefetchOrders = std::vector<std::pair<std::string, std::vector<int>>>;
struct Manifest {
  std::string dir;  // the step directory it was read from
  int64_t step = 0, engine_step = 0;
  int world_size = 0, ep_size = 0, zero_stage = 0;
  std::string dtype;
  nlohmann::json config;  // config_to_json of the saving run
  std::vector<FileEntry> files;
  std::string frequency_model;  // file name; empty: none (a dense model)
  std::vector<GroupEntry> groups;
  std::vector<PrefetchOrders> prefetch_orders;  // per rank
  // Per MoE layer the experts' selection bias (moe.expert_bias_update_rate > 0); empty when
  // off. Optional in the file (absent: empty).
  std::vector<std::vector<float>> expert_bias;
  const FileEntry& file(const std::string& name) const;
  const GroupEntry* group(const std::string& name) const;  // nullptr when absent
};

std::string manifest_text(const Manifest& m);  // JSON, fields in documented order
// Parses and checks DIR/manifest.json (format name and version, every field's type, segments
// tiling each group, segments inside their files): an Error names the file and the field.
Manifest read_manifest(const std::string& step_dir);
// Every file of the manifest exists with its recorded size (missing / truncated / too long).
void check_files(const Manifest& m);

// DIR is a step directory (holds manifest.json) or a save_dir (its `latest` names one).
std::string resolve_step_dir(const std::string& dir);
std::string step_dir_name(int64_t step);  // "step_00000100"

}  // namespace moezero::checkpoint::io
