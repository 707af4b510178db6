#include "transport/ucx/ucx_transport.h"

#include <algorithm>
#include <cstdlib>
#include <mutex>
#include <unordered_map>

#include "common/limited_log.h"
#include "transport/path/path_plan.h"
#include "transport/ucx/ucx_channel.h"
#include "transport/ucx/ucx_sections.h"
#include "transport/ucx/ucx_worker.h"

namespace kvs::ucx {
namespace {

// Host memory everywhere; GPU memory where the loaded UCX has CUDA support (capabilities() narrows it).
constexpr KindMask kUcxKinds = kAllHostKinds | kind_bit(MemoryKind::kGpu);

struct UcxConfig {
  uint64_t slice_size = 4ull << 20;
  int io_timeout_ms = 5000;
  int busy_poll_us = 50;
  bool prefer = false;
  bool trust_fabric = false;

  static std::vector<OptionSpec> specs() {
    const int64_t gib = int64_t{1} << 30;
    return {
        {"slice_size", OptionKind::kSize, 4 << 20, 4096, gib,
         "Requests are cut into RMA operations of at most this many bytes."},
        {"io_timeout", OptionKind::kDuration, 5000, 1, 3600000,
         "An operation unanswered this long closes its endpoint (every operation on it fails)."},
        {"busy_poll_us", OptionKind::kInt, 50, 0, 10000,
         "Microseconds the worker thread spins for completions before it sleeps on UCX's event fd."},
        {"prefer", OptionKind::kBool, 0, 0, 1,
         "Pick ucx before tcp between hosts even with no RDMA NIC here (by default it comes first only "
         "when KVSTORE_NICS selects an RDMA NIC; UCX's own tcp transport is slower than kvstore's)."},
        {"trust_fabric", OptionKind::kBool, 0, 0, 1,
         "With a cluster secret, start UCX at all: its transfers are one-sided (remote keys that cannot be "
         "scoped to a session, endpoints UCX cannot authenticate), so only where the RDMA fabric reaches "
         "this cluster's hosts alone (partitions / P_Keys). Without a secret (loopback) it needs no leave."},
    };
  }
  static UcxConfig from(const Options& o) {
    UcxConfig c;
    c.slice_size = static_cast<uint64_t>(o.get("slice_size"));
    c.io_timeout_ms = static_cast<int>(o.get("io_timeout"));
    c.busy_poll_us = static_cast<int>(o.get("busy_poll_us"));
    c.prefer = o.get("prefer") != 0;
    c.trust_fabric = o.get("trust_fabric") != 0;
    return c;
  }
};

// A NIC as UCX devices: its RDMA device's port 1 and its net device.
std::string devices_of(const std::vector<NicAddress>& nics) {
  std::vector<std::string> names;
  auto add = [&](const std::string& name) {
    if (!name.empty() && std::find(names.begin(), names.end(), name) == names.end()) names.push_back(name);
  };
  for (const auto& nic : nics) {
    if (!nic.rdma_device.empty()) add(nic.rdma_device + ":1");
    add(nic.name);
  }
  std::string out;
  for (const auto& n : names) out += (out.empty() ? "" : ",") + n;
  return out;
}

// Where the engine has two or more NICs, a UCX context and worker per NIC (a rail), so that a path names
// its local NIC and MultiPathChannel can stripe and fail over; else (or with UCX_NET_DEVICES set: the
// user's choice wins) one for every device UCX picks.
class UcxTransport : public Transport, public Rails {
 public:
  UcxTransport(const TransportContext& context, const Options& options)
      : context_(context), config_(UcxConfig::from(options)) {
    if (context.topology) {
      rdma_here_ = std::any_of(context.topology->nics.begin(), context.topology->nics.end(),
                               [](const topology::Nic& n) { return n.usable() && !n.rdma_device.empty(); });
    }
    // UCX is loaded (~0.4 s) and started (a context, a worker thread per rail) only where it pays, or when
    // asked: UCX's tcp is slower than kvstore's. In a cluster with a secret, only where the operator says
    // the fabric is the cluster's own: the rest of the data path is authenticated per session, UCX's
    // one-sided transfers cannot be.
    const bool asked = rdma_here_ || config_.prefer || context.transport == "ucx";
    untrusted_ = asked && !context.cluster_secret.empty() && !config_.trust_fabric;
    wanted_ = asked && !untrusted_;
  }
  ~UcxTransport() override { stop(); }

  Status start() override {
    if (untrusted_) log_engine("WARNING", "ucx " + unavailable());
    if (!wanted_) return Status::OK();  // (unavailable() says why)
    api_ = &ucp();
    if (!api_->status.ok()) return Status::OK();  // unavailable: offers nothing, reaches nobody
    std::vector<std::unique_ptr<Rail>> started;
    for (auto& rail : plan_rails()) {
      auto worker = UcxWorker::start(*api_, config_.busy_poll_us, rail->net_devices);
      if (!worker.ok()) {
        // (a NIC UCX has no device for: the others still make rails)
        if (start_error_.empty()) start_error_ = worker.status().message();
        continue;
      }
      rail->worker = std::move(worker.value());
      started.push_back(std::move(rail));
    }
    if (started.empty()) return Status::OK();
    start_error_.clear();
    std::lock_guard<std::mutex> lock(mu_);
    rails_ = std::move(started);
    for (auto& rail : rails_) rail->worker->on_tick([this, r = rail.get()] { time_out(*r); });
    for (auto& [id, region] : regions_) map(region);
    return Status::OK();
  }
  void stop() override {
    std::vector<std::unique_ptr<Rail>> rails;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (rails_.empty()) return;
      for (auto& rail : rails_) {
        // Endpoints a channel still holds are closed here (their operations fail), then the regions.
        rail->worker->call([&] {
          for (auto& weak : rail->endpoints) {
            if (auto e = weak.lock()) close_endpoint(*api_, *e, Status(Code::kClosed, "engine closed"));
          }
          rail->endpoints.clear();
        });
      }
      for (auto& [id, region] : regions_) unmap(region);
      rails = std::move(rails_);
      rails_.clear();
    }
    rails.clear();  // (each worker's thread runs what channels posted last, then ends)
  }
  bool starts() const override { return wanted_; }
  std::string unavailable() const override {
    if (untrusted_) {
      return "not started: with a cluster secret every data connection is authenticated and every region "
             "key scoped to a session, which UCX's one-sided transfers cannot be; KVSTORE_UCX_TRUST_FABRIC=1 "
             "starts it where the RDMA fabric reaches this cluster's hosts alone";
    }
    if (!wanted_)
      return "not started: no RDMA NIC selected here (KVSTORE_TRANSPORT=ucx or ucx_prefer=1 start it)";
    if (api_ == nullptr) return "not started yet";
    if (!api_->status.ok()) return api_->status.message();
    return start_error_;
  }
  Capabilities capabilities(const Capabilities& declared) const override {
    std::lock_guard<std::mutex> lock(mu_);
    Capabilities c = declared;
    if (!cuda()) {
      c.local_kinds &= ~kind_bit(MemoryKind::kGpu);
      c.remote_kinds &= ~kind_bit(MemoryKind::kGpu);
    }
    return c;
  }
  int cost(int declared) const override { return rdma_here_ || config_.prefer ? declared : 150; }

  std::vector<char> descriptor_section() const override {
    std::lock_guard<std::mutex> lock(mu_);
    if (rails_.empty()) return {};
    std::vector<RailAddress> out;
    for (const auto& rail : rails_) {
      const auto& address = rail->worker->address();
      out.push_back(RailAddress{rail->nic, std::string(address.begin(), address.end())});
    }
    return encode_rails(out);
  }
  std::map<std::string, std::string> describe_section(const std::vector<char>& section) const override {
    auto rails = decode_rails(&section);
    if (!rails.ok()) return {{"error", rails.status().message()}};
    std::string nics;
    for (const auto& rail : rails.value())
      nics += (nics.empty() ? "" : ",") + (rail.nic.empty() ? "*" : rail.nic);
    return {{"rails", std::to_string(rails.value().size())}, {"nics", nics}};
  }

  void on_region_exported(const RegionInfo& info) override {
    if (!(kUcxKinds & kind_bit(info.location.kind))) return;
    std::lock_guard<std::mutex> lock(mu_);
    Region& region = regions_[info.id];
    region.info = info;
    if (!rails_.empty()) map(region);
  }
  void on_region_revoked(const RegionInfo& info) override {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = regions_.find(info.id);
    if (it == regions_.end()) return;
    if (!rails_.empty()) unmap(it->second);
    regions_.erase(it);
  }
  std::vector<char> region_section(uint64_t id) const override {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = regions_.find(id);
    if (it == regions_.end() || it->second.mapped.empty()) return {};
    std::vector<std::string> keys;
    bool any = false;
    for (const auto& m : it->second.mapped) {
      keys.push_back(m.rkey);
      any |= !m.rkey.empty();
    }
    return any ? encode_rkeys(keys) : std::vector<char>{};
  }

  uint64_t slice_size() const override { return config_.slice_size; }
  bool reachable(const EngineDescriptor& peer) const override {
    std::lock_guard<std::mutex> lock(mu_);
    return !rails_.empty() && decode_rails(peer.section("ucx")).ok();
  }
  StatusOr<std::shared_ptr<Channel>> connect(const EngineDescriptor& peer) override;

  Rail* rail(size_t index) const override {
    std::lock_guard<std::mutex> lock(mu_);
    return index < rails_.size() ? rails_[index].get() : nullptr;
  }

 private:
  struct Mapping {
    ucp_mem_h memh = nullptr;
    std::string rkey;  // packed; empty when mapping failed
  };
  struct Region {
    RegionInfo info;
    std::vector<Mapping> mapped;  // by rail
  };

  std::vector<std::unique_ptr<Rail>> plan_rails() const {
    std::vector<std::unique_ptr<Rail>> rails;
    std::vector<std::string> names;
    for (const auto& nic : context_.nics) {
      if (std::find(names.begin(), names.end(), nic.name) == names.end()) names.push_back(nic.name);
    }
    const char* chosen = std::getenv("UCX_NET_DEVICES");
    if (names.size() < 2 || chosen != nullptr) {
      auto all = std::make_unique<Rail>();
      all->nic = names.size() == 1 ? names.front() : "";
      all->net_devices = devices_of(context_.nics);
      // Paths are planned from the NICs UCX was told to use (UCX_NET_DEVICES names net devices and
      // RDMA ports), all of the engine's when it names none of them.
      const std::string listed = chosen != nullptr ? "," + std::string(chosen) + "," : "";
      for (const auto& nic : context_.nics) {
        const bool named =
            listed.find("," + nic.name + ",") != std::string::npos ||
            (!nic.rdma_device.empty() && listed.find("," + nic.rdma_device + ":") != std::string::npos);
        if (named) all->addresses.push_back(nic);
      }
      if (all->addresses.empty()) all->addresses = context_.nics;
      rails.push_back(std::move(all));
      return rails;
    }
    for (const auto& name : names) {
      auto rail = std::make_unique<Rail>();
      rail->nic = name;
      for (const auto& nic : context_.nics) {
        if (nic.name == name) rail->addresses.push_back(nic);
      }
      rail->net_devices = devices_of(rail->addresses);
      rails.push_back(std::move(rail));
    }
    return rails;
  }

  // The loaded UCX moves CUDA memory (every rail's context is of the same UCX). mu_ held.
  bool cuda() const { return !rails_.empty() && rails_.front()->worker->cuda(); }

  // mu_ held. UCP calls run on each rail's worker thread.
  void map(Region& region) {
    const RegionInfo info = region.info;
    const bool gpu = info.location.kind == MemoryKind::kGpu;
    region.mapped.assign(rails_.size(), Mapping{});
    if (gpu && !cuda()) return;  // (its requests are refused: this UCX cannot reach GPU memory)
    for (size_t r = 0; r < rails_.size(); ++r) {
      UcxWorker& worker = *rails_[r]->worker;
      region.mapped[r] = worker.call([&]() -> Mapping {
        ucp_mem_map_params_t params{
            kMemMapParamFieldAddress | kMemMapParamFieldLength | kMemMapParamFieldMemoryType,
            reinterpret_cast<void*>(info.base),
            info.length,
            0,
            0,
            gpu ? kMemoryTypeCuda : kMemoryTypeHost};
        Mapping m;
        if (api_->mem_map(worker.context(), &params, &m.memh) != kOk) return Mapping{};
        void* packed = nullptr;
        size_t size = 0;
        if (api_->rkey_pack(worker.context(), m.memh, &packed, &size) != kOk) {
          api_->mem_unmap(worker.context(), m.memh);
          return Mapping{};
        }
        m.rkey.assign(static_cast<char*>(packed), size);
        api_->rkey_buffer_release(packed);
        return m;
      });
    }
  }
  void unmap(Region& region) {
    for (size_t r = 0; r < region.mapped.size() && r < rails_.size(); ++r) {
      ucp_mem_h memh = region.mapped[r].memh;
      if (memh == nullptr) continue;
      UcxWorker& worker = *rails_[r]->worker;
      worker.call([&] { api_->mem_unmap(worker.context(), memh); });
    }
    region.mapped.clear();
  }
  // A rail's worker thread: every endpoint whose oldest operation waited past io_timeout is closed.
  void time_out(Rail& rail);

  TransportContext context_;
  UcxConfig config_;
  const Ucp* api_ = nullptr;  // loaded by start(), when wanted_
  bool rdma_here_ = false;
  bool wanted_ = false;
  bool untrusted_ = false;  // asked for, but a cluster secret is set and the fabric not declared trusted
  std::string start_error_;
  mutable std::mutex mu_;
  std::vector<std::unique_ptr<Rail>> rails_;
  std::unordered_map<uint64_t, Region> regions_;
};

void UcxTransport::time_out(Rail& rail) {
  const auto now = Clock::now();
  const auto limit = std::chrono::milliseconds(config_.io_timeout_ms);
  auto& endpoints = rail.endpoints;
  for (auto it = endpoints.begin(); it != endpoints.end();) {
    auto e = it->lock();
    if (!e || e->ep == nullptr) {
      it = endpoints.erase(it);
      continue;
    }
    if (!e->in_flight.empty() && now - e->in_flight.front() > limit) {
      close_endpoint(*api_, *e, Status(Code::kTimedOut, "peer stopped answering (ucx)"));
    }
    ++it;
  }
}

StatusOr<std::shared_ptr<Channel>> UcxTransport::connect(const EngineDescriptor& peer) {
  auto remote = decode_rails(peer.section("ucx"));
  if (!remote.ok()) return remote.status();
  std::vector<UcxPath> paths;
  struct Here {
    std::string nic;
    std::vector<NicAddress> addresses;
  };
  std::vector<Here> rails_here;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (rails_.empty()) return Status(Code::kNotSupported, "ucx is unavailable: " + unavailable());
    for (const auto& rail : rails_) rails_here.push_back(Here{rail->nic, rail->addresses});
  }
  // The peer's rails by address (its NICs' addresses, as its descriptor lists them; a rail of UCX's own
  // choice of devices stands for all of them), paired with ours by subnet.
  std::vector<std::string> remote_hosts;
  std::vector<size_t> remote_rail_of;  // by entry of remote_hosts
  for (size_t r = 0; r < remote.value().size(); ++r) {
    const std::string& nic_name = remote.value()[r].nic;
    for (const auto& nic : peer.nics) {
      if (nic_name.empty() || nic.name == nic_name) {
        remote_hosts.push_back(nic.address);
        remote_rail_of.push_back(r);
      }
    }
  }
  if (remote_hosts.empty()) {  // (no address listed: one path to its first rail)
    remote_hosts.push_back("");
    remote_rail_of.push_back(0);
  }
  const bool same_host = peer.host_id == context_.host_id;
  std::vector<NicAddress> local;
  for (const auto& rail : rails_here) local.insert(local.end(), rail.addresses.begin(), rail.addresses.end());
  std::vector<PlannedPath> planned =
      same_host ? std::vector<PlannedPath>{PlannedPath{}} : plan_paths(local, remote_hosts);
  for (const auto& p : planned) {
    UcxPath path;
    if (rails_here.size() > 1) {
      for (size_t r = 0; r < rails_here.size(); ++r) {
        if (rails_here[r].nic == p.local_nic) path.local_rail = r;
      }
    }
    path.remote_rail = remote_rail_of[p.remote];
    const bool seen = std::any_of(paths.begin(), paths.end(), [&](const UcxPath& q) {
      return q.local_rail == path.local_rail && q.remote_rail == path.remote_rail;
    });
    if (seen) continue;
    if (!same_host) {  // (on one host UCX copies memory to memory: no NIC)
      path.local_nic = rails_here[path.local_rail].nic;
      path.local_address = p.local_address;
      path.remote_nic = remote.value()[path.remote_rail].nic;
      path.remote_address = remote_hosts[p.remote];
    }
    path.speed_mbps = p.speed_mbps;
    paths.push_back(std::move(path));
  }
  auto channel = UcxChannel::open(this, peer, std::move(remote.value()), std::move(paths), same_host,
                                  context_.topology.get());
  if (!channel.ok()) return channel.status();
  return std::shared_ptr<Channel>(std::move(channel.value()));
}

}  // namespace
}  // namespace kvs::ucx

namespace kvs {

const TransportEntry& ucx_transport_entry() {
  static const TransportEntry entry{
      "ucx",
      Capabilities{90, kReachSameProcess | kReachSameHost | kReachRemote, ucx::kUcxKinds, ucx::kUcxKinds,
                   true},
      ucx::UcxConfig::specs(),
      [](const TransportContext& context, const Options& options) -> std::unique_ptr<Transport> {
        return std::make_unique<ucx::UcxTransport>(context, options);
      },
  };
  return entry;
}

}  // namespace kvs
