// MemorySpace: where new replicas go. Each on the roomier of two segments drawn among those that fit (in
// proportion to capacity), distinct segments, distinct hosts first; reproducible from a seed.
#include "meta/memory_space.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

namespace kvs::meta {
namespace {

constexpr uint64_t kKiB = 1024;

struct Segments {
  MemorySpace space;
  std::map<uint32_t, std::shared_ptr<OffsetAllocator>> allocators;

  void add(uint32_t id, const std::string& host, uint64_t size) {
    allocators[id] = std::make_shared<OffsetAllocator>(size, 64);
    space.add(id, host, allocators[id], std::make_shared<SlotPool>(1u << 20));
  }
  // Places `n` objects of `size`, one replica each: how many went to each segment.
  std::map<uint32_t, int> place(int n, uint64_t size) {
    std::vector<Placed> out;
    EXPECT_EQ(space.place_many(std::vector<uint64_t>(n, size), 1, out), static_cast<size_t>(n));
    std::map<uint32_t, int> counts;
    for (const Placed& p : out) ++counts[p.segment];
    return counts;
  }
};

TEST(MemorySpace, OnlySegmentsThatFitAreDrawn) {
  Segments s;
  s.add(1, "a", 64 * kKiB);
  s.add(2, "b", 16 * kKiB);
  std::vector<Placed> out;
  EXPECT_EQ(s.space.place_many(std::vector<uint64_t>(5, 20 * kKiB), 1, out), 3u);  // 3 fit on 1, none on 2
  for (const Placed& p : out) EXPECT_EQ(p.segment, 1u);
  EXPECT_EQ(s.allocators[2]->stats().used, 0u);
}

TEST(MemorySpace, ANewcomerAmongNearlyFullSegmentsTakesAboutTwoInN) {
  Segments s;
  for (uint32_t id = 1; id <= 4; ++id) s.add(id, "h" + std::to_string(id), 4096 * kKiB);
  s.place(4 * 3686, kKiB);  // each about 90% full
  s.add(5, "h5", 4096 * kKiB);
  const auto counts = s.place(1600, kKiB);
  const double share = counts.at(5) / 1600.0;
  EXPECT_LE(share, 0.40);  // fair is 0.2; two draws among five: 1 - (4/5)^2 = 0.36
  EXPECT_GE(share, 0.30);
  for (uint32_t id = 1; id <= 4; ++id) EXPECT_GT(counts.at(id), 200);
}

TEST(MemorySpace, FromEmptySegmentsOfEachSizeFillInProportion) {
  Segments s;
  s.add(1, "a", 1024 * kKiB);
  s.add(2, "b", 1024 * kKiB);
  s.add(3, "c", 4096 * kKiB);
  s.place(3072, kKiB);  // half of 6 MiB
  std::vector<double> used;
  for (const auto& [id, a] : s.allocators)
    used.push_back(static_cast<double>(a->stats().used) / a->capacity());
  for (double u : used) EXPECT_NEAR(u, 0.5, 0.05);
}

// The segments 50 objects of 1 KiB go to over five mounts of 1 MiB, placed after seed(`seed`) and
// `before` earlier draws (placements of which are given back).
std::vector<uint32_t> placed_after(uint64_t seed, int before = 0) {
  Segments s;
  for (uint32_t id = 1; id <= 5; ++id) s.add(id, "h" + std::to_string(id), 1024 * kKiB);
  s.space.seed(seed);
  for (int i = 0; i < before; ++i) {
    std::vector<Placed> drawn;
    s.space.place(kKiB, 1, {}, {}, drawn);
    s.allocators[drawn[0].segment]->free(drawn[0].offset);
  }
  s.space.seed(seed);  // restarts the draws: what came before no longer matters
  std::vector<Placed> out;
  s.space.place_many(std::vector<uint64_t>(50, kKiB), 1, out);
  std::vector<uint32_t> segments;
  for (const Placed& p : out) segments.push_back(p.segment);
  return segments;
}

TEST(MemorySpace, TheSameSeedPlacesTheSameWay) {
  const auto first = placed_after(42);
  EXPECT_EQ(placed_after(42), first);
  EXPECT_EQ(placed_after(42, 7), first);  // seed() after draws restarts the sequence
  EXPECT_NE(placed_after(43), first);     // another seed, other draws
  EXPECT_GT(std::set<uint32_t>(first.begin(), first.end()).size(), 1u);
}

TEST(MemorySpace, CapacitiesSummingPast64BitsAreEachDrawn) {
  // Four mounts of 2^62 bytes sum to exactly 2^64: a wrapped sum (0) sent every draw to the first.
  Segments s;
  for (uint32_t id = 1; id <= 4; ++id) s.add(id, "h" + std::to_string(id), uint64_t{1} << 62);
  const auto counts = s.place(400, kKiB);
  ASSERT_EQ(counts.size(), 4u);
  for (const auto& [id, n] : counts) EXPECT_GT(n, 50) << "segment " << id;
}

TEST(MemorySpace, ReplicasTakeDistinctSegmentsAndHostsWhileHostsLast) {
  Segments s;
  for (uint32_t id = 1; id <= 6; ++id) s.add(id, "h" + std::to_string(id % 3), 1024 * kKiB);
  std::map<uint32_t, std::string> host;
  for (uint32_t id = 1; id <= 6; ++id) host[id] = "h" + std::to_string(id % 3);
  for (uint32_t count : {2u, 3u, 4u}) {
    for (int i = 0; i < 100; ++i) {
      std::vector<Placed> out;
      ASSERT_TRUE(s.space.place(kKiB, count, {}, {}, out));
      std::set<uint32_t> segments;
      std::set<std::string> hosts;
      for (const Placed& p : out) segments.insert(p.segment), hosts.insert(host[p.segment]);
      EXPECT_EQ(segments.size(), count);
      EXPECT_EQ(hosts.size(), std::min(count, 3u));
    }
  }
}

}  // namespace
}  // namespace kvs::meta
