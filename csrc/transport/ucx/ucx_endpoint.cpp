#include "transport/ucx/ucx_endpoint.h"

#include <iterator>

#include "transport/ucx/ucx_sections.h"

namespace kvs::ucx {
namespace {

// Operations in flight, completed by UCX's callbacks on the worker thread.
struct Operation {
  std::shared_ptr<Endpoint> endpoint;
  std::list<Clock::time_point>::iterator started;
  std::vector<Slice> slices;  // a get: one; puts of a batch: all, ended by their flush (begin_copy held)
  uint64_t bytes = 0;
  int waiting = 0;  // callbacks still due
  Status status;
};

// Hands slices the endpoint lost (not the request's fault) to its channel, or to the engine.
void lose(Endpoint& e, std::vector<Slice>&& slices, const Status& status) {
  if (slices.empty()) return;
  if (e.report) {
    e.report(std::move(slices), status);
    return;
  }
  for (auto& s : slices) s.lost(status);
}

void finish_operation(Operation* op) {
  Endpoint& e = *op->endpoint;
  e.in_flight.erase(op->started);
  e.load.fetch_sub(op->bytes);
  for (auto& s : op->slices) s.batch->end_copy();
  const Code code = op->status.code();
  if (code == Code::kConnectionFailed || code == Code::kTimedOut) {
    lose(e, std::move(op->slices), op->status);  // (its RMA ended here: another path may take them)
  } else {
    if (op->status.ok()) {
      e.counters->bytes.fetch_add(op->bytes, std::memory_order_relaxed);
      e.counters->slices.fetch_add(op->slices.size(), std::memory_order_relaxed);
    }
    for (auto& s : op->slices) s.done(op->status);
  }
  delete op;
}

void on_completed(void* request, ucs_status_t status, void* user_data) {
  auto* op = static_cast<Operation*>(user_data);
  if (status != kOk && op->status.ok()) {
    const Endpoint& e = *op->endpoint;
    op->status = Status(status == kErrCanceled ? Code::kTimedOut : Code::kConnectionFailed,
                        e.error.ok() ? "ucx operation failed" : e.error.message());
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

Operation* start(const std::shared_ptr<Endpoint>& endpoint) {
  auto* op = new Operation;
  op->endpoint = endpoint;
  endpoint->in_flight.push_back(Clock::now());
  op->started = std::prev(endpoint->in_flight.end());
  return op;
}

ucp_rkey_h rkey(const Ucp& api, Endpoint& e, const EngineDescriptor& peer, uint64_t region) {
  auto it = e.rkeys.find(region);
  if (it != e.rkeys.end()) return it->second;
  auto packed = decode_rkey(peer.region_section(region, "ucx"), e.remote_rail);
  if (!packed.ok()) return nullptr;
  ucp_rkey_h unpacked = nullptr;
  if (api.ep_rkey_unpack(e.ep, packed.value().data(), &unpacked) != kOk) return nullptr;
  e.rkeys[region] = unpacked;
  return unpacked;
}

}  // namespace

void close_endpoint(const Ucp& api, Endpoint& e, const Status& why) {
  if (e.ep == nullptr) return;
  for (auto& [id, key] : e.rkeys) api.rkey_destroy(key);
  e.rkeys.clear();
  if (e.error.ok()) e.error = why;
  e.dead.store(true);
  ucp_request_param_t param{kOpAttrFieldFlags, kEpCloseFlagForce, nullptr, nullptr, 0, nullptr};
  ucs_status_ptr_t request = api.ep_close_nbx(e.ep, &param);
  e.ep = nullptr;
  if (request != nullptr && !is_error_ptr(request)) api.request_free(request);  // (completes on its own)
}

void on_endpoint_error(void* arg, ucp_ep_h, ucs_status_t status) {
  auto* e = static_cast<Endpoint*>(arg);
  if (e->error.ok())
    e->error = Status(Code::kConnectionFailed, "peer unreachable: " + ucp().describe(status));
  e->dead.store(true);
}

void post_operations(const Ucp& api, const std::shared_ptr<Endpoint>& endpoint, const EngineDescriptor& peer,
                     bool cuda, std::vector<Slice>& slices) {
  Endpoint& e = *endpoint;
  Operation* puts = nullptr;
  std::vector<Slice> lost;
  for (auto& s : slices) {
    Status refused;
    const RegionInfo* region = peer.find_region(s.region_id);
    ucp_rkey_h key = region && e.ep != nullptr ? rkey(api, e, peer, s.region_id) : nullptr;
    if (e.ep == nullptr) {
      refused = Status(Code::kConnectionFailed, e.error.ok() ? "ucx endpoint closed" : e.error.message());
    } else if (s.fence_gen != 0) {
      refused = Status(Code::kNotSupported, "ucx cannot check allocation fences");
    } else if (s.local_location.kind == MemoryKind::kGpu && !cuda) {
      refused = Status(Code::kNotSupported, "this UCX has no CUDA support");
    } else if (key == nullptr) {
      refused = Status(Code::kNotSupported, "the peer's region is not mapped for ucx");
    } else if (!s.batch->begin_copy(s.request)) {
      refused = Status(Code::kTimedOut, "request already over");
    }
    if (!refused.ok()) {
      e.load.fetch_sub(s.length);
      if (refused.code() == Code::kConnectionFailed) {
        lost.push_back(std::move(s));
      } else {
        s.done(refused);
      }
      continue;
    }
    const uint64_t remote = region->base + s.offset;
    if (s.op == TransferOp::kRead) {
      Operation* op = start(endpoint);
      op->bytes = s.length;
      op->slices.push_back(std::move(s));
      op->waiting = 1;
      Slice& slice = op->slices.back();
      ucp_request_param_t param{kOpAttrFieldCallback | kOpAttrFieldUserData, 0, nullptr, on_completed, 0, op};
      settle(api, op, api.get_nbx(e.ep, slice.local, slice.length, remote, key, &param));
    } else {
      if (puts == nullptr) {
        puts = start(endpoint);
        puts->waiting = 1;  // the flush, posted after the last put
      }
      puts->bytes += s.length;
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
    } else {
      ucp_request_param_t param{
          kOpAttrFieldCallback | kOpAttrFieldUserData, 0, nullptr, on_completed, 0, puts};
      settle(api, puts, api.ep_flush_nbx(e.ep, &param));
    }
  }
  lose(e, std::move(lost),
       Status(Code::kConnectionFailed, e.error.ok() ? "ucx endpoint closed" : e.error.message()));
}

}  // namespace kvs::ucx
