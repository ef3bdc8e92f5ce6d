// EventPool (core/event_pool.h): distinct events while taken, the same events again after
// recycle(), new ones only when every pooled event is taken.
#include "core/event_pool.h"

#include <gtest/gtest.h>

#include "kernels/backend.h"

namespace moezero {
namespace {

TEST(EventPool, ReusesEventsAfterRecycle) {
  auto dev = make_cpu_device(0);
  EventPool pool(*dev);
  EXPECT_EQ(pool.created(), 0u);
  Event* a = &pool.take();
  Event* b = &pool.take();
  EXPECT_NE(a, b);
  EXPECT_EQ(pool.taken(), 2u);
  EXPECT_EQ(pool.created(), 2u);

  pool.recycle();
  EXPECT_EQ(pool.taken(), 0u);
  EXPECT_EQ(&pool.take(), a);  // the pooled events, in the same order
  EXPECT_EQ(&pool.take(), b);
  EXPECT_EQ(pool.created(), 2u);
  Event* c = &pool.take();  // every pooled one is taken: a new one
  EXPECT_NE(c, a);
  EXPECT_NE(c, b);
  EXPECT_EQ(pool.created(), 3u);
}

}  // namespace
}  // namespace moezero
