// The TCP transport's frame header against hostile bytes: every malformed header is refused with a
// protocol error, and what encode_header writes decodes to itself.
#include <gtest/gtest.h>

#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "transport/tcp/wire.h"

namespace kvs::tcp {
namespace {

constexpr uint64_t kMaxPayload = 1 << 20;

std::vector<char> encoded(const FrameHeader& h) {
  std::vector<char> out(kHeaderSize);
  encode_header(h, out.data());
  return out;
}

FrameHeader write_frame(uint64_t length) {
  FrameHeader h;
  h.opcode = Opcode::kWrite;
  h.request_id = 42;
  h.region_id = 3;
  h.key = 0x1122334455667788ULL;
  h.offset = 4096;
  h.length = length;
  h.fence_slot = 17;
  h.fence_gen = 99;
  return h;
}

void expect_refused(const std::vector<char>& bytes, const std::string& why, size_t size = kHeaderSize) {
  const auto decoded = decode_header(bytes.data(), size, kMaxPayload);
  ASSERT_FALSE(decoded.ok()) << "accepted a header that is " << why;
  EXPECT_EQ(decoded.status().code(), Code::kProtocolError) << why;
}

TEST(TcpWire, AnEncodedHeaderDecodesToItself) {
  const FrameHeader h = write_frame(512);
  const auto decoded = decode_header(encoded(h).data(), kHeaderSize, kMaxPayload);
  ASSERT_TRUE(decoded.ok()) << decoded.status().to_string();
  const FrameHeader& d = decoded.value();
  EXPECT_EQ(d.opcode, h.opcode);
  EXPECT_EQ(d.request_id, h.request_id);
  EXPECT_EQ(d.region_id, h.region_id);
  EXPECT_EQ(d.key, h.key);
  EXPECT_EQ(d.offset, h.offset);
  EXPECT_EQ(d.length, h.length);
  EXPECT_EQ(d.fence_slot, h.fence_slot);
  EXPECT_EQ(d.fence_gen, h.fence_gen);
}

TEST(TcpWire, TruncatedAndOverlongHeadersAreRefused) {
  const std::vector<char> bytes = encoded(write_frame(512));
  for (size_t size : {size_t{0}, size_t{1}, size_t{4}, kHeaderSize - 1}) {
    // (a buffer exactly `size` bytes long: ASan catches any read past it)
    std::vector<char> shorter(bytes.begin(), bytes.begin() + static_cast<long>(size));
    expect_refused(shorter, "truncated to " + std::to_string(size), size);
  }
  std::vector<char> longer = bytes;
  longer.push_back(0);
  expect_refused(longer, "one byte too long", longer.size());
}

TEST(TcpWire, BadMagicVersionOpcodeOrFlagsAreRefused) {
  const std::vector<char> good = encoded(write_frame(512));
  auto with_byte = [&](size_t at, unsigned char value) {
    std::vector<char> b = good;
    b[at] = static_cast<char>(value);
    return b;
  };
  expect_refused(with_byte(0, good[0] ^ 1), "of another magic");
  expect_refused(with_byte(4, kVersion + 1), "of another version");
  expect_refused(with_byte(4, kVersion - 1), "of an older version");
  expect_refused(with_byte(5, 0), "opcode 0");
  expect_refused(with_byte(5, static_cast<unsigned char>(Opcode::kProofAck) + 1), "an unknown opcode");
  expect_refused(with_byte(5, 0xff), "opcode 255");
  expect_refused(with_byte(6, 1), "flagged");
  expect_refused(with_byte(7, 0x80), "flagged (high byte)");
}

TEST(TcpWire, PayloadLengthsOutsideTheirBoundsAreRefused) {
  expect_refused(encoded(write_frame(kMaxPayload + 1)), "a write over the frame limit");
  expect_refused(encoded(write_frame(std::numeric_limits<uint64_t>::max())), "a write of 2^64-1 bytes");
  expect_refused(encoded(write_frame(0)), "an empty write");
  FrameHeader read = write_frame(0);
  read.opcode = Opcode::kRead;
  expect_refused(encoded(read), "an empty read");
  read.length = kMaxPayload + 1;
  expect_refused(encoded(read), "a read over the frame limit");
  read.length = kMaxPayload;
  EXPECT_TRUE(decode_header(encoded(read).data(), kHeaderSize, kMaxPayload).ok());
  FrameHeader data = write_frame(kMaxPayload + 1);
  data.opcode = Opcode::kReadData;
  expect_refused(encoded(data), "read data over the frame limit");
}

TEST(TcpWire, HandshakeFramesHaveExactlyTheirSize) {
  const std::pair<Opcode, uint64_t> handshakes[] = {{Opcode::kHello, kHelloPayload},
                                                    {Opcode::kHelloAck, kHelloAckPayload},
                                                    {Opcode::kProof, kProofPayload}};
  for (const auto& [opcode, size] : handshakes) {
    FrameHeader h;
    h.opcode = opcode;
    h.length = size;
    EXPECT_TRUE(decode_header(encoded(h).data(), kHeaderSize, kMaxPayload).ok());
    for (uint64_t wrong : {uint64_t{0}, size - 1, size + 1, kMaxPayload}) {
      h.length = wrong;
      expect_refused(encoded(h), "a handshake frame of " + std::to_string(wrong) + " bytes");
    }
  }
}

TEST(TcpWire, FramesWithoutPayloadCarryNoLength) {
  for (Opcode opcode : {Opcode::kWriteAck, Opcode::kError, Opcode::kProofAck}) {
    FrameHeader h;
    h.opcode = opcode;
    EXPECT_FALSE(carries_payload(opcode));
    EXPECT_TRUE(decode_header(encoded(h).data(), kHeaderSize, kMaxPayload).ok());
    h.length = 1;
    expect_refused(encoded(h), "a payload-less frame with a length");
  }
}

TEST(TcpWire, RandomHeadersNeverDecodeOutsideTheRules) {
  // Random bytes behind a valid prefix: whatever decodes must satisfy every rule decode_header states.
  uint64_t seed = 7;
  std::vector<char> bytes = encoded(write_frame(1));
  for (int i = 0; i < 200000; ++i) {
    for (size_t k = 5; k < kHeaderSize; ++k) {
      seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
      bytes[k] = static_cast<char>(seed >> 56);
    }
    bytes[5] = static_cast<char>(1 + (static_cast<unsigned char>(bytes[5]) % 10));  // mostly known opcodes
    if (i % 2 == 0) bytes[6] = bytes[7] = 0;
    if (i % 3 == 0)
      std::memset(bytes.data() + 51, 0, 5);  // (little-endian length at 48) below 2^24 a third of the time
    const auto decoded = decode_header(bytes.data(), kHeaderSize, kMaxPayload);
    if (!decoded.ok()) continue;
    const FrameHeader& h = decoded.value();
    ASSERT_LE(h.length, kMaxPayload);
    if (h.opcode == Opcode::kRead || h.opcode == Opcode::kWrite) {
      ASSERT_GT(h.length, 0u);
    }
    if (!carries_payload(h.opcode) && h.opcode != Opcode::kRead) {
      ASSERT_EQ(h.length, 0u);
    }
  }
}

}  // namespace
}  // namespace kvs::tcp
