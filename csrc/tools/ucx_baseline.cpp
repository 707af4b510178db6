#include "tools/ucx_baseline.h"

#include <poll.h>
#include <sys/mman.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <vector>

#include "common/bytes.h"
#include "transport/ucx/ucp_api.h"

namespace kvs::bench {
namespace {

using namespace kvs::ucx;

struct Side {
  ucp_context_h context = nullptr;
  ucp_worker_h worker = nullptr;
};

void on_done(void* request, ucs_status_t status, void* user_data) {
  auto* left = static_cast<int*>(user_data);
  if (status != kOk) *left = -1000000;  // (seen as an error by the loop)
  *left -= 1;
  ucp().request_free(request);
}

Status make_side(const Ucp& api, Side& side) {
  ucp_config* config = nullptr;
  if (api.config_read(nullptr, nullptr, &config) != kOk)
    return Status(Code::kNotSupported, "ucp_config_read");
  ucp_params_t params{kParamFieldFeatures, kFeatureRma};
  const ucs_status_t s = api.init_version(kApiMajor, kMinMinor, &params, config, &side.context);
  api.config_release(config);
  if (s != kOk) return Status(Code::kNotSupported, "ucp_init: " + api.describe(s));
  ucp_worker_params_t wp{kWorkerParamFieldThreadMode, kThreadModeSingle};
  if (api.worker_create(side.context, &wp, &side.worker) != kOk) {
    return Status(Code::kNotSupported, "ucp_worker_create");
  }
  return Status::OK();
}

void drop_side(const Ucp& api, Side& side) {
  if (side.worker != nullptr) api.worker_destroy(side.worker);
  if (side.context != nullptr) api.cleanup(side.context);
}

char* populated(uint64_t n) {
  void* p = mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
  return p == MAP_FAILED ? nullptr : static_cast<char*>(p);
}

// A target: its working set mapped, the blob an initiator needs (string worker address, string packed
// key, u64 base).
struct Target {
  char* memory = nullptr;
  uint64_t size = 0;
  ucp_mem_h memh = nullptr;
  std::string blob;
};

StatusOr<Target> map_target(const Ucp& api, const Side& side, uint64_t working_set) {
  Target t;
  t.size = working_set;
  t.memory = populated(working_set);
  if (t.memory == nullptr) return Status(Code::kNoMemory, "working set");
  ucp_mem_map_params_t mp{kMemMapParamFieldAddress | kMemMapParamFieldLength | kMemMapParamFieldMemoryType,
                          t.memory,
                          working_set,
                          0,
                          0,
                          kMemoryTypeHost};
  void* packed = nullptr;
  size_t packed_size = 0;
  ucp_address* address = nullptr;
  size_t address_size = 0;
  if (api.mem_map(side.context, &mp, &t.memh) != kOk ||
      api.rkey_pack(side.context, t.memh, &packed, &packed_size) != kOk ||
      api.worker_get_address(side.worker, &address, &address_size) != kOk) {
    if (packed != nullptr) api.rkey_buffer_release(packed);
    if (t.memh != nullptr) api.mem_unmap(side.context, t.memh);
    munmap(t.memory, working_set);
    return Status(Code::kNotSupported, "ucp_mem_map / rkey_pack / worker address");
  }
  ByteWriter w;
  w.put_string(std::string(reinterpret_cast<const char*>(address), address_size));
  w.put_string(std::string(static_cast<const char*>(packed), packed_size));
  w.put<uint64_t>(reinterpret_cast<uint64_t>(t.memory));
  t.blob.assign(w.bytes().begin(), w.bytes().end());
  api.rkey_buffer_release(packed);
  api.worker_release_address(side.worker, address);
  return t;
}

void unmap_target(const Ucp& api, const Side& side, Target& t) {
  if (t.memh != nullptr) api.mem_unmap(side.context, t.memh);
  if (t.memory != nullptr) munmap(t.memory, t.size);
  t = Target{};
}

}  // namespace

Status ucx_rma_serve(uint64_t working_set, int out_fd, int in_fd) {
  const Ucp& api = ucp();
  if (!api.status.ok()) return api.status;
  Side side;
  Status st = make_side(api, side);
  StatusOr<Target> target = st.ok() ? map_target(api, side, working_set) : StatusOr<Target>(st);
  if (target.ok()) {
    const auto length = static_cast<uint32_t>(target.value().blob.size());
    std::string message(reinterpret_cast<const char*>(&length), sizeof(length));
    message += target.value().blob;
    if (write(out_fd, message.data(), message.size()) != static_cast<ssize_t>(message.size())) {
      st = errno_status(Code::kIoError, "writing the target's blob");
    }
    // Serve (UCX's software transports need the target's progress) until the initiator is done.
    for (uint64_t i = 0; st.ok(); ++i) {
      api.worker_progress(side.worker);
      if (i % 1024 != 0) continue;
      pollfd fd{in_fd, POLLIN, 0};
      if (poll(&fd, 1, 0) > 0) break;  // (end of file, or anything: done)
    }
    unmap_target(api, side, target.value());
  } else {
    st = target.status();
  }
  drop_side(api, side);
  return st;
}

StatusOr<Throughput> ucx_rma_baseline(bool write, uint64_t block_size, int batch, uint64_t working_set,
                                      double duration_s, const std::string& target_blob) {
  const Ucp& api = ucp();
  if (!api.status.ok()) return api.status;
  if (block_size == 0 || batch <= 0 || working_set < block_size * static_cast<uint64_t>(batch)) {
    return Status(Code::kInvalidArgument, "working set smaller than one batch");
  }
  const bool here = target_blob.empty();
  Side sides[2];  // the initiator's, and the target's when it is in this process
  Status st = make_side(api, sides[0]);
  if (st.ok() && here) st = make_side(api, sides[1]);
  Target target;
  if (st.ok() && here) {
    auto mapped = map_target(api, sides[1], working_set);
    if (mapped.ok()) {
      target = std::move(mapped.value());
    } else {
      st = mapped.status();
    }
  }
  std::string address, packed;
  uint64_t remote = 0;
  if (st.ok()) {
    const std::string& blob = here ? target.blob : target_blob;
    ByteReader r(blob.data(), blob.size());
    address = r.get_string(1u << 20);
    packed = r.get_string(1u << 20);
    remote = r.get<uint64_t>();
    if (!r.ok() || !r.at_end() || address.empty() || packed.empty()) {
      st = Status(Code::kInvalidArgument, "bad ucx target blob");
    }
  }
  char* local = st.ok() ? populated(working_set) : nullptr;
  if (st.ok() && local == nullptr) st = Status(Code::kNoMemory, "working set");
  Throughput out;
  ucp_rkey_h rkey = nullptr;
  ucp_ep_h ep = nullptr;
  auto progress = [&] {
    api.worker_progress(sides[0].worker);
    if (here) api.worker_progress(sides[1].worker);
  };
  do {
    if (!st.ok()) break;
    std::memset(local, 1, working_set);
    ucp_ep_params_t ep_params{kEpParamFieldRemoteAddress,
                              reinterpret_cast<const ucp_address*>(address.data()), 0, nullptr, nullptr};
    if (api.ep_create(sides[0].worker, &ep_params, &ep) != kOk ||
        api.ep_rkey_unpack(ep, packed.data(), &rkey) != kOk) {
      st = Status(Code::kNotSupported, "ucp_ep_create / rkey unpack");
      break;
    }
    const uint64_t blocks = working_set / block_size;
    uint64_t next = 0;
    const auto start = std::chrono::steady_clock::now();
    const auto stop = start + std::chrono::duration<double>(duration_s);
    while (std::chrono::steady_clock::now() < stop && st.ok()) {
      int left = batch + (write ? 1 : 0);
      auto settle = [&](ucs_status_ptr_t r) {
        if (r == nullptr) {
          left -= 1;
        } else if (is_error_ptr(r)) {
          st = Status(Code::kIoError, api.describe(ptr_status(r)));
          left -= 1;
        }
      };
      ucp_request_param_t param{kOpAttrFieldCallback | kOpAttrFieldUserData, 0, nullptr, on_done, 0, &left};
      for (int i = 0; i < batch; ++i) {
        const uint64_t offset = (next++ % blocks) * block_size;
        settle(write ? api.put_nbx(ep, local + offset, block_size, remote + offset, rkey, &param)
                     : api.get_nbx(ep, local + offset, block_size, remote + offset, rkey, &param));
      }
      if (write) settle(api.ep_flush_nbx(ep, &param));
      while (left > 0) progress();
      if (left < 0) st = Status(Code::kIoError, "a UCX operation failed");
      out.bytes += block_size * static_cast<uint64_t>(batch);
    }
    out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  } while (false);
  if (rkey != nullptr) api.rkey_destroy(rkey);
  if (ep != nullptr) {
    ucp_request_param_t close{kOpAttrFieldFlags, kEpCloseFlagForce, nullptr, nullptr, 0, nullptr};
    ucs_status_ptr_t r = api.ep_close_nbx(ep, &close);
    if (r != nullptr && !is_error_ptr(r)) {
      while (api.request_check_status(r) == kInProgress) progress();
      api.request_free(r);
    }
  }
  if (here) unmap_target(api, sides[1], target);
  for (auto& side : sides) drop_side(api, side);
  if (local != nullptr) munmap(local, working_set);
  if (!st.ok()) return st;
  return out;
}

}  // namespace kvs::bench
