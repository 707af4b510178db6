// range_tags: which of a set of disjoint ranges holds each piece of a batch, tried first at the previous
// piece's range and its neighbours, then by binary search.
#include "common/range_lookup.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <vector>

namespace kvs {
namespace {

// Three ranges with a gap between the second and the third: [100, 200) [200, 300) [400, 500).
struct Ranges {
  std::vector<int64_t> starts{100, 200, 400};
  std::vector<int64_t> ends{200, 300, 500};
  std::vector<int64_t> tags{7, 8, 9};

  bool lookup(const std::vector<uint64_t>& addrs, const std::vector<uint64_t>& lengths,
              std::vector<int64_t>& found) const {
    found.assign(addrs.size(), -1);
    return range_tags(starts.data(), ends.data(), tags.data(), starts.size(), addrs.data(), lengths.data(),
                      addrs.size(), found.data());
  }
};

TEST(RangeLookup, EachPieceGetsTheTagOfTheRangeHoldingIt) {
  Ranges r;
  std::vector<int64_t> found;
  ASSERT_TRUE(r.lookup({100, 250, 400, 199, 450}, {100, 50, 100, 1, 10}, found));
  EXPECT_EQ(found, (std::vector<int64_t>{7, 8, 9, 7, 9}));
}

TEST(RangeLookup, NeighboursAndFarRangesInAnyOrder) {
  Ranges r;
  std::vector<int64_t> found;
  // after, before, two away, back again: the fast path's guesses miss and the search must find them
  ASSERT_TRUE(r.lookup({410, 150, 210, 110, 490, 120}, {1, 1, 1, 1, 10, 80}, found));
  EXPECT_EQ(found, (std::vector<int64_t>{9, 7, 8, 7, 9, 7}));
}

TEST(RangeLookup, APieceCrossingARangesEndIsRefusedEvenWhenTheNextRangeAdjoins) {
  Ranges r;
  std::vector<int64_t> found;
  EXPECT_FALSE(r.lookup({150}, {51}, found));  // [150, 201): 1 byte in the adjoining [200, 300)
  EXPECT_FALSE(r.lookup({290}, {11}, found));  // past 300, into the gap
  EXPECT_TRUE(r.lookup({150}, {50}, found));
  EXPECT_EQ(found[0], 7);
}

TEST(RangeLookup, AddressesOutsideEveryRangeAreRefused) {
  Ranges r;
  std::vector<int64_t> found;
  EXPECT_FALSE(r.lookup({99}, {1}, found));   // below the first
  EXPECT_FALSE(r.lookup({300}, {1}, found));  // in the gap (the end is exclusive)
  EXPECT_FALSE(r.lookup({500}, {1}, found));  // at the last end
  EXPECT_FALSE(r.lookup({1000}, {1}, found));
  // an address above what int64_t holds, and a length that wraps the address space
  EXPECT_FALSE(r.lookup({std::numeric_limits<uint64_t>::max()}, {1}, found));
  EXPECT_FALSE(r.lookup({450}, {std::numeric_limits<uint64_t>::max()}, found));
}

TEST(RangeLookup, AnEmptyPieceIsRefusedEvenInsideARange) {
  Ranges r;
  std::vector<int64_t> found;
  EXPECT_FALSE(r.lookup({150}, {0}, found));
  EXPECT_FALSE(r.lookup({150, 160}, {1, 0}, found));
}

TEST(RangeLookup, ABadPieceAfterGoodOnesFailsTheBatch) {
  Ranges r;
  std::vector<int64_t> found;
  EXPECT_FALSE(r.lookup({150, 250, 350}, {1, 1, 1}, found));
  EXPECT_EQ(found[0], 7);  // (written up to the failure: callers treat the batch as failed)
}

TEST(RangeLookup, NoRangesHoldNothing) {
  const uint64_t addr = 10;
  const uint64_t length = 1;
  int64_t found = -1;
  EXPECT_FALSE(range_tags(nullptr, nullptr, nullptr, 0, &addr, &length, 1, &found));
  EXPECT_TRUE(range_tags(nullptr, nullptr, nullptr, 0, &addr, &length, 0, &found));  // no pieces
}

TEST(RangeLookup, ManyRangesMatchALinearScan) {
  // 300 ranges of varying sizes and gaps, pieces visiting them in a paged pattern and at random.
  std::vector<int64_t> starts, ends, tags;
  int64_t at = 4096;
  for (int k = 0; k < 300; ++k) {
    starts.push_back(at);
    ends.push_back(at + 64 + (k % 7) * 32);
    tags.push_back(1000 + k);
    at = ends.back() + (k % 3) * 16;  // adjoining or a small gap
  }
  std::vector<uint64_t> addrs, lengths;
  uint64_t seed = 12345;
  for (int i = 0; i < 5000; ++i) {
    seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
    const size_t k = i < 2000 ? static_cast<size_t>(i % 300) : static_cast<size_t>((seed >> 33) % 300);
    const uint64_t span = static_cast<uint64_t>(ends[k] - starts[k]);
    const uint64_t offset = (seed >> 13) % span;
    addrs.push_back(static_cast<uint64_t>(starts[k]) + offset);
    lengths.push_back(1 + (seed >> 40) % (span - offset));
  }
  std::vector<int64_t> found(addrs.size(), -1);
  ASSERT_TRUE(range_tags(starts.data(), ends.data(), tags.data(), starts.size(), addrs.data(), lengths.data(),
                         addrs.size(), found.data()));
  for (size_t i = 0; i < addrs.size(); ++i) {
    int64_t expected = -1;
    for (size_t k = 0; k < starts.size(); ++k) {
      if (addrs[i] >= static_cast<uint64_t>(starts[k]) &&
          addrs[i] + lengths[i] <= static_cast<uint64_t>(ends[k]))
        expected = tags[k];
    }
    ASSERT_EQ(found[i], expected) << "piece " << i;
  }
}

}  // namespace
}  // namespace kvs
