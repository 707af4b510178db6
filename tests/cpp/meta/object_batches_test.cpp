// object_batches: a batch's new objects, objects named back, commits, removals and a segment's loss.
#include "meta/object_batches.h"

#include <gtest/gtest.h>

#include <stdexcept>
#include <string>
#include <vector>

namespace kvs::meta {
namespace {

NewObject new_object(std::string_view key, uint64_t size, std::vector<MemoryCopy> copies) {
  NewObject o{key, {}, std::move(copies)};
  o.fields.size = size;
  o.fields.checksum = 11;
  o.fields.writer = 4;
  o.fields.pinned = true;
  o.fields.last_access = 2.5;
  o.fields.base_replicas = 2;
  o.fields.hold_seq = 17;
  o.fields.disk_segment = 6;
  o.fields.disk_offset = 4096;
  return o;
}

TEST(ObjectBatches, NewKeysAdmitsKeysNeitherStoredNorRepeated) {
  ObjectTable t;
  t.insert("old");
  NewKeys keys(t);
  EXPECT_TRUE(keys.admit("a"));
  EXPECT_FALSE(keys.admit("a"));
  EXPECT_FALSE(keys.admit("old"));
  EXPECT_TRUE(keys.admit("b"));
}

TEST(ObjectBatches, AddObjectKeepsEveryFieldAndCopyInOrder) {
  ObjectTable t;
  const MemoryCopy a{1, 2, 64, 3}, b{5, 6, 128, 7};
  const Row row = add_object(t, new_object("k", 100, {a, b}));
  ASSERT_NE(row, kNoRow);
  const Object& o = t.at(row);
  EXPECT_EQ(o.size, 100u);
  EXPECT_EQ(o.checksum, 11u);
  EXPECT_EQ(o.writer, 4u);
  EXPECT_FALSE(o.complete);
  EXPECT_TRUE(o.pinned);
  EXPECT_EQ(o.last_access, 2.5);
  EXPECT_EQ(o.base_replicas, 2);
  EXPECT_EQ(o.hold_seq, 17u);
  EXPECT_EQ(o.disk_segment, 6u);
  EXPECT_EQ(o.disk_offset, 4096u);
  ASSERT_EQ(t.copy_count(row), 2u);
  EXPECT_EQ(t.copy(row, 0), a);
  EXPECT_EQ(t.copy(row, 1), b);
  EXPECT_EQ(add_object(t, new_object("k", 1, {})), kNoRow);
  EXPECT_EQ(t.at(row).size, 100u);  // the present object is untouched
}

TEST(ObjectBatches, AddObjectsRefusesAKeyThatWasNotAdmitted) {
  ObjectTable t;
  add_objects(t, {new_object("a", 1, {}), new_object("b", 1, {})});
  EXPECT_EQ(t.size(), 2u);
  EXPECT_THROW(add_objects(t, {new_object("a", 1, {})}), std::logic_error);
}

TEST(ObjectBatches, AdoptCommitsEachWithItsOneCopyAndCapsItsReplicas) {
  ObjectTable t;
  std::vector<NamedBack> records(2);
  records[0] = {64, 1, 9, "a", 100, 5, true, 3};
  records[1] = {256, 2, 10, "b", 28, 6, false, 1};
  EXPECT_EQ(adopt(t, 7, records, 3, 1.5, 2), 128u);
  const Row a = t.find("a");
  ASSERT_NE(a, kNoRow);
  EXPECT_TRUE(t.at(a).complete);
  EXPECT_TRUE(t.at(a).pinned);
  EXPECT_EQ(t.at(a).writer, 3u);
  EXPECT_EQ(t.at(a).last_access, 1.5);
  EXPECT_EQ(t.at(a).base_replicas, 2);  // asked for 3, capped at 2
  EXPECT_EQ(t.at(t.find("b")).base_replicas, 1);
  ASSERT_EQ(t.copy_count(a), 1u);
  EXPECT_EQ(t.copy(a, 0), (MemoryCopy{7, 1, 64, 9}));
  EXPECT_THROW(adopt(t, 7, {records[0]}, 3, 1.5, 2), std::logic_error);
}

TEST(ObjectBatches, FindAllNamesTheFirstMissingKey) {
  ObjectTable t;
  const Row a = t.insert("a");
  const Row b = t.insert("b");
  const FoundRows all = find_all(t, {"b", "a"});
  EXPECT_EQ(all.missing, SIZE_MAX);
  EXPECT_EQ(all.rows, (std::vector<Row>{b, a}));
  EXPECT_EQ(find_all(t, {"a", "x", "y"}).missing, 1u);
}

TEST(ObjectBatches, CommitCountsOnlyWhatWasNotCommitted) {
  ObjectTable t;
  const Row a = t.insert("a");
  const Row b = t.insert("b");
  t.at(a).size = 10;
  t.at(b).size = 20;
  t.at(b).complete = true;
  EXPECT_EQ(commit_rows(t, {a, b}), 10u);
  EXPECT_TRUE(t.at(a).complete);
  EXPECT_EQ(commit_rows(t, {a}), 0u);
}

TEST(ObjectBatches, ErasingFreesTheBytesOfCommittedObjects) {
  ObjectTable t;
  const Row a = t.insert("a");
  t.at(a).size = 10;
  t.at(a).complete = true;
  t.at(t.insert("pending")).size = 99;
  t.at(t.insert("c")).size = 5;
  t.at(t.find("c")).complete = true;
  EXPECT_EQ(erase_key(t, "pending"), 0);
  EXPECT_EQ(erase_key(t, "absent"), -1);
  EXPECT_EQ(erase_keys(t, {"a", "absent", "c", "a"}), 15u);
  EXPECT_EQ(t.size(), 0u);
}

TEST(ObjectBatches, ASegmentsLossDropsItsCopiesAndSaysWhatIsLeft) {
  ObjectTable t;
  const MemoryCopy lost1{9, 1, 0, 1}, lost2{9, 2, 64, 2}, kept{3, 1, 0, 1};
  t.add_copy(t.insert("both"), lost1);
  t.add_copy(t.find("both"), kept);
  t.add_copy(t.insert("bare"), lost2);
  const Row disk = t.insert("disk");
  t.add_copy(disk, MemoryCopy{9, 3, 128, 3});
  t.at(disk).disk_segment = 4;
  t.add_copy(t.insert("elsewhere"), kept);
  const std::vector<std::string_view> keys{"both", "bare", "disk", "elsewhere", "absent"};
  const SegmentLoss loss = drop_copies_on(t, 9, keys, true);
  ASSERT_EQ(loss.dropped.size(), 3u);
  EXPECT_EQ(loss.dropped[0].index, 0u);
  EXPECT_EQ(loss.dropped[0].copy, lost1);
  EXPECT_EQ(loss.dropped[1].copy, lost2);
  EXPECT_EQ(loss.bare, (std::vector<uint32_t>{1}));
  EXPECT_EQ(loss.disk_only, (std::vector<uint32_t>{2}));
  ASSERT_EQ(t.copy_count(t.find("both")), 1u);
  EXPECT_EQ(t.copy(t.find("both"), 0), kept);
  EXPECT_TRUE(drop_copies_on(t, 3, {"both"}, false).dropped.empty());  // untold
  EXPECT_EQ(t.copy_count(t.find("both")), 0u);
}

}  // namespace
}  // namespace kvs::meta
