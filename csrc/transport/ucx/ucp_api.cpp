#include "transport/ucx/ucp_api.h"

#include <dlfcn.h>

namespace kvs::ucx {
namespace {

template <typename F>
bool find(void* handle, const char* name, F& out) {
  out = reinterpret_cast<F>(dlsym(handle, name));
  return out != nullptr;
}

bool resolve(void* h, Ucp& u) {
  return find(h, "ucp_config_read", u.config_read) && find(h, "ucp_config_release", u.config_release) &&
         find(h, "ucp_config_modify", u.config_modify) && find(h, "ucp_init_version", u.init_version) &&
         find(h, "ucp_context_query", u.context_query) && find(h, "ucp_cleanup", u.cleanup) &&
         find(h, "ucp_worker_create", u.worker_create) && find(h, "ucp_worker_destroy", u.worker_destroy) &&
         find(h, "ucp_worker_get_address", u.worker_get_address) &&
         find(h, "ucp_worker_release_address", u.worker_release_address) &&
         find(h, "ucp_worker_progress", u.worker_progress) &&
         find(h, "ucp_worker_get_efd", u.worker_get_efd) && find(h, "ucp_worker_arm", u.worker_arm) &&
         find(h, "ucp_ep_create", u.ep_create) && find(h, "ucp_ep_close_nbx", u.ep_close_nbx) &&
         find(h, "ucp_ep_flush_nbx", u.ep_flush_nbx) && find(h, "ucp_mem_map", u.mem_map) &&
         find(h, "ucp_mem_unmap", u.mem_unmap) && find(h, "ucp_rkey_pack", u.rkey_pack) &&
         find(h, "ucp_rkey_buffer_release", u.rkey_buffer_release) &&
         find(h, "ucp_ep_rkey_unpack", u.ep_rkey_unpack) && find(h, "ucp_rkey_destroy", u.rkey_destroy) &&
         find(h, "ucp_put_nbx", u.put_nbx) && find(h, "ucp_get_nbx", u.get_nbx) &&
         find(h, "ucp_request_check_status", u.request_check_status) &&
         find(h, "ucp_request_free", u.request_free) && find(h, "ucs_status_string", u.status_string);
}

Ucp load() {
  Ucp u;
  u.library = "libucp.so.0";
  void* h = dlopen(u.library.c_str(), RTLD_NOW | RTLD_GLOBAL);
  if (h == nullptr) {
    const char* why = dlerror();
    u.status = Status(Code::kNotSupported,
                      "UCX is not installed here (" + u.library + ": " + (why ? why : "not found") +
                          "); pip install 'kvstore-llm[ucx]', or name a system libucp in "
                          "KVSTORE_UCX_LIBRARY");
    return u;
  }
  void (*get_version)(unsigned*, unsigned*, unsigned*) = nullptr;
  if (!find(h, "ucp_get_version", get_version)) {
    u.status = Status(Code::kNotSupported, u.library + " is not UCX's libucp (no ucp_get_version)");
    return u;
  }
  get_version(&u.major, &u.minor, &u.release);
  const std::string version =
      std::to_string(u.major) + "." + std::to_string(u.minor) + "." + std::to_string(u.release);
  if (u.major != kApiMajor || u.minor < kMinMinor) {
    u.status = Status(Code::kNotSupported, u.library + " is UCX " + version + "; kvstore needs UCX " +
                                               std::to_string(kApiMajor) + "." + std::to_string(kMinMinor) +
                                               " or newer (1.x)");
    return u;
  }
  if (!resolve(h, u)) {
    u.status =
        Status(Code::kNotSupported, u.library + " (UCX " + version + ") lacks a UCP call kvstore uses");
    return u;
  }
  u.status = Status::OK();
  return u;
}

}  // namespace

std::string Ucp::describe(ucs_status_t s) const {
  return "UCX error " + (status_string ? std::string(status_string(s)) : std::to_string(s));
}

const Ucp& ucp() {
  static const Ucp loaded = load();
  return loaded;
}

}  // namespace kvs::ucx
