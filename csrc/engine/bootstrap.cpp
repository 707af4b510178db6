#include "engine/bootstrap.h"

#include <sys/socket.h>
#include <unistd.h>

#include <cstring>

#include "common/bytes.h"
#include "common/net.h"

namespace kvs {
namespace {

// Hello: u32 magic, u16 version, u16 zero. Reply: u32 magic, u32 length, then the descriptor.
constexpr uint32_t kHelloMagic = 0x4b565342;  // "KVSB"
constexpr uint16_t kHelloVersion = 1;
constexpr size_t kHelloSize = 8;
constexpr uint32_t kMaxDescriptor = 64u << 20;
constexpr size_t kMaxConnections = 64;
constexpr int kPollMs = 100;

bool keep_waiting_until(int* stalled, int timeout_ms) {
  return ++*stalled * kPollMs < timeout_ms;
}

}  // namespace

BootstrapServer::BootstrapServer(DescriptorFn descriptor, int timeout_ms)
    : descriptor_(std::move(descriptor)),
      timeout_ms_(timeout_ms),
      acceptor_([this](int fd, const std::atomic<bool>& stopping) { serve(fd, stopping); },
                AcceptorConfig{kPollMs, 0, kMaxConnections}) {}

void BootstrapServer::serve(int fd, const std::atomic<bool>& stopping) {
  char hello[kHelloSize];
  int stalled = 0;
  Status st = recv_exact(fd, hello, kHelloSize, [&](size_t) {
    return !stopping.load() && keep_waiting_until(&stalled, timeout_ms_);
  });
  if (!st.ok()) return;
  ByteReader r(hello, kHelloSize);
  if (r.get<uint32_t>() != kHelloMagic || r.get<uint16_t>() != kHelloVersion || r.get<uint16_t>() != 0)
    return;
  const std::vector<char> body = descriptor_();
  ByteWriter w;
  w.put<uint32_t>(kHelloMagic);
  w.put<uint32_t>(static_cast<uint32_t>(body.size()));
  w.bytes().insert(w.bytes().end(), body.begin(), body.end());
  (void)send_all(fd, w.bytes().data(), w.bytes().size(), timeout_ms_ / kPollMs + 1);
}

StatusOr<EngineDescriptor> fetch_descriptor(const std::string& name, int timeout_ms) {
  auto hp = parse_host_port(name);
  if (!hp.ok()) return hp.status();
  auto fd = tcp_connect(hp.value().host, hp.value().port, timeout_ms);
  if (!fd.ok()) return fd.status();
  tune_data_socket(fd.value(), kPollMs, 0);
  ByteWriter hello;
  hello.put<uint32_t>(kHelloMagic);
  hello.put<uint16_t>(kHelloVersion);
  hello.put<uint16_t>(0);
  int stalled = 0;
  auto keep_waiting = [&](size_t) { return keep_waiting_until(&stalled, timeout_ms); };
  Status st = send_all(fd.value(), hello.bytes().data(), hello.bytes().size(), timeout_ms / kPollMs + 1);
  char head[8];
  if (st.ok()) st = recv_exact(fd.value(), head, sizeof(head), keep_waiting);
  StatusOr<EngineDescriptor> result = st;
  if (st.ok()) {
    ByteReader r(head, sizeof(head));
    const auto magic = r.get<uint32_t>();
    const auto length = r.get<uint32_t>();
    if (magic != kHelloMagic || length > kMaxDescriptor) {
      result = Status(Code::kProtocolError, name + " is not a kvstore engine (bad handshake reply)");
    } else {
      std::vector<char> body(length);
      st = recv_exact(fd.value(), body.data(), body.size(), keep_waiting);
      result = st.ok() ? decode_descriptor(body.data(), body.size()) : StatusOr<EngineDescriptor>(st);
    }
  }
  close(fd.value());
  if (!result.ok() && result.status().code() == Code::kTimedOut) {
    return Status(Code::kConnectionFailed, "handshake with " + name + " timed out");
  }
  return result;
}

}  // namespace kvs
