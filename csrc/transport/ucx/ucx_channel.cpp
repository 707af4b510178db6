#include "transport/ucx/ucx_channel.h"

namespace kvs::ucx {

StatusOr<std::shared_ptr<UcxChannel>> UcxChannel::open(Rails* rails, EngineDescriptor peer,
                                                       std::vector<RailAddress> remote,
                                                       std::vector<UcxPath> paths, bool same_host,
                                                       const topology::Topology* topology) {
  if (paths.empty()) return Status(Code::kInvalidArgument, "no path to the peer");
  std::shared_ptr<UcxChannel> channel(
      new UcxChannel(rails, std::move(peer), std::move(remote), std::move(paths), same_host, topology));
  Status st = channel->open_paths();
  if (!st.ok()) return st;
  return channel;
}

std::vector<MultiPathChannel::PathSpec> UcxChannel::specs(const std::vector<UcxPath>& paths) {
  std::vector<PathSpec> out;
  for (const auto& p : paths) out.push_back(PathSpec{p.local_nic, p.speed_mbps});
  return out;
}

UcxChannel::UcxChannel(Rails* rails, EngineDescriptor peer, std::vector<RailAddress> remote,
                       std::vector<UcxPath> paths, bool same_host, const topology::Topology* topology)
    : MultiPathChannel(specs(paths), topology),
      rails_(rails),
      peer_(std::make_shared<const EngineDescriptor>(std::move(peer))),
      remote_(std::move(remote)),
      paths_(std::move(paths)),
      same_host_(same_host),
      endpoints_(paths_.size()) {
  for (size_t i = 0; i < paths_.size(); ++i) counters_.push_back(std::make_shared<PathCounters>());
}

UcxChannel::~UcxChannel() {
  stop();
  std::lock_guard<std::mutex> lock(mu_);
  for (size_t i = 0; i < endpoints_.size(); ++i) {
    Rail* rail = rails_->rail(paths_[i].local_rail);
    if (rail == nullptr || !endpoints_[i]) continue;
    UcxWorker* worker = rail->worker.get();
    // (what is in flight fails; lost_handler sends it to no channel now)
    worker->post([api = &worker->api(), e = endpoints_[i]] {
      close_endpoint(*api, *e, Status(Code::kClosed, "closed"));
    });
  }
}

std::shared_ptr<Endpoint> UcxChannel::endpoint(size_t path) const {
  std::lock_guard<std::mutex> lock(mu_);
  return endpoints_[path];
}

Status UcxChannel::open_path(size_t i) {
  auto old = endpoint(i);
  if (old && !old->dead.load()) return Status::OK();
  const UcxPath& path = paths_[i];
  Rail* rail = rails_->rail(path.local_rail);
  if (rail == nullptr) return Status(Code::kClosed, "ucx stopped");
  UcxWorker* worker = rail->worker.get();
  auto e = std::make_shared<Endpoint>();
  e->remote_rail = path.remote_rail;
  e->report = lost_handler(i);
  e->counters = counters_[i];
  const std::string& address = remote_[path.remote_rail].worker_address;
  Status st = worker->call([&]() -> Status {
    const Ucp& api = worker->api();
    if (old) close_endpoint(api, *old, Status(Code::kConnectionFailed, "reopened"));
    ucp_ep_params_t params{kEpParamFieldRemoteAddress |
                               (same_host_ ? 0 : kEpParamFieldErrHandlingMode | kEpParamFieldErrHandler),
                           reinterpret_cast<const ucp_address*>(address.data()), kErrHandlingModePeer,
                           on_endpoint_error, e.get()};
    const ucs_status_t s = api.ep_create(worker->worker(), &params, &e->ep);
    if (s != kOk) return Status(Code::kConnectionFailed, "ucp_ep_create: " + api.describe(s));
    rail->endpoints.push_back(e);
    return Status::OK();
  });
  if (!st.ok()) return st;
  std::lock_guard<std::mutex> lock(mu_);
  endpoints_[i] = std::move(e);
  return Status::OK();
}

bool UcxChannel::path_live(size_t i) const {
  auto e = endpoint(i);
  return e && !e->dead.load();
}

uint64_t UcxChannel::path_load(size_t i) const {
  auto e = endpoint(i);
  return e ? e->load.load() : 0;
}

void UcxChannel::send(size_t i, std::vector<Slice>&& slices) {
  auto e = endpoint(i);
  Rail* rail = rails_->rail(paths_[i].local_rail);
  UcxWorker* worker = rail != nullptr ? rail->worker.get() : nullptr;
  if (worker == nullptr || !e) {
    const Status why(worker == nullptr ? Code::kClosed : Code::kConnectionFailed, "no ucx endpoint");
    for (auto& s : slices) s.lost(why);
    return;
  }
  uint64_t bytes = 0;
  for (const auto& s : slices) bytes += s.length;
  e->load.fetch_add(bytes);
  auto taken = std::make_shared<std::vector<Slice>>(std::move(slices));
  const bool cuda = worker->cuda();
  worker->post([api = &worker->api(), e, peer = peer_, taken, cuda] {
    post_operations(*api, e, *peer, cuda, *taken);
  });
}

void UcxChannel::describe_path(size_t i, PathStats& s) const {
  const UcxPath& p = paths_[i];
  s.local_nic = p.local_nic;
  s.local_address = p.local_address;
  s.remote_nic = p.remote_nic;
  s.remote_address = p.remote_address;
  s.bytes = counters_[i]->bytes.load(std::memory_order_relaxed);
  s.slices = counters_[i]->slices.load(std::memory_order_relaxed);
  s.connections = path_live(i) ? 1 : 0;
}

}  // namespace kvs::ucx
