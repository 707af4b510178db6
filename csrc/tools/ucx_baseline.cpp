#include "tools/ucx_baseline.h"

#include <sys/mman.h>

#include <chrono>
#include <cstring>
#include <vector>

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

}  // namespace

StatusOr<Throughput> ucx_rma_baseline(bool write, uint64_t block_size, int batch, uint64_t working_set,
                                      double duration_s) {
  const Ucp& api = ucp();
  if (!api.status.ok()) return api.status;
  if (block_size == 0 || batch <= 0 || working_set < block_size * static_cast<uint64_t>(batch)) {
    return Status(Code::kInvalidArgument, "working set smaller than one batch");
  }
  Side sides[2];
  Status st;
  for (auto& side : sides) {
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
  }
  auto region = [&](uint64_t n) {
    void* p = mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
    return p == MAP_FAILED ? nullptr : static_cast<char*>(p);
  };
  char* local = region(working_set);
  char* remote = region(working_set);
  Throughput out;
  ucp_mem_h memh = nullptr;
  void* packed = nullptr;
  size_t packed_size = 0;
  ucp_rkey_h rkey = nullptr;
  ucp_ep_h ep = nullptr;
  ucp_address* address = nullptr;
  size_t address_size = 0;
  do {
    if (local == nullptr || remote == nullptr) {
      st = Status(Code::kNoMemory, "working set");
      break;
    }
    std::memset(local, 1, working_set);
    ucp_mem_map_params_t mp{kMemMapParamFieldAddress | kMemMapParamFieldLength | kMemMapParamFieldMemoryType,
                            remote,
                            working_set,
                            0,
                            0,
                            kMemoryTypeHost};
    if (api.mem_map(sides[1].context, &mp, &memh) != kOk ||
        api.rkey_pack(sides[1].context, memh, &packed, &packed_size) != kOk ||
        api.worker_get_address(sides[1].worker, &address, &address_size) != kOk) {
      st = Status(Code::kNotSupported, "ucp_mem_map / rkey_pack / worker address");
      break;
    }
    ucp_ep_params_t ep_params{kEpParamFieldRemoteAddress, address, 0, nullptr, nullptr};
    if (api.ep_create(sides[0].worker, &ep_params, &ep) != kOk ||
        api.ep_rkey_unpack(ep, packed, &rkey) != kOk) {
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
        const uint64_t to = reinterpret_cast<uint64_t>(remote) + offset;
        settle(write ? api.put_nbx(ep, local + offset, block_size, to, rkey, &param)
                     : api.get_nbx(ep, local + offset, block_size, to, rkey, &param));
      }
      if (write) settle(api.ep_flush_nbx(ep, &param));
      while (left > 0) {
        api.worker_progress(sides[0].worker);
        api.worker_progress(sides[1].worker);
      }
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
      while (api.request_check_status(r) == kInProgress) {
        api.worker_progress(sides[0].worker);
        api.worker_progress(sides[1].worker);
      }
      api.request_free(r);
    }
  }
  if (packed != nullptr) api.rkey_buffer_release(packed);
  if (address != nullptr) api.worker_release_address(sides[1].worker, address);
  if (memh != nullptr) api.mem_unmap(sides[1].context, memh);
  for (auto& side : sides) {
    if (side.worker != nullptr) api.worker_destroy(side.worker);
    if (side.context != nullptr) api.cleanup(side.context);
  }
  if (local != nullptr) munmap(local, working_set);
  if (remote != nullptr) munmap(remote, working_set);
  if (!st.ok()) return st;
  return out;
}

}  // namespace kvs::bench
