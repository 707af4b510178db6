#include "engine/bootstrap.h"

#include <sys/socket.h>
#include <unistd.h>

#include "common/bytes.h"
#include "common/hmac.h"
#include "common/net.h"

namespace kvs {
namespace {

// Hello: u32 magic, u16 version, u16 zero, the peer's nonce. Challenge: u32 magic, the engine's nonce.
// Then the peer's proof; then the engine's proof, u32 magic, u32 length, the descriptor (its region keys
// the session's: core/session.h). The engine proves last: a peer that has not proved the secret gets
// nothing computed from it (else one connection is an offline oracle for guessing the secret).
constexpr uint32_t kHelloMagic = 0x4b565342;  // "KVSB"
// 2: challenge-response first; 3: session-scoped keys; 4: the engine proves last.
constexpr uint16_t kHelloVersion = 4;
constexpr size_t kHelloSize = 8 + kNonceSize;
constexpr size_t kChallengeSize = 4 + kNonceSize;
constexpr uint32_t kMaxDescriptor = 64u << 20;
constexpr size_t kMaxConnections = 64;  // handshakes at once (each takes a round trip, then closes)
constexpr size_t kMaxConnectionsPerPeer = 16;
constexpr int kPollMs = 100;

bool keep_waiting_until(int* stalled, int timeout_ms) {
  return ++*stalled * kPollMs < timeout_ms;
}

}  // namespace

BootstrapServer::BootstrapServer(DescriptorFn descriptor, int timeout_ms, std::string secret)
    : descriptor_(std::move(descriptor)),
      timeout_ms_(timeout_ms),
      secret_(std::move(secret)),
      acceptor_(
          [this](int fd, const std::atomic<bool>& stopping, ConnState& state) { serve(fd, stopping, state); },
          AcceptorConfig{kPollMs, 0, kMaxConnections, kMaxConnectionsPerPeer, timeout_ms}) {}

void BootstrapServer::serve(int fd, const std::atomic<bool>& stopping, ConnState& state) {
  char hello[kHelloSize];
  int stalled = 0;
  auto keep_waiting = [&](size_t) { return !stopping.load() && keep_waiting_until(&stalled, timeout_ms_); };
  Status st = recv_exact(fd, hello, kHelloSize, keep_waiting);
  if (!st.ok()) return;
  ByteReader r(hello, kHelloSize);
  if (r.get<uint32_t>() != kHelloMagic || r.get<uint16_t>() != kHelloVersion || r.get<uint16_t>() != 0) {
    acceptor_.log_refusal("a handshake", fd, "not a kvstore engine of this version");
    return;
  }
  state.spoke();  // (a handshake in flight: a flood from its address does not take its place)
  const std::string theirs(hello + 8, kNonceSize);
  const std::string ours = random_bytes(kNonceSize);
  ByteWriter challenge;
  challenge.put<uint32_t>(kHelloMagic);
  challenge.bytes().insert(challenge.bytes().end(), ours.begin(), ours.end());
  st = send_all(fd, challenge.bytes().data(), challenge.bytes().size(), timeout_ms_ / kPollMs + 1);
  Digest answer{};
  if (st.ok()) st = recv_exact(fd, answer.data(), answer.size(), keep_waiting);
  if (!st.ok()) return;
  if (!same_mac(answer, prove(secret_, "peer", ours, theirs))) {
    acceptor_.log_refusal("a handshake", fd, "wrong cluster secret");
    return;  // (nothing of this engine is sent)
  }
  state.prove();
  const std::vector<char> body = descriptor_(derive_session(secret_, theirs + ours));
  const Digest mine = prove(secret_, "engine", theirs, ours);  // (only now: the peer proved itself)
  ByteWriter w;
  w.bytes().insert(w.bytes().end(), mine.begin(), mine.end());
  w.put<uint32_t>(kHelloMagic);
  w.put<uint32_t>(static_cast<uint32_t>(body.size()));
  w.bytes().insert(w.bytes().end(), body.begin(), body.end());
  (void)send_all(fd, w.bytes().data(), w.bytes().size(), timeout_ms_ / kPollMs + 1);
}

StatusOr<EngineDescriptor> fetch_descriptor(const std::string& name, int timeout_ms,
                                            const std::string& secret) {
  auto hp = parse_host_port(name);
  if (!hp.ok()) return hp.status();
  auto fd = tcp_connect(hp.value().host, hp.value().port, timeout_ms);
  if (!fd.ok()) return fd.status();
  tune_data_socket(fd.value(), kPollMs, 0);
  const std::string ours = random_bytes(kNonceSize);
  ByteWriter hello;
  hello.put<uint32_t>(kHelloMagic);
  hello.put<uint16_t>(kHelloVersion);
  hello.put<uint16_t>(0);
  hello.bytes().insert(hello.bytes().end(), ours.begin(), ours.end());
  int stalled = 0;
  auto keep_waiting = [&](size_t) { return keep_waiting_until(&stalled, timeout_ms); };
  Status st = send_all(fd.value(), hello.bytes().data(), hello.bytes().size(), timeout_ms / kPollMs + 1);
  char challenge[kChallengeSize] = {};
  if (st.ok()) st = recv_exact(fd.value(), challenge, sizeof(challenge), keep_waiting);
  const std::string theirs(challenge + 4, kNonceSize);
  if (st.ok()) {
    ByteReader r(challenge, 4);
    if (r.get<uint32_t>() != kHelloMagic) {
      st = Status(Code::kProtocolError,
                  name + " is not a kvstore engine of this version (bad handshake reply)");
    } else {
      const Digest mine = prove(secret, "peer", theirs, ours);
      st = send_all(fd.value(), mine.data(), mine.size(), timeout_ms / kPollMs + 1);
    }
  }
  Digest claimed{};
  if (st.ok()) {
    st = recv_exact(fd.value(), claimed.data(), claimed.size(), keep_waiting);
    if (st.code() == Code::kConnectionFailed) {  // (closed at our proof: it refused it)
      st = Status(Code::kPermissionDenied,
                  secret.empty() ? "engine " + name +
                                       " has a cluster secret and this process none: set "
                                       "KVSTORE_CLUSTER_SECRET_FILE (or KVSTORE_CLUSTER_SECRET) as for the "
                                       "rest of the cluster"
                                 : "engine " + name +
                                       " refused this process's proof: it does not share this cluster "
                                       "secret (KVSTORE_CLUSTER_SECRET / _FILE)");
    } else if (st.ok() && !same_mac(claimed, prove(secret, "engine", ours, theirs))) {
      st = Status(Code::kPermissionDenied,
                  "engine " + name + " does not share this cluster secret (KVSTORE_CLUSTER_SECRET / _FILE)");
    }
  }
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
      if (result.ok()) result.value().session = derive_session(secret, ours + theirs);
    }
  }
  close(fd.value());
  if (!result.ok() && result.status().code() == Code::kTimedOut) {
    return Status(Code::kConnectionFailed, "handshake with " + name + " timed out");
  }
  return result;
}

}  // namespace kvs
