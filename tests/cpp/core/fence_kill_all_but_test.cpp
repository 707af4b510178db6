// FenceTable::kill_all_but (core/fence.h): a storage node mounting again kills every allocation handed out
// before but the ones it still holds, in one pass, exactly as killing each slot one by one (the floor for
// every slot, a kept allocation's generation - 1 for its own) did, and waits for the copies admitted before.
#include <gtest/gtest.h>

#include <atomic>
#include <random>
#include <thread>
#include <utility>
#include <vector>

#include "core/fence.h"

namespace kvs {
namespace {

using Kept = std::vector<std::pair<uint32_t, uint64_t>>;

std::shared_ptr<FenceTable> table(uint32_t slots) {
  auto made = FenceTable::create(slots);
  EXPECT_TRUE(made.ok()) << made.status().to_string();
  return made.value();
}

constexpr int kNoWait = 0;

// The highest dead generation of a slot, read through the owner's access (alive iff gen > killed and the
// floor): the largest g <= most that enter_owned refuses.
uint64_t dead_up_to(FenceTable& t, uint32_t slot, uint64_t most) {
  uint64_t dead = 0;
  for (uint64_t g = 1; g <= most; ++g) {
    if (t.enter_owned(slot, g)) {
      t.leave(slot);
    } else {
      dead = g;
    }
  }
  return dead;
}

TEST(FenceKillAllBut, KeptAllocationsStayAliveInTheirOwnGenerationOnly) {
  auto t = table(8);
  t->announce(0, 3, 0, 64);   // handed out before, not held: dies
  t->announce(2, 4, 64, 64);  // held: stays
  t->announce(3, 9, 128, 64);
  t->announce(5, 12, 192, 64);  // above the floor (not handed out before): untouched, as a kill to it was
  ASSERT_TRUE(t->kill_all_but(10, Kept{{2, 4}, {6, 2}}, 1000));
  EXPECT_FALSE(t->enter(0, 3, 0, 64, false, kNoWait));
  EXPECT_TRUE(t->enter(2, 4, 64, 64, false, kNoWait));  // below the floor and still admitted
  t->leave(2);
  EXPECT_FALSE(t->enter_owned(2, 3));  // the kept slot's older generations are dead
  EXPECT_FALSE(t->enter(3, 9, 128, 64, false, kNoWait));
  EXPECT_TRUE(t->enter(5, 12, 192, 10, false, kNoWait));
  t->leave(5);
  EXPECT_FALSE(t->enter_owned(6, 1));
  EXPECT_TRUE(t->enter_owned(6, 2));
  t->leave(6);
  for (uint32_t slot : {1u, 4u, 7u}) {
    EXPECT_FALSE(t->enter_owned(slot, 10));
    EXPECT_TRUE(t->enter_owned(slot, 11));
    t->leave(slot);
  }
}

TEST(FenceKillAllBut, LeavesEverySlotAsKillingEachOneDid) {
  constexpr uint32_t kSlots = 3000;
  constexpr uint64_t kFloor = 20, kMost = 40;
  std::mt19937 rng(7);
  auto one_pass = table(kSlots), each = table(kSlots);
  std::vector<uint32_t> before_slots;
  std::vector<uint64_t> before_gens;
  for (uint32_t slot = 0; slot < kSlots; ++slot) {  // what earlier kills left: some above the floor
    before_slots.push_back(slot);
    before_gens.push_back(rng() % kMost);
  }
  ASSERT_TRUE(one_pass->kill(before_slots, before_gens, 1000) && each->kill(before_slots, before_gens, 1000));
  Kept kept;
  std::vector<uint64_t> gens(kSlots, kFloor);
  for (uint32_t slot = 0; slot < kSlots; slot += 1 + rng() % 9) {
    kept.emplace_back(slot, 1 + rng() % (kMost - 1));
    gens[slot] = kept.back().second - 1;
  }
  ASSERT_TRUE(one_pass->kill_all_but(kFloor, kept, 1000));
  ASSERT_TRUE(each->kill(before_slots, gens, 1000));
  for (uint32_t slot = 0; slot < kSlots; ++slot) {
    ASSERT_EQ(dead_up_to(*one_pass, slot, kMost), dead_up_to(*each, slot, kMost)) << "slot " << slot;
  }
}

TEST(FenceKillAllBut, AnEntryOutOfOrderIsNotKept) {
  auto t = table(4);
  ASSERT_TRUE(t->kill_all_but(10, Kept{{3, 5}, {1, 5}}, 1000));  // (region_fences sorts them first)
  EXPECT_TRUE(t->enter_owned(3, 5));
  t->leave(3);
  EXPECT_FALSE(t->enter_owned(1, 5));  // killed to the floor: a miss, never a wrong allocation alive
}

TEST(FenceKillAllBut, WaitsForCopiesAdmittedBeforeKeptOrNot) {
  auto t = table(16);
  t->announce(3, 5, 0, 64);   // dies
  t->announce(9, 6, 64, 64);  // kept
  ASSERT_TRUE(t->enter(3, 5, 0, 64, false, kNoWait));
  ASSERT_TRUE(t->enter(9, 6, 64, 64, false, kNoWait));
  EXPECT_FALSE(t->kill_all_but(10, Kept{{9, 6}}, 20));  // both copies still run: the kills stand
  EXPECT_FALSE(t->enter(3, 5, 0, 64, false, kNoWait));
  t->leave(3);
  EXPECT_FALSE(t->kill_all_but(10, Kept{{9, 6}}, 20));  // as kill did for every slot it named
  t->leave(9);
  EXPECT_TRUE(t->kill_all_but(10, Kept{{9, 6}}, 20));
}

TEST(FenceKillAllBut, NoCopyRunsOnceItReturnsTrue) {
  constexpr uint32_t kSlots = 1 << 16;
  auto t = table(kSlots);
  for (uint32_t slot = 0; slot < kSlots; slot += 4096) t->announce(slot, 5, 0, 64);
  std::atomic<bool> stop{false};
  std::atomic<int> running{0};
  std::thread peer([&] {
    for (uint32_t slot = 0; !stop.load(); slot = (slot + 4096) % kSlots) {
      if (!t->enter(slot, 5, 0, 64, false, kNoWait)) continue;
      running.fetch_add(1);
      std::this_thread::yield();
      running.fetch_sub(1);
      t->leave(slot);
    }
  });
  while (!t->kill_all_but(10, Kept{}, 1000)) {
  }
  EXPECT_EQ(running.load(), 0);
  for (uint32_t slot = 0; slot < kSlots; slot += 4096) EXPECT_FALSE(t->enter(slot, 5, 0, 64, false, kNoWait));
  stop.store(true);
  peer.join();
}

}  // namespace
}  // namespace kvs
