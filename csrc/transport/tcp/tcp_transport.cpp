#include "transport/tcp/tcp_transport.h"

#include <algorithm>
#include <thread>

#include "common/net.h"
#include "transport/tcp/tcp_channel.h"
#include "transport/tcp/tcp_paths.h"
#include "transport/tcp/tcp_server.h"

namespace kvs::tcp {

namespace {

int64_t default_busy_poll_us() {
  return std::thread::hardware_concurrency() >= 8 ? 50 : 0;
}

}  // namespace

std::vector<OptionSpec> TcpConfig::specs() {
  const int64_t gib = int64_t{1} << 30;
  return {
      {"connections", OptionKind::kInt, 2, 1, 64,
       "Data connections per peer; slices are spread over them (2 reach ~1.5x one on loopback)."},
      {"slice_size", OptionKind::kSize, 1 << 20, 4096, gib,
       "Requests are cut into slices of at most this many bytes, each moved as one frame."},
      {"max_payload", OptionKind::kSize, 64 << 20, 4096, gib,
       "Largest frame payload accepted from a peer; larger frames close the connection."},
      {"io_timeout", OptionKind::kDuration, 5000, 1, 3600000,
       "Without progress for this long, a busy connection is declared dead."},
      {"connect_timeout", OptionKind::kDuration, 3000, 1, 600000, "How long to wait for a peer to accept."},
      {"socket_buffer", OptionKind::kSize, 4 << 20, 0, gib,
       "SO_SNDBUF/SO_RCVBUF of data connections (capped by net.core.[rw]mem_max); 0 keeps the kernel's "
       "autotuning. 4 MiB lifts loopback throughput by ~15-20% on the reference machine."},
      {"busy_poll_us", OptionKind::kInt, default_busy_poll_us(), 0, 10000,
       "Microseconds to spin for a due reply or request before sleeping (a sleeping thread takes tens of "
       "microseconds to wake on a VM). Default: 50 on hosts of 8 or more cores, else 0 (on 2 cores the "
       "spinning I/O threads took the cores the copies needed: 64 KiB reads at 0.46 of a raw TCP stream "
       "with it, 0.66 without)."},
      {"max_connections", OptionKind::kInt, 1024, 1, 65536,
       "Connections this engine's tcp server serves at once; when full, the one silent the longest gives its "
       "place to a new one: one that has not sent a well-formed frame yet, else an authenticated one idle "
       "for "
       "evict_idle_timeout; when every one is in use the new one is closed."},
      {"max_connections_per_peer", OptionKind::kInt, 128, 1, 65536,
       "Connections the tcp server takes from one address, the same way (no peer can fill the server for "
       "the others)."},
      {"first_frame_timeout", OptionKind::kDuration, 10000, 1, 3600000,
       "A connection that sends no well-formed frame within this is cut (idle and half-open sockets)."},
      {"idle_timeout", OptionKind::kDuration, 120000, 0, 86400000,
       "An authenticated connection with no request for this long is cut (0: never); a client opens it again "
       "when it next sends."},
      {"evict_idle_timeout", OptionKind::kDuration, 1000, 0, 86400000,
       "An authenticated connection idle this long may be cut for a new one when the server is full (0: "
       "never)."},
      {"max_waits_per_peer", OptionKind::kInt, 16, 0, 65536,
       "Requests from one address that may wait at once for their allocation's announcement (the node "
       "announces each as the master places it); the others are refused as stale at once. A waiting "
       "connection counts as idle."},
  };
}

TcpConfig TcpConfig::from(const Options& options) {
  TcpConfig c;
  c.connections = static_cast<int>(options.get("connections"));
  c.slice_size = static_cast<uint64_t>(options.get("slice_size"));
  c.max_payload = static_cast<uint64_t>(options.get("max_payload"));
  c.io_timeout_ms = static_cast<int>(options.get("io_timeout"));
  c.connect_timeout_ms = static_cast<int>(options.get("connect_timeout"));
  c.socket_buffer = static_cast<int>(options.get("socket_buffer"));
  c.busy_poll_us = static_cast<int>(options.get("busy_poll_us"));
  c.max_connections = static_cast<size_t>(options.get("max_connections"));
  c.max_connections_per_peer = static_cast<size_t>(options.get("max_connections_per_peer"));
  c.prove_ms = static_cast<int>(options.get("first_frame_timeout"));
  c.idle_ms = static_cast<int>(options.get("idle_timeout"));
  c.evict_idle_ms = static_cast<int>(options.get("evict_idle_timeout"));
  c.max_waits_per_peer = static_cast<size_t>(options.get("max_waits_per_peer"));
  c.poll_ms = std::max(1, std::min(100, c.io_timeout_ms / 4));
  return c;
}

namespace {

bool is_loopback(const std::string& host) {
  return host.rfind("127.", 0) == 0 || host == "::1" || host == "localhost";
}

bool is_wildcard(const std::string& host) {
  return host.empty() || host == "0.0.0.0" || host == "::";
}

// Serves peers on the engine's address and, unless that is loopback, on every other address of the NICs
// it may use (one server each, or the one wildcard server): each is an endpoint in the descriptor, so a
// peer with NICs on the same subnets opens a path per NIC.
class TcpTransport : public Transport {
 public:
  TcpTransport(const TransportContext& context, const Options& options)
      : context_(context), config_(TcpConfig::from(options)) {}
  ~TcpTransport() override { stop(); }

  Status start() override {
    const std::string& host = context_.listen_host;
    auto main = std::make_unique<TcpServer>(context_.registry.get(), context_.engine_id,
                                            context_.cluster_secret, config_);
    Status st = main->start(host, 0);
    if (!st.ok()) return st;
    const uint16_t port = main->port();
    servers_.push_back(std::move(main));
    endpoints_ = {Endpoint{nic_named_by(host), host, port}};
    if (is_loopback(host)) return Status::OK();
    for (const auto& nic : context_.nics) {
      if (nic.address == host) continue;
      if (is_wildcard(host)) {
        endpoints_.push_back(Endpoint{nic.name, nic.address, port});
        continue;
      }
      auto extra = std::make_unique<TcpServer>(context_.registry.get(), context_.engine_id,
                                               context_.cluster_secret, config_);
      if (!extra->start(nic.address, 0).ok()) continue;  // (an address gone since discovery: not offered)
      endpoints_.push_back(Endpoint{nic.name, nic.address, extra->port()});
      servers_.push_back(std::move(extra));
    }
    return Status::OK();
  }
  void stop() override {
    for (auto& s : servers_) s->stop();
  }
  std::vector<char> descriptor_section() const override {
    if (endpoints_.empty()) return {};
    return encode_endpoints(endpoints_);
  }
  std::map<std::string, std::string> describe_section(const std::vector<char>& section) const override {
    auto endpoints = decode_endpoints(&section);
    if (!endpoints.ok()) return {{"error", endpoints.status().message()}};
    std::string all;
    for (const auto& e : endpoints.value()) {
      all += (all.empty() ? "" : ",") + (e.nic.empty() ? "" : e.nic + "=") + format_host_port(e.host, e.port);
    }
    const Endpoint& main = endpoints.value().front();
    return {{"address", format_host_port(main.host, main.port)}, {"endpoints", all}};
  }

  uint64_t slice_size() const override { return config_.slice_size; }
  bool reachable(const EngineDescriptor& peer) const override {
    return decode_endpoints(peer.section("tcp")).ok();
  }
  StatusOr<std::shared_ptr<Channel>> connect(const EngineDescriptor& peer) override {
    auto endpoints = decode_endpoints(peer.section("tcp"));
    if (!endpoints.ok()) return endpoints.status();
    auto channel = TcpChannel::open(config_, peer.engine_id, peer.session,
                                    plan_paths(context_.nics, endpoints.value()), context_.topology.get());
    if (!channel.ok()) return channel.status();
    return std::shared_ptr<Channel>(std::move(channel.value()));
  }

 private:
  std::string nic_named_by(const std::string& address) const {
    for (const auto& nic : context_.nics) {
      if (nic.address == address) return nic.name;
    }
    return "";
  }

  TransportContext context_;
  TcpConfig config_;
  std::vector<std::unique_ptr<TcpServer>> servers_;
  std::vector<Endpoint> endpoints_;
};

}  // namespace
}  // namespace kvs::tcp

namespace kvs {

const TransportEntry& tcp_transport_entry() {
  static const TransportEntry entry{
      "tcp",
      // Serves file regions (read) and GPU regions (staged through host memory) besides host memory.
      Capabilities{100, kReachSameProcess | kReachSameHost | kReachRemote, kAllHostKinds,
                   kAllHostKinds | kind_bit(MemoryKind::kFile) | kind_bit(MemoryKind::kGpu), false, true},
      tcp::TcpConfig::specs(),
      [](const TransportContext& context, const Options& options) -> std::unique_ptr<Transport> {
        return std::make_unique<tcp::TcpTransport>(context, options);
      },
  };
  return entry;
}

}  // namespace kvs
