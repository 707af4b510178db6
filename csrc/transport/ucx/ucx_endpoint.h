// One UCX endpoint (a path: a rail's worker here -> a rail's worker of the peer) and the RMA operations
// posted on it. Everything but the atomics is touched on the rail's worker thread only.
#pragma once

#include <atomic>
#include <cstdint>
#include <list>
#include <memory>
#include <unordered_map>
#include <vector>

#include "core/batch.h"
#include "core/descriptor.h"
#include "core/slice.h"
#include "transport/ucx/ucp_api.h"

namespace kvs::ucx {

// What a path's endpoints moved (a path may open several over time).
struct PathCounters {
  std::atomic<uint64_t> bytes{0};
  std::atomic<uint64_t> slices{0};
};

struct Endpoint {
  ucp_ep_h ep = nullptr;
  size_t remote_rail = 0;  // which of the peer's packed keys it unpacks
  LostSlices report;       // takes what a failure of this endpoint lost (its channel's failover)
  std::atomic<bool> dead{false};
  std::atomic<uint64_t> load{0};  // bytes posted, not yet finished
  std::shared_ptr<PathCounters> counters = std::make_shared<PathCounters>();
  Status error;
  std::unordered_map<uint64_t, ucp_rkey_h> rkeys;
  std::list<Clock::time_point> in_flight;  // when each operation in flight started, oldest first
};

// Closes the endpoint (force: what is in flight fails) and destroys its unpacked keys.
void close_endpoint(const Ucp& api, Endpoint& e, const Status& why);
// UCX's error callback for endpoints to other hosts (arg: the Endpoint).
void on_endpoint_error(void* arg, ucp_ep_h ep, ucs_status_t status);

// Posts the slices' gets and puts (with one flush after the puts) on the endpoint. A slice the endpoint
// cannot take because it is closed goes to `report`; one it never could (a fence, a kind this UCX cannot
// move, no key for the region) fails.
void post_operations(const Ucp& api, const std::shared_ptr<Endpoint>& endpoint, const EngineDescriptor& peer,
                     bool cuda, std::vector<Slice>& slices);

}  // namespace kvs::ucx
