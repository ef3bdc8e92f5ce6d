// train/checkpoint.cpp — save (a collective of every rank), restore into a rank's engine and
// frequency model, and consolidation of the full masters (see checkpoint.h and
// docs/checkpoints.md). File handling and the manifest live in checkpoint_io.cpp.
#include "train/checkpoint.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "core/communicator.h"
#include "core/device.h"
#include "core/error.h"
#include "core/host_exchange.h"
#include "core/tensor.h"
#include "model/transformer.h"
#include "prefetch/frequency_model.h"
#include "train/checkpoint_io.h"
#include "zero/zero_engine.h"

namespace moezero::checkpoint {

namespace fs = std::filesystem;
using StateTensor = ZeroEngine::StateTensor;

namespace {

constexpr const char* kFrequencyFile = "frequency_model.json";

std::string rank_file_name(int rank) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "rank_%05d.bin", rank);
  return buf;
}

// Runs fn; returns "" or the message of what it threw (so that a failing rank still takes
// part in the collectives that tell every rank about the failure).
template <class F>
std::string capture(F&& fn) {
  try {
    fn();
    return {};
  } catch (const Error& e) {
    return e.message();
  } catch (const std::exception& e) {
    return e.what();
  }
}

// Every rank's string, on every rank (core/host_exchange.h).
std::vector<std::string> all_gather_strings(const RankState& s, const std::string& mine) {
  return moezero::all_gather_strings(*s.device, *s.stream, *s.world, mine);
}

// What a failed save leaves: the previous checkpoint when there is one.
std::string what_is_kept(const RankState& s) {
  std::error_code ec;
  return fs::exists(fs::path(s.config->train.save_dir) / "latest", ec)
             ? "the previous checkpoint and 'latest' are intact"
             : "no earlier checkpoint exists in train.save_dir";
}

// Every rank throws the same Error when any rank's `error` is not empty.
void agree(const RankState& s, const std::string& error, int64_t step, const char* phase) {
  const auto errors = all_gather_strings(s, error);
  for (size_t r = 0; r < errors.size(); ++r)
    if (!errors[r].empty())
      MOEZERO_USER_ERROR("checkpoint save of step ", step, " failed on rank ", r, " (", phase,
                         "): ", errors[r], "; ", what_is_kept(s));
}

// Writes this rank's file into `dir`; returns its index entry (JSON).
nlohmann::json write_rank_file(const RankState& s, const fs::path& dir, int64_t step,
                               const SaveFault& fault) {
  ZeroEngine& eng = *s.engine;
  const int rank = s.world->rank();
  const std::string name = rank_file_name(rank);
  io::AtomicFile f((dir / name).string(),
                   fault.rank == rank ? fault.after_bytes : std::numeric_limits<uint64_t>::max());
  const auto header = io::rank_header(rank, step);
  f.write(header.data(), header.size());
  auto segs = nlohmann::json::array();
  for (int g = 0; g < eng.group_count(); ++g) {
    if (rank == 0 && g == eng.group_count() / 2) io::crash_point("rank_file", step);  // half
    const ZeroEngine::StateRange r = eng.checkpoint_range(g);
    if (r.count_elems == 0) continue;
    const uint64_t offset = f.bytes();
    uint32_t crc = 0;
    for (StateTensor t : {StateTensor::Master, StateTensor::ExpAvg, StateTensor::ExpAvgSq}) {
      const std::vector<float> v = eng.export_state(g, t);
      crc = io::crc32_of(v.data(), v.size() * 4, crc);
      f.write(v.data(), v.size() * 4);
    }

    segs.push_back({{"group", eng.layout(g).spec().name},
                    {"begin", r.begin_elems},
                    {"count", r.count_elems},
                    {"offset", offset},
                    {"crc32", io::crc_hex(crc)}});
  }
  f.commit();
  if (rank == 0) io::crash_point("rank_file_done", step);
  auto orders = nlohmann::json::object();
  for (const auto& [key, ids] : eng.prefetch_orders()) orders[key] = ids;
  return {{"file", name},
          {"bytes", f.bytes()},
          {"crc32", io::crc_hex(f.crc())},
          {"segments", segs},
          {"prefetch_orders", orders}};
}

// Removes complete checkpoints beyond the newest `keep` (by step), never `current`.
void prune(const fs::path& root, int64_t keep, const std::string& current) {
  if (keep <= 0) return;
  std::vector<std::string> others;
  for (const auto& e : fs::directory_iterator(root)) {
    const std::string name = e.path().filename().string();
    if (e.is_directory() && name.rfind("step_", 0) == 0 && name != current &&
        fs::exists(e.path() / "manifest.json"))
      others.push_back(name);
  }
  std::sort(others.begin(), others.end(), [](const std::string& a, const std::string& b) {
    return std::stoll(a.substr(5)) > std::stoll(b.substr(5));
  });
  for (size_t i = static_cast<size_t>(keep - 1); i < others.size(); ++i)
    fs::remove_all(root / others[i]);
}

// Rank 0: the manifest from every rank's index, then the commit of the whole directory.
void commit_checkpoint(const RankState& s, const fs::path& root, const fs::path& tmp, int64_t step,
                       const std::vector<std::string>& indices) {
  const Config& cfg = *s.config;
  io::Manifest m;
  m.step = step;
  m.engine_step = s.engine->step_count();
  m.world_size = static_cast<int>(cfg.parallel.world_size);
  m.ep_size = static_cast<int>(cfg.parallel.ep_size);
  m.zero_stage = static_cast<int>(cfg.zero.stage);
  m.dtype = std::string(dtype_name(cfg.train.dtype));
  m.config = nlohmann::json::parse(config_to_json(cfg));
  std::map<std::string, std::vector<io::Segment>> segments;
  for (size_t r = 0; r < indices.size(); ++r) {
    const auto j = nlohmann::json::parse(indices[r]);
    const std::string file = j["file"].get<std::string>();
    m.files.push_back(
        {file, j["bytes"].get<uint64_t>(),
         static_cast<uint32_t>(std::stoul(j["crc32"].get<std::string>(), nullptr, 16))});
    for (const auto& sg : j["segments"])
      segments[sg["group"].get<std::string>()].push_back(
          {static_cast<int>(r), sg["begin"].get<int64_t>(), sg["count"].get<int64_t>(), file,
           sg["offset"].get<uint64_t>(),
           static_cast<uint32_t>(std::stoul(sg["crc32"].get<std::string>(), nullptr, 16))});
    io::PrefetchOrders orders;
    for (const auto& [key, ids] : j["prefetch_orders"].items())
      orders.emplace_back(key, ids.get<std::vector<int>>());
    m.prefetch_orders.push_back(std::move(orders));
  }
  for (const GroupSpec& spec : model::Transformer(cfg.model).param_groups())
    m.groups.push_back({spec.name, GroupLayout(spec).numel(), std::move(segments[spec.name])});
  if (s.model) {
    m.expert_bias = s.model->expert_biases();
    if (std::all_of(m.expert_bias.begin(), m.expert_bias.end(),
                    [](const std::vector<float>& b) { return b.empty(); }))
      m.expert_bias.clear();
  }
  if (s.frequency) {
    const auto [bytes, crc] =
        io::write_text_atomic((tmp / kFrequencyFile).string(), s.frequency->to_json().dump());
    m.files.push_back({kFrequencyFile, bytes, crc});
    m.frequency_model = kFrequencyFile;
  }
  io::write_text_atomic((tmp / "manifest.json").string(), io::manifest_text(m));
  (void)io::read_manifest(tmp.string());  // the same checks a loader makes (shards tile groups)
  io::crash_point("manifest", step);
  const std::string name = io::step_dir_name(step);
  const fs::path final_dir = root / name;
  io::replace_dir(tmp.string(), final_dir.string());  // an older save of this step: swapped out
  io::crash_point("step_dir", step);
  io::write_text_atomic((root / "latest").string(), name + "\n");
  io::crash_point("latest", step);
  prune(root, cfg.train.keep_checkpoints, name);
}

// Verified segments of the manifest's files, read on demand (only the byte ranges needed).
class SegmentReader {
 public:
  explicit SegmentReader(const io::Manifest& m) : m_(m) {}

  // dst[0, count) = elements [begin, begin + count) of `which` of group `g`.
  void read(const io::GroupEntry& g, StateTensor which, int64_t begin, int64_t count, float* dst) {
    if (&g != group_) cache_.clear(), group_ = &g;  // import asks group by group
    const int64_t end = begin + count;
    for (const io::Segment& s : g.segments) {
      const int64_t lo = std::max(begin, s.begin), hi = std::min(end, s.begin + s.count);
      if (lo >= hi) continue;
      const std::vector<float>& v = segment(g, s);
      const size_t at = static_cast<size_t>(static_cast<int64_t>(which) * s.count + lo - s.begin);
      std::memcpy(dst + (lo - begin), v.data() + at, static_cast<size_t>(hi - lo) * 4);
    }
  }

 private:
  const std::vector<float>& segment(const io::GroupEntry& g, const io::Segment& s) {
    auto it = cache_.find(s.offset);
    if (it != cache_.end() && it->second.first == s.file) return it->second.second;
    const std::string path = m_.dir + "/" + s.file;
    if (headers_.insert(s.file).second) {
      std::vector<char> got(io::kRankHeaderBytes);
      io::read_range(path, 0, got.size(), got.data());
      if (got != io::rank_header(s.rank, m_.step))
        MOEZERO_USER_ERROR("checkpoint: '", path, "': the header is not that of rank ", s.rank,
                           " at step ", m_.step, " (corrupt or from another checkpoint)");
    }
    std::vector<float> v(static_cast<size_t>(s.count) * io::kStateTensors);
    io::read_range(path, s.offset, v.size() * 4, v.data());
    const uint32_t crc = io::crc32_of(v.data(), v.size() * 4);
    if (crc != s.crc)
      MOEZERO_USER_ERROR("checkpoint: '", path, "': checksum mismatch in group '", g.name,
                         "' (bytes [", s.offset, ", ", s.offset + v.size() * 4, ")): crc32 ",
                         io::crc_hex(crc), ", manifest.json says ", io::crc_hex(s.crc),
                         " (the file is corrupt)");
    auto& slot = cache_[s.offset];
    slot = {s.file, std::move(v)};
    return slot.second;
  }

  const io::Manifest& m_;
  const io::GroupEntry* group_ = nullptr;
  std::map<uint64_t, std::pair<std::string, std::vector<float>>> cache_;  // by offset
  std::set<std::string> headers_;  // files whose header was checked
};

// A checkpoint of another model is refused, naming the first differing model.* key.
void check_model(const io::Manifest& m, const Config& cfg) {
  const auto saved = m.config.value("model", nlohmann::json::object());
  const auto mine = nlohmann::json::parse(config_to_json(cfg))["model"];
  for (const auto& [key, value] : mine.items())
    if (!saved.contains(key) || saved[key] != value)
      MOEZERO_USER_ERROR("checkpoint: '", m.dir,
                         "/manifest.json' was saved by another model: model.", key, " is ",
                         saved.contains(key) ? saved[key].dump() : "absent", " there and ",
                         value.dump(), " in this run's config");
}

const io::GroupEntry& entry_of(const io::Manifest& m, const GroupLayout& layout) {
  const io::GroupEntry* e = m.group(layout.spec().name);
  if (!e)
    MOEZERO_USER_ERROR("checkpoint: '", m.dir, "/manifest.json' has no parameter group '",
                       layout.spec().name, "' (saved by another model)");
  if (e->numel != layout.numel())
    MOEZERO_USER_ERROR("checkpoint: '", m.dir, "/manifest.json': group '", e->name, "' has ",
                       e->numel, " elements, this model's has ", layout.numel());
  return *e;
}

}  // namespace

void save(const RankState& s, int64_t step, const SaveFault& fault) {
  const fs::path root = s.config->train.save_dir;
  MOEZERO_REQUIRE(!root.empty(), "checkpoint save without train.save_dir");
  const bool lead = s.world->rank() == 0;
  const fs::path tmp = root / (".tmp_" + io::step_dir_name(step));
  agree(s,
        lead ? capture([&] {
          fs::create_directories(root);
          for (const auto& e : fs::directory_iterator(root))  // leftovers of interrupted saves
            if (e.path().filename().string().rfind(".tmp_step_", 0) == 0) fs::remove_all(e.path());
          fs::create_directories(tmp);
        })
             : std::string(),
        step, "preparing the directory");
  nlohmann::json index;
  const std::string err = capture([&] { index = write_rank_file(s, tmp, step, fault); });
  std::vector<std::string> indices = all_gather_strings(s, err.empty() ? index.dump() : "!" + err);
  for (size_t r = 0; r < indices.size(); ++r)
    if (!indices[r].empty() && indices[r][0] == '!')
      MOEZERO_USER_ERROR("checkpoint save of step ", step, " failed on rank ", r,
                         " (writing its rank file): ", indices[r].substr(1), "; ", what_is_kept(s));
  agree(s, lead ? capture([&] { commit_checkpoint(s, root, tmp, step, indices); }) : std::string(),
        step, "writing the manifest");
}

int64_t restore(const RankState& s, const std::string& dir) {
  const io::Manifest m = io::read_manifest(io::resolve_step_dir(dir));
  io::check_files(m);
  check_model(m, *s.config);
  ZeroEngine& eng = *s.engine;
  std::vector<const io::GroupEntry*> entries;
  for (int g = 0; g < eng.group_count(); ++g) entries.push_back(&entry_of(m, eng.layout(g)));
  SegmentReader reader(m);
  eng.import_state(
      [&](int g, StateTensor which, int64_t begin, int64_t count, float* dst) {
        reader.read(*entries[static_cast<size_t>(g)], which, begin, count, dst);
      },
      m.engine_step);
  const Config& cfg = *s.config;
  const int rank = s.world->rank();
  if (m.world_size == cfg.parallel.world_size && m.ep_size == cfg.parallel.ep_size &&
      m.zero_stage == cfg.zero.stage && rank < static_cast<int>(m.prefetch_orders.size()))
    eng.set_prefetch_orders(m.prefetch_orders[static_cast<size_t>(rank)]);
  if (s.model && !m.expert_bias.empty()) s.model->set_expert_biases(m.expert_bias);
  if (s.frequency) {
    if (m.frequency_model.empty())
      MOEZERO_USER_ERROR("checkpoint: '", m.dir, "/manifest.json' has no frequency model");
    const io::FileEntry& f = m.file(m.frequency_model);
    const std::string path = m.dir + "/" + f.name;
    const std::string text = io::read_text(path);
    const uint32_t crc = io::crc32_of(text.data(), text.size());
    if (crc != f.crc)
      MOEZERO_USER_ERROR("checkpoint: '", path, "': checksum mismatch: crc32 ", io::crc_hex(crc),
                         ", manifest.json says ", io::crc_hex(f.crc), " (the file is corrupt)");
    try {
      s.frequency->restore(nlohmann::json::parse(text));
    } catch (const nlohmann::json::exception& e) {
      MOEZERO_USER_ERROR("checkpoint: '", path, "' is not valid JSON: ", e.what());
    }
  }
  return m.step;
}

FullParams load_full_params(const std::string& dir) {
  const io::Manifest m = io::read_manifest(io::resolve_step_dir(dir));
  io::check_files(m);
  for (const auto& f : m.files) {  // everything is read: verify whole files too
    const uint32_t crc = io::file_crc(m.dir + "/" + f.name);
    if (crc != f.crc)
      MOEZERO_USER_ERROR("checkpoint: '", m.dir, "/", f.name, "': checksum mismatch: crc32 ",
                         io::crc_hex(crc), ", manifest.json says ", io::crc_hex(f.crc),
                         " (the file is corrupt)");
  }
  FullParams out;
  out.config = parse_config(m.config.dump(), m.dir + "/manifest.json (config)");
  out.step = m.step;
  SegmentReader reader(m);
  for (GroupSpec& spec : model::Transformer(out.config.model).param_groups()) {
    const GroupLayout layout(spec);
    const io::GroupEntry& e = entry_of(m, layout);
    NamedGroup g;
    g.name = spec.name;
    g.numel = layout.numel();
    g.data.resize(static_cast<size_t>(g.numel));
    reader.read(e, StateTensor::Master, 0, g.numel, g.data.data());
    g.spec = std::move(spec);
    out.groups.push_back(std::move(g));
  }
  return out;
}

}  // namespace moezero::checkpoint
