// The part of UCX's UCP API the ucx transport uses, loaded at run time (dlopen of libucp): nothing UCX is
// needed to build, install or import kvstore. The types below declare the leading fields of UCP's
// parameter structs, up to the last one this transport sets: UCP reads a struct's fields only where its
// field_mask says so, and their layout is part of UCP's stable 1.x ABI (checked against UCX 1.22's
// headers). A libucp older than kMinMinor is refused with a clear error.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "common/status.h"

namespace kvs::ucx {

constexpr unsigned kApiMajor = 1;
constexpr unsigned kMinMinor = 12;  // the *_nbx calls and ucp_ep_flush_nbx / ucp_ep_close_nbx

using ucs_status_t = int8_t;  // (an enum of one byte in UCS)
constexpr ucs_status_t kOk = 0;
constexpr ucs_status_t kInProgress = 1;
constexpr ucs_status_t kErrBusy = -4;
constexpr ucs_status_t kErrCanceled = -16;
constexpr ucs_status_t kErrLast = -100;
using ucs_status_ptr_t = void*;  // a request, or a status cast to a pointer

inline bool is_error_ptr(ucs_status_ptr_t p) {
  return reinterpret_cast<uintptr_t>(p) >= static_cast<uintptr_t>(static_cast<intptr_t>(kErrLast));
}
inline ucs_status_t ptr_status(ucs_status_ptr_t p) {
  return static_cast<ucs_status_t>(reinterpret_cast<intptr_t>(p));
}

struct ucp_context;
struct ucp_worker;
struct ucp_ep;
struct ucp_mem;
struct ucp_rkey_handle;
struct ucp_config;
struct ucp_address;
using ucp_context_h = ucp_context*;
using ucp_worker_h = ucp_worker*;
using ucp_ep_h = ucp_ep*;
using ucp_mem_h = ucp_mem*;
using ucp_rkey_h = ucp_rkey_handle*;

constexpr uint64_t kParamFieldFeatures = 1;
constexpr uint64_t kFeatureRma = 2;
constexpr uint64_t kFeatureWakeup = 16;
struct ucp_params_t {
  uint64_t field_mask;
  uint64_t features;
};

constexpr uint64_t kWorkerParamFieldThreadMode = 1;
constexpr int kThreadModeSingle = 0;
struct ucp_worker_params_t {
  uint64_t field_mask;
  int thread_mode;
};

using ucp_err_handler_cb_t = void (*)(void* arg, ucp_ep_h ep, ucs_status_t status);
constexpr uint64_t kEpParamFieldRemoteAddress = 1;
constexpr uint64_t kEpParamFieldErrHandlingMode = 2;
constexpr uint64_t kEpParamFieldErrHandler = 4;
constexpr int kErrHandlingModePeer = 1;
struct ucp_ep_params_t {
  uint64_t field_mask;
  const ucp_address* address;
  int err_mode;
  ucp_err_handler_cb_t err_cb;  // ucp_err_handler_t {cb, arg}, at offset 24
  void* err_arg;
};

constexpr uint64_t kMemMapParamFieldAddress = 1;
constexpr uint64_t kMemMapParamFieldLength = 2;
constexpr uint64_t kMemMapParamFieldMemoryType = 16;
constexpr int kMemoryTypeHost = 0;
constexpr int kMemoryTypeCuda = 1;
struct ucp_mem_map_params_t {
  uint64_t field_mask;
  void* address;
  size_t length;
  unsigned flags;
  unsigned prot;
  int memory_type;
};

using ucp_send_nbx_callback_t = void (*)(void* request, ucs_status_t status, void* user_data);
constexpr uint32_t kOpAttrFieldCallback = 2;
constexpr uint32_t kOpAttrFieldUserData = 4;
constexpr uint32_t kOpAttrFieldFlags = 16;
constexpr uint32_t kEpCloseFlagForce = 1;
struct ucp_request_param_t {
  uint32_t op_attr_mask;
  uint32_t flags;
  void* request;
  ucp_send_nbx_callback_t cb;
  uint64_t datatype;
  void* user_data;
};

constexpr uint64_t kAttrFieldMemoryTypes = 4;
struct ucp_context_attr_t {
  uint64_t field_mask;
  size_t request_size;
  int thread_mode;
  uint64_t memory_types;  // bit per memory type the context supports (1 << kMemoryTypeCuda: CUDA)
};

// The entry points, resolved once.
struct Ucp {
  Status status = Status(Code::kNotSupported, "UCX not loaded");
  std::string library;  // the libucp that was loaded
  unsigned major = 0, minor = 0, release = 0;

  ucs_status_t (*config_read)(const char*, const char*, ucp_config**) = nullptr;
  void (*config_release)(ucp_config*) = nullptr;
  ucs_status_t (*config_modify)(ucp_config*, const char*, const char*) = nullptr;
  ucs_status_t (*init_version)(unsigned, unsigned, const ucp_params_t*, const ucp_config*,
                               ucp_context_h*) = nullptr;
  void (*cleanup)(ucp_context_h) = nullptr;
  ucs_status_t (*context_query)(ucp_context_h, ucp_context_attr_t*) = nullptr;
  ucs_status_t (*worker_create)(ucp_context_h, const ucp_worker_params_t*, ucp_worker_h*) = nullptr;
  void (*worker_destroy)(ucp_worker_h) = nullptr;
  ucs_status_t (*worker_get_address)(ucp_worker_h, ucp_address**, size_t*) = nullptr;
  void (*worker_release_address)(ucp_worker_h, ucp_address*) = nullptr;
  unsigned (*worker_progress)(ucp_worker_h) = nullptr;
  ucs_status_t (*worker_get_efd)(ucp_worker_h, int*) = nullptr;
  ucs_status_t (*worker_arm)(ucp_worker_h) = nullptr;
  ucs_status_t (*ep_create)(ucp_worker_h, const ucp_ep_params_t*, ucp_ep_h*) = nullptr;
  ucs_status_ptr_t (*ep_close_nbx)(ucp_ep_h, const ucp_request_param_t*) = nullptr;
  ucs_status_ptr_t (*ep_flush_nbx)(ucp_ep_h, const ucp_request_param_t*) = nullptr;
  ucs_status_t (*mem_map)(ucp_context_h, const ucp_mem_map_params_t*, ucp_mem_h*) = nullptr;
  ucs_status_t (*mem_unmap)(ucp_context_h, ucp_mem_h) = nullptr;
  ucs_status_t (*rkey_pack)(ucp_context_h, ucp_mem_h, void**, size_t*) = nullptr;
  void (*rkey_buffer_release)(void*) = nullptr;
  ucs_status_t (*ep_rkey_unpack)(ucp_ep_h, const void*, ucp_rkey_h*) = nullptr;
  void (*rkey_destroy)(ucp_rkey_h) = nullptr;
  ucs_status_ptr_t (*put_nbx)(ucp_ep_h, const void*, size_t, uint64_t, ucp_rkey_h,
                              const ucp_request_param_t*) = nullptr;
  ucs_status_ptr_t (*get_nbx)(ucp_ep_h, void*, size_t, uint64_t, ucp_rkey_h,
                              const ucp_request_param_t*) = nullptr;
  ucs_status_t (*request_check_status)(void*) = nullptr;
  void (*request_free)(void*) = nullptr;
  const char* (*status_string)(ucs_status_t) = nullptr;

  // "UCX error <name>" for a status.
  std::string describe(ucs_status_t s) const;
};

// Loads libucp.so.0 once per process, as the dynamic linker finds it: a libucp already loaded (kvstore's
// Python side preloads the one KVSTORE_UCX_LIBRARY names, else the libucx wheel's) is the one used.
// Never fails: Ucp::status says why UCX is not usable.
const Ucp& ucp();

}  // namespace kvs::ucx
