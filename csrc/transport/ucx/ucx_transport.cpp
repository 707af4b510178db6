#include "transport/ucx/ucx_transport.h"

#include <algorithm>
#include <list>
#include <mutex>
#include <unordered_map>

#include "common/bytes.h"
#include "transport/ucx/ucx_worker.h"

namespace kvs::ucx {
namespace {

constexpr uint8_t kSectionVersion = 1;  // u8 version, string worker address
constexpr uint8_t kRegionVersion = 1;   // u8 version, string packed rkey
// Host memory everywhere; GPU memory where the loaded UCX has CUDA support (capabilities() narrows it).
constexpr KindMask kUcxKinds = kAllHostKinds | kind_bit(MemoryKind::kGpu);

struct UcxConfig {
  uint64_t slice_size = 4ull << 20;
  int io_timeout_ms = 5000;
  int busy_poll_us = 50;
  bool prefer = false;

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
    };
  }
  static UcxConfig from(const Options& o) {
    UcxConfig c;
    c.slice_size = static_cast<uint64_t>(o.get("slice_size"));
    c.io_timeout_ms = static_cast<int>(o.get("io_timeout"));
    c.busy_poll_us = static_cast<int>(o.get("busy_poll_us"));
    c.prefer = o.get("prefer") != 0;
    return c;
  }
};

StatusOr<std::string> decode_versioned(const std::vector<char>* bytes, uint8_t version, const char* what) {
  if (bytes == nullptr) return Status(Code::kNotSupported, std::string("peer offers no ucx ") + what);
  ByteReader r(bytes->data(), bytes->size());
  if (r.get<uint8_t>() != version)
    return Status(Code::kProtocolError, std::string("another version of ucx ") + what);
  std::string body = r.get_string(1u << 16);
  if (!r.ok() || !r.at_end() || body.empty())
    return Status(Code::kProtocolError, std::string("bad ucx ") + what);
  return body;
}

std::vector<char> encode_versioned(uint8_t version, const char* data, size_t size) {
  ByteWriter w;
  w.put<uint8_t>(version);
  w.put_string(std::string(data, size));
  return std::move(w.bytes());
}

// One endpoint to a peer's worker and the remote keys unpacked on it. Lives on the worker thread; the
// channel reads only `dead`.
struct Endpoint {
  ucp_ep_h ep = nullptr;
  std::atomic<bool> dead{false};
  Status error;
  std::unordered_map<uint64_t, ucp_rkey_h> rkeys;
  std::list<Clock::time_point> in_flight;  // when each operation in flight started, oldest first
};

// Operations in flight, completed by UCX's callbacks on the worker thread.
struct Operation {
  std::shared_ptr<Endpoint> endpoint;
  std::list<Clock::time_point>::iterator started;
  std::vector<Slice> slices;  // a get: one; puts of a batch: all, ended by their flush (begin_copy held)
  int waiting = 0;            // callbacks still due
  Status status;
};

void close_endpoint(const Ucp& api, Endpoint& e, const Status& why) {
  if (e.ep == nullptr) return;
  for (auto& [id, rkey] : e.rkeys) api.rkey_destroy(rkey);
  e.rkeys.clear();
  if (e.error.ok()) e.error = why;
  e.dead.store(true);
  ucp_request_param_t param{kOpAttrFieldFlags, kEpCloseFlagForce, nullptr, nullptr, 0, nullptr};
  ucs_status_ptr_t request = api.ep_close_nbx(e.ep, &param);
  e.ep = nullptr;
  if (request != nullptr && !is_error_ptr(request)) api.request_free(request);  // (completes on its own)
}

class UcxChannel;

class UcxTransport : public Transport {
 public:
  UcxTransport(const TransportContext& context, const Options& options)
      : context_(context), config_(UcxConfig::from(options)) {
    if (context.topology) {
      rdma_here_ = std::any_of(context.topology->nics.begin(), context.topology->nics.end(),
                               [](const topology::Nic& n) { return n.usable() && !n.rdma_device.empty(); });
    }
    // UCX is loaded (~0.4 s) and started (a context, a worker thread) only where it pays, or when asked:
    // UCX's tcp is slower than kvstore's.
    wanted_ = rdma_here_ || config_.prefer || context.transport == "ucx";
  }
  ~UcxTransport() override { stop(); }

  Status start() override {
    if (!wanted_) return Status::OK();  // (unavailable() says why)
    api_ = &ucp();
    if (!api_->status.ok()) return Status::OK();  // unavailable: offers nothing, reaches nobody
    auto worker = UcxWorker::start(*api_, config_.busy_poll_us, net_devices());
    if (!worker.ok()) {
      start_error_ = worker.status().message();
      return Status::OK();
    }
    std::lock_guard<std::mutex> lock(mu_);
    worker_ = std::move(worker.value());
    worker_->on_tick([this] { time_out(); });
    for (auto& [id, region] : regions_) map(region);
    return Status::OK();
  }
  void stop() override {
    std::unique_ptr<UcxWorker> worker;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!worker_) return;
      // Endpoints a channel still holds are closed here (their operations fail), then the regions.
      worker_->call([this] {
        for (auto& weak : endpoints_) {
          if (auto e = weak.lock()) close_endpoint(*api_, *e, Status(Code::kClosed, "engine closed"));
        }
        endpoints_.clear();
      });
      for (auto& [id, region] : regions_) unmap(region);
      worker = std::move(worker_);
    }
    worker.reset();  // (its thread runs what channels posted last, then ends)
  }
  bool starts() const override { return wanted_; }
  std::string unavailable() const override {
    if (!wanted_)
      return "not started: no RDMA NIC selected here (KVSTORE_TRANSPORT=ucx or ucx_prefer=1 start it)";
    if (api_ == nullptr) return "not started yet";
    if (!api_->status.ok()) return api_->status.message();
    return start_error_;
  }
  Capabilities capabilities(const Capabilities& declared) const override {
    std::lock_guard<std::mutex> lock(mu_);
    Capabilities c = declared;
    if (!worker_ || !worker_->cuda()) {
      c.local_kinds &= ~kind_bit(MemoryKind::kGpu);
      c.remote_kinds &= ~kind_bit(MemoryKind::kGpu);
    }
    return c;
  }
  int cost(int declared) const override { return rdma_here_ || config_.prefer ? declared : 150; }

  std::vector<char> descriptor_section() const override {
    std::lock_guard<std::mutex> lock(mu_);
    if (!worker_) return {};
    return encode_versioned(kSectionVersion, worker_->address().data(), worker_->address().size());
  }
  std::map<std::string, std::string> describe_section(const std::vector<char>& section) const override {
    auto address = decode_versioned(&section, kSectionVersion, "section");
    if (!address.ok()) return {{"error", address.status().message()}};
    return {{"worker_address_bytes", std::to_string(address.value().size())}};
  }

  void on_region_exported(const RegionInfo& info) override {
    if (!(kUcxKinds & kind_bit(info.location.kind))) return;
    std::lock_guard<std::mutex> lock(mu_);
    Region& region = regions_[info.id];
    region.info = info;
    if (worker_) map(region);
  }
  void on_region_revoked(const RegionInfo& info) override {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = regions_.find(info.id);
    if (it == regions_.end()) return;
    if (worker_) unmap(it->second);
    regions_.erase(it);
  }
  std::vector<char> region_section(uint64_t id) const override {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = regions_.find(id);
    if (it == regions_.end() || it->second.rkey.empty()) return {};
    return encode_versioned(kRegionVersion, it->second.rkey.data(), it->second.rkey.size());
  }

  uint64_t slice_size() const override { return config_.slice_size; }
  bool reachable(const EngineDescriptor& peer) const override {
    std::lock_guard<std::mutex> lock(mu_);
    return worker_ && decode_versioned(peer.section("ucx"), kSectionVersion, "section").ok();
  }
  StatusOr<std::shared_ptr<Channel>> connect(const EngineDescriptor& peer) override;

  UcxWorker* worker() { return worker_.get(); }

 private:
  struct Region {
    RegionInfo info;
    ucp_mem_h memh = nullptr;
    std::vector<char> rkey;  // packed; empty when mapping failed
  };

  // mu_ held. UCP calls run on the worker thread.
  void map(Region& region) {
    const RegionInfo info = region.info;
    const bool gpu = info.location.kind == MemoryKind::kGpu;
    if (gpu && !worker_->cuda()) return;  // (its requests are refused: this UCX cannot reach GPU memory)
    auto mapped = worker_->call([&]() -> std::pair<ucp_mem_h, std::vector<char>> {
      ucp_mem_map_params_t params{
          kMemMapParamFieldAddress | kMemMapParamFieldLength | kMemMapParamFieldMemoryType,
          reinterpret_cast<void*>(info.base),
          info.length,
          0,
          0,
          gpu ? kMemoryTypeCuda : kMemoryTypeHost};
      ucp_mem_h memh = nullptr;
      if (api_->mem_map(worker_->context(), &params, &memh) != kOk) return {nullptr, {}};
      void* packed = nullptr;
      size_t size = 0;
      if (api_->rkey_pack(worker_->context(), memh, &packed, &size) != kOk) {
        api_->mem_unmap(worker_->context(), memh);
        return {nullptr, {}};
      }
      std::vector<char> rkey(static_cast<char*>(packed), static_cast<char*>(packed) + size);
      api_->rkey_buffer_release(packed);
      return {memh, std::move(rkey)};
    });
    region.memh = mapped.first;
    region.rkey = std::move(mapped.second);
  }
  void unmap(Region& region) {
    if (region.memh == nullptr) return;
    ucp_mem_h memh = region.memh;
    worker_->call([&] { api_->mem_unmap(worker_->context(), memh); });
    region.memh = nullptr;
    region.rkey.clear();
  }
  // Worker thread: every endpoint whose oldest operation waited past io_timeout is closed.
  void time_out();
  // The engine's NICs (KVSTORE_NICS) as UCX devices: each RDMA device's port 1 and each net device (UCX's
  // tcp would otherwise leave from any interface, with an address the peer may not route back to).
  std::string net_devices() const {
    std::vector<std::string> names;
    auto add = [&](const std::string& name) {
      if (!name.empty() && std::find(names.begin(), names.end(), name) == names.end()) names.push_back(name);
    };
    for (const auto& nic : context_.nics) {
      if (!nic.rdma_device.empty()) add(nic.rdma_device + ":1");
      add(nic.name);
    }
    std::string out;
    for (const auto& n : names) out += (out.empty() ? "" : ",") + n;
    return out;
  }

  TransportContext context_;
  UcxConfig config_;
  const Ucp* api_ = nullptr;  // loaded by start(), when wanted_
  bool rdma_here_ = false;
  bool wanted_ = false;
  std::string start_error_;
  mutable std::mutex mu_;
  std::unique_ptr<UcxWorker> worker_;
  std::unordered_map<uint64_t, Region> regions_;
  std::vector<std::weak_ptr<Endpoint>> endpoints_;  // (worker thread only) for time_out
};

void UcxTransport::time_out() {
  const auto now = Clock::now();
  const auto limit = std::chrono::milliseconds(config_.io_timeout_ms);
  for (auto it = endpoints_.begin(); it != endpoints_.end();) {
    auto e = it->lock();
    if (!e) {
      it = endpoints_.erase(it);
      continue;
    }
    if (!e->in_flight.empty() && now - e->in_flight.front() > limit) {
      close_endpoint(*api_, *e, Status(Code::kTimedOut, "peer stopped answering (ucx)"));
    }
    ++it;
  }
}

void finish_operation(Operation* op) {
  if (op->endpoint) op->endpoint->in_flight.erase(op->started);
  for (size_t i = 0; i < op->slices.size(); ++i) {
    op->slices[i].batch->end_copy();
    // (a failed endpoint: another transport's link may take the slice; once its RMA ended here)
    const Code code = op->status.code();
    if (code == Code::kConnectionFailed || code == Code::kTimedOut) {
      op->slices[i].lost(op->status);
    } else {
      op->slices[i].done(op->status);
    }
  }
  delete op;
}

void on_completed(void* request, ucs_status_t status, void* user_data) {
  auto* op = static_cast<Operation*>(user_data);
  if (status != kOk && op->status.ok()) {
    op->status = Status(
        status == kErrCanceled ? Code::kTimedOut : Code::kConnectionFailed,
        op->endpoint && !op->endpoint->error.ok() ? op->endpoint->error.message() : "ucx operation failed");
  }
  if (request != nullptr) ucp().request_free(request);
  if (--op->waiting == 0) finish_operation(op);
}

// One of the callbacks an operation waits for will not come: it completed at once, or failed (`why`).
void settle_now(Operation* op, const Status& why) {
  if (!why.ok() && op->status.ok()) op->status = why;
  if (--op->waiting == 0) finish_operation(op);
}

// A returned request (its callback comes later), an immediate completion, or an immediate error.
void settle(const Ucp& api, Operation* op, ucs_status_ptr_t result) {
  if (result == nullptr) {
    settle_now(op, Status::OK());
  } else if (is_error_ptr(result)) {
    settle_now(op, Status(Code::kConnectionFailed, api.describe(ptr_status(result))));
  }
}

class UcxChannel : public Channel, public std::enable_shared_from_this<UcxChannel> {
 public:
  UcxChannel(UcxTransport* transport, std::shared_ptr<Endpoint> endpoint, EngineDescriptor peer)
      : transport_(transport), endpoint_(std::move(endpoint)), peer_(std::move(peer)) {}
  ~UcxChannel() override {
    UcxWorker* worker = transport_->worker();
    if (worker == nullptr) return;
    worker->post(
        [api = &worker->api(), e = endpoint_] { close_endpoint(*api, *e, Status(Code::kClosed, "closed")); });
  }
  bool healthy() const override { return !endpoint_->dead.load(); }

  void submit(std::vector<Slice>&& slices) override {
    UcxWorker* worker = transport_->worker();
    if (worker == nullptr) {
      for (auto& s : slices) s.done(Status(Code::kClosed, "engine closed"));
      return;
    }
    auto taken = std::make_shared<std::vector<Slice>>(std::move(slices));
    worker->post([self = shared_from_this(), taken] { self->post_operations(*taken); });
  }

 private:
  // Worker thread.
  ucp_rkey_h rkey(uint64_t region) {  // (the endpoint is open)
    Endpoint& e = *endpoint_;
    auto it = e.rkeys.find(region);
    if (it != e.rkeys.end()) return it->second;
    auto packed = decode_versioned(peer_.region_section(region, "ucx"), kRegionVersion, "remote key");
    if (!packed.ok()) return nullptr;
    ucp_rkey_h unpacked = nullptr;
    if (transport_->worker()->api().ep_rkey_unpack(e.ep, packed.value().data(), &unpacked) != kOk)
      return nullptr;
    e.rkeys[region] = unpacked;
    return unpacked;
  }

  void post_operations(std::vector<Slice>& slices) {
    const Ucp& api = transport_->worker()->api();
    Endpoint& e = *endpoint_;
    Operation* puts = nullptr;
    for (auto& s : slices) {
      Status refused;
      const RegionInfo* region = peer_.find_region(s.region_id);
      ucp_rkey_h key = region && e.ep != nullptr ? rkey(s.region_id) : nullptr;  // (none on a closed one)
      if (e.ep == nullptr) {
        refused = Status(Code::kConnectionFailed, e.error.ok() ? "ucx endpoint closed" : e.error.message());
      } else if (s.fence_gen != 0) {
        refused = Status(Code::kNotSupported, "ucx cannot check allocation fences");
      } else if (s.local_location.kind == MemoryKind::kGpu && !transport_->worker()->cuda()) {
        refused = Status(Code::kNotSupported, "this UCX has no CUDA support");
      } else if (key == nullptr) {
        refused = Status(Code::kNotSupported, "the peer's region is not mapped for ucx");
      } else if (!s.batch->begin_copy(s.request)) {
        refused = Status(Code::kTimedOut, "request already over");
      }
      if (!refused.ok()) {
        if (refused.code() == Code::kConnectionFailed) {
          s.lost(refused);
        } else {
          s.done(refused);
        }
        continue;
      }
      const uint64_t remote = region->base + s.offset;
      if (s.op == TransferOp::kRead) {
        auto* op = start(e);
        op->slices.push_back(std::move(s));
        op->waiting = 1;
        Slice& slice = op->slices.back();
        ucp_request_param_t param{
            kOpAttrFieldCallback | kOpAttrFieldUserData, 0, nullptr, on_completed, 0, op};
        settle(api, op, api.get_nbx(e.ep, slice.local, slice.length, remote, key, &param));
      } else {
        if (puts == nullptr) {
          puts = start(e);
          puts->waiting = 1;  // the flush, posted after the last put
        }
        puts->slices.push_back(std::move(s));
        puts->waiting += 1;
        Slice& slice = puts->slices.back();
        ucp_request_param_t param{
            kOpAttrFieldCallback | kOpAttrFieldUserData, 0, nullptr, on_completed, 0, puts};
        settle(api, puts, api.put_nbx(e.ep, slice.local, slice.length, remote, key, &param));
      }
    }
    if (puts != nullptr) {
      // A put completes locally; the flush says it reached the peer's memory.
      if (e.ep == nullptr) {
        settle_now(puts, Status(Code::kConnectionFailed, "ucx endpoint closed"));
        return;
      }
      ucp_request_param_t param{
          kOpAttrFieldCallback | kOpAttrFieldUserData, 0, nullptr, on_completed, 0, puts};
      settle(api, puts, api.ep_flush_nbx(e.ep, &param));
    }
  }

  Operation* start(Endpoint& e) {
    auto* op = new Operation;
    op->endpoint = endpoint_;
    e.in_flight.push_back(Clock::now());
    op->started = std::prev(e.in_flight.end());
    return op;
  }

  UcxTransport* transport_;
  std::shared_ptr<Endpoint> endpoint_;
  const EngineDescriptor peer_;
};

void on_endpoint_error(void* arg, ucp_ep_h, ucs_status_t status) {
  auto* e = static_cast<Endpoint*>(arg);
  if (e->error.ok())
    e->error = Status(Code::kConnectionFailed, "peer unreachable: " + ucp().describe(status));
  e->dead.store(true);
}

StatusOr<std::shared_ptr<Channel>> UcxTransport::connect(const EngineDescriptor& peer) {
  auto address = decode_versioned(peer.section("ucx"), kSectionVersion, "section");
  if (!address.ok()) return address.status();
  UcxWorker* worker = worker_.get();
  if (worker == nullptr) return Status(Code::kNotSupported, "ucx is unavailable: " + unavailable());
  auto endpoint = std::make_shared<Endpoint>();
  // A peer on another host: UCX reports its failure (rc, dc, tcp can). On this host UCX's shared-memory
  // transports cannot, and asking for it would leave only tcp's software emulation of RMA: a dead
  // same-host peer is found by the I/O timeout instead.
  const bool same_host = peer.host_id == context_.host_id;
  Status st = worker->call([&]() -> Status {
    ucp_ep_params_t params{
        kEpParamFieldRemoteAddress | (same_host ? 0 : kEpParamFieldErrHandlingMode | kEpParamFieldErrHandler),
        reinterpret_cast<const ucp_address*>(address.value().data()), kErrHandlingModePeer, on_endpoint_error,
        endpoint.get()};
    const ucs_status_t s = api_->ep_create(worker->worker(), &params, &endpoint->ep);
    if (s != kOk) return Status(Code::kConnectionFailed, "ucp_ep_create: " + api_->describe(s));
    endpoints_.push_back(endpoint);
    return Status::OK();
  });
  if (!st.ok()) return st;
  return std::shared_ptr<Channel>(std::make_shared<UcxChannel>(this, std::move(endpoint), peer));
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
