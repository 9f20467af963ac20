#include "server/shard/seq_tracker.h"

#include <gtest/gtest.h>

#include <cstdint>

namespace ps::server {
namespace {

TEST(SeqTracker, NumbersUpToTheBaseAreSeen) {
  SeqTracker t(100);
  EXPECT_TRUE(t.Seen(1));
  EXPECT_TRUE(t.Seen(100));
  EXPECT_FALSE(t.Seen(101));
  EXPECT_EQ(t.contiguous(), 100u);
}

TEST(SeqTracker, InFlightNumbersAreSeenUntilFinished) {
  SeqTracker t;
  t.Start(1);
  EXPECT_TRUE(t.Seen(1));
  EXPECT_TRUE(t.InFlight(1));
  EXPECT_EQ(t.contiguous(), 0u);
  t.Finish(1);
  EXPECT_TRUE(t.Seen(1));
  EXPECT_FALSE(t.InFlight(1));
  EXPECT_EQ(t.contiguous(), 1u);
}

TEST(SeqTracker, OutOfOrderFinishesCloseTheGap) {
  SeqTracker t;
  t.Finish(3);
  t.Finish(2);
  EXPECT_EQ(t.contiguous(), 0u);
  EXPECT_TRUE(t.Seen(3));
  EXPECT_FALSE(t.Seen(1));
  EXPECT_FALSE(t.Seen(4));
  t.Finish(1);
  EXPECT_EQ(t.contiguous(), 3u);
  // Finishing a number at or below the contiguous end changes nothing.
  t.Finish(2);
  EXPECT_EQ(t.contiguous(), 3u);
}

// A number that never arrives does not keep the set growing: past
// kMaxSparse finished numbers above it, the gap is given up.
TEST(SeqTracker, ALostNumberStopsHoldingTheSetBack) {
  SeqTracker t;
  const uint64_t n = SeqTracker::kMaxSparse + 1;
  for (uint64_t s = 2; s <= n + 1; ++s) t.Finish(s);
  EXPECT_EQ(t.contiguous(), n + 1);
  EXPECT_TRUE(t.Seen(1));  // given up: treated as done
  EXPECT_FALSE(t.Seen(n + 2));
}

}  // namespace
}  // namespace ps::server
