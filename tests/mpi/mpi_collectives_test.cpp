// tests/mpi/mpi_collectives_test.cpp — every collective of MpiCommunicator, every dtype,
// reduce op, uneven and empty counts, in place: the bytes each rank receives equal
// LocalCommunicator's (same calls on ranks-as-threads) bit for bit. Random fp inputs make
// the reduction order visible in the bits. Run at np 2 and 4.
#include <cstring>

#include "tests/mpi/mpi_test_util.h"

namespace moezero::comm::testing {
namespace {

std::string label(const char* op, DType d, size_t elems, bool in_place, int extra = -1) {
  return std::string(op) + "_" + std::string(dtype_name(d)) + "_" + std::to_string(elems) +
         (in_place ? "_inplace" : "") + (extra >= 0 ? "_" + std::to_string(extra) : "");
}

TEST_F(MpiTest, AllGatherEqualsLocal) {
  for (DType d : kAllDtypes)
    for (size_t elems : {size_t(0), size_t(1), size_t(7), size_t(1000)})
      for (bool in_place : {false, true})
        expect_same_as_local(label("all_gather", d, elems, in_place),
                             [=](const MakeComm& make, Stream& s, int rank, int world) {
                               auto c = make(make_world_group(world), "gather");
                               const Bytes send = random_elems(d, elems, rank, elems);
                               Bytes recv(size_t(world) * send.size(), std::byte{0x5a});
                               std::byte* own = recv.data() + size_t(rank) * send.size();
                               if (in_place && !send.empty())
                                 std::memcpy(own, send.data(), send.size());
                               c->all_gather(in_place ? own : send.data(), recv.data(), elems, d,
                                             s);
                               s.synchronize();
                               return recv;
                             });
}

TEST_F(MpiTest, AllGatherPutsChunksInGroupRankOrder) {
  auto c = mpi_maker()(make_world_group(world_), "gather_order");
  Stream& s = device_->create_stream("order");
  std::vector<int64_t> send(3, rank_ * 10), recv(3 * size_t(world_), -1);
  c->all_gather(send.data(), recv.data(), 3, DType::I64, s);
  s.synchronize();
  for (int p = 0; p < world_; ++p)
    for (int i = 0; i < 3; ++i) EXPECT_EQ(recv[size_t(p * 3 + i)], p * 10) << "chunk " << p;
}

TEST_F(MpiTest, ReduceScatterEqualsLocal) {
  for (DType d : kAllDtypes)
    for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Avg, ReduceOp::Max})
      for (size_t elems : {size_t(0), size_t(1), size_t(5), size_t(1027)})
        for (bool in_place : {false, true})
          expect_same_as_local(
              label("reduce_scatter", d, elems, in_place, int(op)),
              [=](const MakeComm& make, Stream& s, int rank, int world) {
                auto c = make(make_world_group(world), "reduce");
                Bytes send = random_elems(d, elems * size_t(world), rank, 100 + elems);
                const size_t chunk = elems * dtype_size_bytes(d);
                Bytes recv(chunk, std::byte{0x5a});
                void* out = in_place ? send.data() + size_t(rank) * chunk : recv.data();
                c->reduce_scatter(send.data(), out, elems, d, op, s);
                s.synchronize();
                if (in_place && chunk > 0) std::memcpy(recv.data(), out, chunk);
                return recv;
              });
}

TEST_F(MpiTest, AllReduceEqualsLocal) {
  // 3 elements leave some of 4 ranks an empty slice; 300000 f32 is a multi-megabyte message.
  for (DType d : kAllDtypes)
    for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Avg, ReduceOp::Max})
      for (size_t elems : {size_t(0), size_t(1), size_t(3), size_t(2049)})
        for (bool in_place : {false, true})
          expect_same_as_local(label("all_reduce", d, elems, in_place, int(op)),
                               [=](const MakeComm& make, Stream& s, int rank, int world) {
                                 auto c = make(make_world_group(world), "reduce");
                                 Bytes send = random_elems(d, elems, rank, 200 + elems);
                                 Bytes recv(send.size(), std::byte{0x5a});
                                 void* out = in_place ? send.data() : recv.data();
                                 c->all_reduce(send.data(), out, elems, d, op, s);
                                 s.synchronize();
                                 return in_place ? send : recv;
                               });
  expect_same_as_local(
      "all_reduce_large", [](const MakeComm& make, Stream& s, int rank, int world) {
        auto c = make(make_world_group(world), "reduce");
        Bytes send = random_elems(DType::F32, 300000, rank, 7);
        c->all_reduce(send.data(), send.data(), 300000, DType::F32, ReduceOp::Sum, s);
        s.synchronize();
        return send;
      });
}

// Elements rank r sends to rank p under `pattern` (zeros included).
size_t a2a_count(int r, int p, int pattern) {
  switch (pattern) {
    case 0: return size_t((r * 3 + p * 5 + 1) % 4);    // uneven, some empty
    case 1: return 0;                                  // nothing at all
    case 2: return r == 0 ? 0 : size_t(17 * (p + 1));  // rank 0 sends nothing
    default: return size_t(100 + r - p + 4);           // every pair, all different
  }
}

TEST_F(MpiTest, AllToAllVEqualsLocal) {
  for (DType d : kAllDtypes)
    for (int pattern = 0; pattern < 4; ++pattern)
      expect_same_as_local(label("all_to_all_v", d, 0, false, pattern),
                           [=](const MakeComm& make, Stream& s, int rank, int world) {
                             auto c = make(make_world_group(world), "a2a");
                             std::vector<size_t> send_elems(static_cast<size_t>(world)),
                                 recv_elems(static_cast<size_t>(world));
                             size_t send_total = 0, recv_total = 0;
                             for (int p = 0; p < world; ++p) {
                               send_elems[size_t(p)] = a2a_count(rank, p, pattern);
                               recv_elems[size_t(p)] = a2a_count(p, rank, pattern);
                               send_total += send_elems[size_t(p)];
                               recv_total += recv_elems[size_t(p)];
                             }
                             const Bytes send = random_elems(d, send_total, rank, 300 + pattern);
                             Bytes recv(recv_total * dtype_size_bytes(d), std::byte{0x5a});
                             c->all_to_all_v(send.data(), send_elems, recv.data(), recv_elems, d,
                                             s);
                             s.synchronize();
                             return recv;
                           });
}

TEST_F(MpiTest, BroadcastEqualsLocalFromEveryRoot) {
  for (DType d : kAllDtypes)
    for (size_t elems : {size_t(0), size_t(33)})
      for (int root = 0; root < world_; ++root)
        for (bool in_place : {false, true})
          expect_same_as_local(label("broadcast", d, elems, in_place, root),
                               [=](const MakeComm& make, Stream& s, int rank, int world) {
                                 auto c = make(make_world_group(world), "misc");
                                 Bytes send = random_elems(d, elems, rank, 400);
                                 Bytes recv(send.size(), std::byte{0x5a});
                                 void* out = in_place && rank == root ? send.data() : recv.data();
                                 c->broadcast(send.data(), out, elems, d, root, s);
                                 s.synchronize();
                                 return in_place && rank == root ? send : recv;
                               });
}

TEST_F(MpiTest, BarrierAndTraceRecords) {
  auto c = mpi_maker()(make_world_group(world_), "records");
  Stream& s = device_->create_stream("records");
  std::vector<float> send(5, 1.0f), recv(5 * size_t(world_));
  c->barrier(s);
  c->all_gather(send.data(), recv.data(), 5, DType::F32, s);
  c->barrier(s);
  s.synchronize();
  const auto records = c->records();
  ASSERT_EQ(records.size(), 3u);
  EXPECT_EQ(records[0].op, CollectiveOp::Barrier);
  EXPECT_EQ(records[1].op, CollectiveOp::AllGather);
  EXPECT_EQ(records[1].bytes, 5u * 4u * size_t(world_));  // nccl-tests size: recv bytes
  EXPECT_EQ(records[1].channel, "records");
  EXPECT_EQ(records[2].seq, 2u);
  for (const auto& r : records) EXPECT_LE(r.start, r.end);
  for (float v : recv) EXPECT_EQ(v, 1.0f);
}

}  // namespace
}  // namespace moezero::comm::testing
