// Allocation fences (core/fence.h): a peer's copy is admitted only into the announced, live allocation its
// slot holds, inside its range, and writes only once; a kill waits for the copies admitted before it. The
// threaded tests run real threads against one table, for TSan (tests/run --sanitize).
#include "core/fence.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

namespace kvs {
namespace {

std::shared_ptr<FenceTable> table(uint32_t slots) {
  auto made = FenceTable::create(slots);
  EXPECT_TRUE(made.ok()) << made.status().to_string();
  return made.value();
}

constexpr int kNoWait = 0;

TEST(Fence, CreateRefusesNoSlotsAndTooMany) {
  EXPECT_EQ(FenceTable::create(0).status().code(), Code::kInvalidArgument);
  EXPECT_EQ(FenceTable::create((1u << 26) + 1).status().code(), Code::kInvalidArgument);
}

TEST(Fence, OnlyTheAnnouncedGenerationInsideItsRangeIsAdmitted) {
  auto t = table(4);
  t->announce(1, 5, 4096, 1024);  // slot 1: generation 5 holds [4096, 5120)
  EXPECT_TRUE(t->enter(1, 5, 4096, 1024, false, kNoWait));
  t->leave(1);
  EXPECT_TRUE(t->enter(1, 5, 5000, 120, false, kNoWait));
  t->leave(1);
  EXPECT_FALSE(t->enter(1, 5, 4095, 10, false, kNoWait));          // starts before it
  EXPECT_FALSE(t->enter(1, 5, 5000, 121, false, kNoWait));         // runs past its end
  EXPECT_FALSE(t->enter(1, 5, 4096, UINT64_MAX, false, kNoWait));  // a length that wraps
  EXPECT_FALSE(t->enter(1, 4, 4096, 1, false, kNoWait));           // an older generation
  EXPECT_FALSE(t->enter(1, 6, 4096, 1, false, kNoWait));           // one not announced (no wait)
  EXPECT_FALSE(t->enter(2, 5, 4096, 1, false, kNoWait));           // another slot
  EXPECT_FALSE(t->enter(4, 5, 4096, 1, false, kNoWait));           // past the table
  EXPECT_FALSE(t->enter(1, 0, 4096, 1, false, kNoWait));           // generation 0 names none
}

TEST(Fence, AKilledAllocationAdmitsNothingAndIsNotAnnouncedAgain) {
  auto t = table(2);
  t->announce(0, 3, 0, 100);
  ASSERT_TRUE(t->kill({0}, {3}, 1000));
  EXPECT_FALSE(t->enter(0, 3, 0, 10, false, kNoWait));
  t->announce(0, 3, 0, 100);  // late: ignored
  EXPECT_FALSE(t->enter(0, 3, 0, 10, false, kNoWait));
  t->announce(0, 4, 200, 100);  // the slot's next allocation
  EXPECT_TRUE(t->enter(0, 4, 250, 10, false, kNoWait));
  t->leave(0);
  EXPECT_FALSE(t->enter(0, 4, 50, 10, false, kNoWait));  // the old range is not the new one's
}

TEST(Fence, RaisingTheFloorKillsEveryOlderGeneration) {
  auto t = table(3);
  t->announce(0, 10, 0, 64);
  t->announce(2, 30, 0, 64);
  ASSERT_TRUE(t->raise_floor(20, 1000));
  EXPECT_FALSE(t->enter(0, 10, 0, 1, false, kNoWait));
  EXPECT_TRUE(t->enter(2, 30, 0, 1, false, kNoWait));
  t->leave(2);
  EXPECT_FALSE(t->enter_owned(1, 20));
  EXPECT_TRUE(t->enter_owned(1, 21));  // the owner's own access needs no announcement
  t->leave(1);
}

TEST(Fence, AnAllocationIsWrittenOnceButItsWriterMayResend) {
  auto t = table(1);
  t->announce(0, 7, 0, 100);
  const uint64_t writer = 0xabc;
  uint64_t took = 0;
  ASSERT_TRUE(t->enter(0, 7, 0, 60, true, kNoWait, writer, {}, &took));
  EXPECT_EQ(took, 60u);
  t->leave(0);
  ASSERT_TRUE(t->enter(0, 7, 60, 40, true, kNoWait, writer));  // the rest: now sealed
  t->leave(0);
  EXPECT_FALSE(t->enter(0, 7, 0, 10, true, kNoWait, 0xdef));  // a reader's session cannot overwrite it
  EXPECT_FALSE(t->enter(0, 7, 0, 10, true, kNoWait, 0));
  EXPECT_TRUE(t->enter(0, 7, 0, 10, true, kNoWait, writer));  // its first writer resends
  t->leave(0);
  EXPECT_TRUE(t->enter(0, 7, 0, 100, false, kNoWait, 0xdef));  // and anyone reads
  t->leave(0);
}

TEST(Fence, AFailedWriteGivesItsBytesBack) {
  auto t = table(1);
  t->announce(0, 2, 0, 64);
  {
    FenceEntry entry(t.get(), 0, 2, 0, 64, true, kNoWait, 1);
    ASSERT_TRUE(entry.status().ok());
    entry.failed();
  }
  FenceEntry again(t.get(), 0, 2, 0, 64, true, kNoWait, 2);  // another path's resend
  EXPECT_TRUE(again.status().ok()) << again.status().to_string();
}

TEST(Fence, EntriesNamingNoAllocationAreRefusedWithTheirReason) {
  auto t = table(1);
  FenceEntry unnamed(t.get(), 0, 0, 0, 1, false);
  EXPECT_EQ(unnamed.status().code(), Code::kPermissionDenied);
  FenceEntry stale(t.get(), 0, 9, 0, 1, false, kNoWait);
  EXPECT_EQ(stale.status().code(), Code::kStale);
  FenceEntry unfenced(nullptr, 0, 9, 0, 1, false);
  EXPECT_EQ(unfenced.status().code(), Code::kNotSupported);
  FenceEntry plain(nullptr, 0, 0, 0, 1, false);
  EXPECT_TRUE(plain.status().ok());
}

TEST(Fence, APeersMappingSeesTheOwnersAnnouncementsAndKills) {
  auto owner = table(8);
  auto peer = FenceTable::map(dup(owner->fd()));
  ASSERT_TRUE(peer.ok()) << peer.status().to_string();
  owner->announce(5, 11, 0, 4096);
  EXPECT_TRUE(peer.value()->enter(5, 11, 0, 4096, false, kNoWait));
  peer.value()->leave(5);
  ASSERT_TRUE(owner->kill({5}, {11}, 1000));
  EXPECT_FALSE(peer.value()->enter(5, 11, 0, 4096, false, kNoWait));
}

TEST(Fence, ARequestWaitsForItsAnnouncementOnAnotherThread) {
  auto t = table(2);
  std::atomic<bool> admitted{false};
  std::thread request([&] {
    admitted = t->enter(1, 8, 0, 16, false, 10000);
    if (admitted) t->leave(1);
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  const auto announced_at = std::chrono::steady_clock::now();
  t->announce(1, 8, 0, 64);
  request.join();
  EXPECT_TRUE(admitted);
  // woken by the announcement, not by its 10 s limit
  EXPECT_LT(std::chrono::steady_clock::now() - announced_at, std::chrono::seconds(5));
}

TEST(Fence, AWaitingRequestGivesUpWhenAbandonedOrKilled) {
  auto t = table(2);
  std::atomic<bool> cut{false};
  bool admitted = true;
  std::thread request([&] { admitted = t->enter(0, 3, 0, 1, false, 10000, 0, [&] { return cut.load(); }); });
  std::this_thread::sleep_for(std::chrono::milliseconds(10));
  cut = true;
  request.join();
  EXPECT_FALSE(admitted);
  bool killed_admitted = true;
  std::thread killed([&] { killed_admitted = t->enter(1, 3, 0, 1, false, 10000); });
  std::this_thread::sleep_for(std::chrono::milliseconds(10));
  ASSERT_TRUE(t->kill({1}, {3}, 1000));
  killed.join();
  EXPECT_FALSE(killed_admitted);
}

TEST(Fence, AKillReturnsOnlyOnceEveryCopyAdmittedBeforeItHasLeft) {
  // Copiers enter, mark the bytes as being copied, and leave; the owner kills the allocation while they
  // run. Once kill() returns, no copier may still be inside it, nor enter it again.
  auto t = table(1);
  t->announce(0, 1, 0, 1 << 20);
  std::atomic<int> inside{0};
  std::atomic<bool> killed{false};
  std::atomic<int> late{0};
  std::vector<std::thread> copiers;
  for (int c = 0; c < 4; ++c) {
    copiers.emplace_back([&] {
      for (int i = 0; i < 20000; ++i) {
        if (!t->enter(0, 1, 0, 4096, false, kNoWait)) continue;
        inside.fetch_add(1);
        if (killed.load()) late.fetch_add(1);  // admitted after the kill returned
        inside.fetch_sub(1);
        t->leave(0);
      }
    });
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(5));
  ASSERT_TRUE(t->kill({0}, {1}, 5000));
  killed = true;
  EXPECT_EQ(inside.load(), 0);
  for (auto& c : copiers) c.join();
  EXPECT_EQ(late.load(), 0);
}

TEST(Fence, ConcurrentWritersNeverTakeMoreThanTheAllocation) {
  // Four sessions each try to write all of it, 64 bytes at a time: the bytes taken (not resends of the
  // first writer) add up to the allocation exactly.
  auto t = table(1);
  constexpr uint64_t kSize = 64 * 100;
  t->announce(0, 2, 0, kSize);
  std::atomic<uint64_t> taken{0};
  std::vector<std::thread> writers;
  for (int w = 0; w < 4; ++w) {
    writers.emplace_back([&, w] {
      for (int i = 0; i < 100; ++i) {
        uint64_t took = 0;
        if (t->enter(0, 2, static_cast<uint64_t>(i) * 64, 64, true, kNoWait, 100 + w, {}, &took)) {
          taken.fetch_add(took);
          t->leave(0);
        }
      }
    });
  }
  for (auto& w : writers) w.join();
  EXPECT_EQ(taken.load(), kSize);
}

}  // namespace
}  // namespace kvs
