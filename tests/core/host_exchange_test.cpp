// core/host_exchange: words and strings of every rank reach every rank, in group-rank order,
// on sub-groups too; strings of different lengths (empty ones included) come back exactly.
#include "core/host_exchange.h"

#include <gtest/gtest.h>

#include <mutex>
#include <string>
#include <vector>

#include "comm/world.h"

namespace moezero {
namespace {

TEST(HostExchange, WordsAndStringsOfEveryRankInGroupRankOrder) {
  for (int world : {1, 3, 4}) {
    SCOPED_TRACE("world " + std::to_string(world));
    std::mutex mu;
    std::vector<std::vector<int64_t>> words(static_cast<size_t>(world));
    std::vector<std::vector<std::string>> strings(static_cast<size_t>(world));
    comm::World::run(world, [&](comm::RankContext& ctx) {
      Stream& s = ctx.device->create_stream("misc");
      auto comm = ctx.communicator(ctx.world_group(), "misc");
      const int64_t r = ctx.rank;
      const std::vector<int64_t> mine = {r, -r, r * 1000003};
      // Rank r sends r * 5 bytes ending in its rank (rank 0: the empty string).
      std::string text(static_cast<size_t>(r) * 5, static_cast<char>('a' + r));
      if (r > 0) text.back() = static_cast<char>('0' + r);
      auto w = all_gather_words(*ctx.device, s, *comm, mine);
      auto t = all_gather_strings(*ctx.device, s, *comm, text);
      std::lock_guard lock(mu);
      words[static_cast<size_t>(r)] = std::move(w);
      strings[static_cast<size_t>(r)] = std::move(t);
    });
    for (int r = 0; r < world; ++r) {
      const auto& w = words[static_cast<size_t>(r)];
      const auto& t = strings[static_cast<size_t>(r)];
      ASSERT_EQ(w.size(), 3u * static_cast<size_t>(world));
      ASSERT_EQ(t.size(), static_cast<size_t>(world));
      for (int p = 0; p < world; ++p) {
        EXPECT_EQ(w[3 * static_cast<size_t>(p)], p);
        EXPECT_EQ(w[3 * static_cast<size_t>(p) + 1], -p);
        EXPECT_EQ(w[3 * static_cast<size_t>(p) + 2], int64_t{p} * 1000003);
        std::string want(static_cast<size_t>(p) * 5, static_cast<char>('a' + p));
        if (p > 0) want.back() = static_cast<char>('0' + p);
        EXPECT_EQ(t[static_cast<size_t>(p)], want) << "rank " << r << " got rank " << p;
      }
    }
  }
}

TEST(HostExchange, AllEmptyStringsAndSubGroups) {
  std::mutex mu;
  std::vector<std::vector<std::string>> got(4);
  comm::World::run(4, [&](comm::RankContext& ctx) {
    Stream& s = ctx.device->create_stream("misc");
    // Two groups {0, 2} and {1, 3}: each sees its own members' strings only.
    const ProcessGroup g{"pair" + std::to_string(ctx.rank % 2), {ctx.rank % 2, ctx.rank % 2 + 2}};
    auto comm = ctx.communicator(g, "misc");
    auto empty = all_gather_strings(*ctx.device, s, *comm, "");
    EXPECT_EQ(empty, (std::vector<std::string>{"", ""}));
    auto t = all_gather_strings(*ctx.device, s, *comm, "rank " + std::to_string(ctx.rank));
    std::lock_guard lock(mu);
    got[static_cast<size_t>(ctx.rank)] = std::move(t);
  });
  EXPECT_EQ(got[0], (std::vector<std::string>{"rank 0", "rank 2"}));
  EXPECT_EQ(got[2], got[0]);
  EXPECT_EQ(got[1], (std::vector<std::string>{"rank 1", "rank 3"}));
  EXPECT_EQ(got[3], got[1]);
}

}  // namespace
}  // namespace moezero
