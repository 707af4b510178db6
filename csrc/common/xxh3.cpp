#include "common/xxh3.h"

#include <dlfcn.h>

#include <algorithm>
#include <atomic>
#include <mutex>
#include <thread>
#include <vector>

#include "common/copy_bytes.h"
#include "common/xxh3_copy.h"

namespace kvs::xxh3 {
namespace {

// The xxhash library's public streaming API (xxhash.h); the state is opaque to us.
struct State;
using CreateState = State* (*)();
using FreeState = int (*)(State*);
using Reset = int (*)(State*);
using Update = int (*)(State*, const void*, size_t);
using Digest = uint64_t (*)(const State*);
using OneShot = uint64_t (*)(const void*, size_t);

struct Api {
  CreateState create = nullptr;
  FreeState free = nullptr;
  Reset reset = nullptr;
  Update update = nullptr;
  Digest digest = nullptr;
  OneShot one_shot = nullptr;
};

Api api;
std::atomic<bool> ready{false};
std::mutex load_mu;

template <typename F>
bool find(void* handle, const char* name, F& out) {
  out = reinterpret_cast<F>(dlsym(handle, name));
  return out != nullptr;
}

// One state per thread, reused: the streaming state is a few hundred bytes with an aligned buffer.
class ThreadState {
 public:
  ~ThreadState() {
    if (state_ != nullptr) api.free(state_);
  }
  State* get() {
    if (state_ == nullptr) state_ = api.create();
    return state_;
  }

 private:
  State* state_ = nullptr;
};

// A thread's states for hashing a group of values side by side (hash_interleaved), created once.
class StateGroup {
 public:
  static constexpr size_t kSize = 64;  // values hashed side by side: their states stay in L1/L2

  ~StateGroup() {
    for (State* state : states_) api.free(state);
  }
  State* operator[](size_t i) {
    while (states_.size() <= i) states_.push_back(api.create());
    return states_[i];
  }

 private:
  std::vector<State*> states_;
};

}  // namespace

Status load(const std::string& library) {
  std::lock_guard<std::mutex> lock(load_mu);
  if (ready.load()) return Status::OK();
  // The Python extension is already loaded: this finds it (RTLD_NOLOAD would refuse a fresh load).
  void* handle = dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* why = dlerror();
    return Status(Code::kNotFound, std::string("cannot open ") + library + ": " + (why ? why : "?"));
  }
  Api found;
  if (!find(handle, "XXH3_createState", found.create) || !find(handle, "XXH3_freeState", found.free) ||
      !find(handle, "XXH3_64bits_reset", found.reset) || !find(handle, "XXH3_64bits_update", found.update) ||
      !find(handle, "XXH3_64bits_digest", found.digest) || !find(handle, "XXH3_64bits", found.one_shot)) {
    dlclose(handle);
    return Status(Code::kNotSupported, library + " does not export the XXH3 streaming API");
  }
  // Builds with x86 dispatch export variants that pick the widest vector unit at run time (AVX2, AVX-512):
  // 2-3x the default's SSE2 on the same data (36 -> 120 GB/s for 512 KiB in cache on the reference
  // machine). Same digests; used where present.
  Update update_dispatch = nullptr;
  OneShot one_shot_dispatch = nullptr;
  if (find(handle, "XXH3_64bits_update_dispatch", update_dispatch) &&
      find(handle, "XXH3_64bits_dispatch", one_shot_dispatch)) {
    found.update = update_dispatch;
    found.one_shot = one_shot_dispatch;
  }
  api = found;  // the handle stays open for the life of the process
  ready.store(true);
  // The default secret is the one seed 0 derives (the library's own, byte for byte): copies hash as they
  // go once the fused path reproduces this library's digests.
  using GenerateSecret = void (*)(void*, uint64_t);
  GenerateSecret generate = nullptr;
  if (find(handle, "XXH3_generateSecret_fromSeed", generate)) {
    alignas(8) unsigned char secret[192];
    generate(secret, 0);
    enable_fused(secret, api.one_shot);
  }
  return Status::OK();
}

bool loaded() {
  return ready.load();
}

namespace {

StateGroup& this_thread_group() {
  thread_local StateGroup group;
  return group;
}

// hash_pieces() of values [from, to) into out[]. Values of several pieces go a group at a time, piece k
// of every value of the group before any piece k + 1: a paged KV cache's value takes one piece from each
// layer's tensor, and the group's k-th pieces lie side by side in that tensor, so memory is read in long
// runs rather than a few KiB from each tensor in turn (twice as fast from memory here, 32 pieces of 8 KiB
// per value). Each value's pieces still enter its own state in order: the digests do not change. A value
// whose pieces continue one another goes alone: side by side, the group's values would be so many streams.
void hash_interleaved(const uint64_t* addrs, const uint64_t* lengths, const uint64_t* counts,
                      const std::vector<size_t>& first, size_t from, size_t to, uint64_t* out) {
  StateGroup& states = this_thread_group();
  std::vector<size_t> group;
  group.reserve(StateGroup::kSize);
  auto flush = [&] {
    uint64_t rounds = 0;
    for (size_t j = 0; j < group.size(); ++j) {
      api.reset(states[j]);
      rounds = std::max(rounds, counts[group[j]]);
    }
    for (uint64_t k = 0; k < rounds; ++k) {
      for (size_t j = 0; j < group.size(); ++j) {
        const size_t v = group[j];
        if (k < counts[v])
          api.update(states[j], reinterpret_cast<const void*>(addrs[first[v] + k]), lengths[first[v] + k]);
      }
    }
    for (size_t j = 0; j < group.size(); ++j) out[group[j]] = api.digest(states[j]);
    group.clear();
  };
  for (size_t v = from; v < to; ++v) {
    const uint64_t* a = addrs + first[v];
    // (a value whose pieces continue one another is read in one run already: alone, in order)
    if (counts[v] <= 1 || a[0] + lengths[first[v]] == a[1]) {
      out[v] = hash_pieces(a, lengths + first[v], counts[v]);
      continue;
    }
    group.push_back(v);
    if (group.size() == StateGroup::kSize) flush();
  }
  if (!group.empty()) flush();
}

}  // namespace

void hash_values(const uint64_t* addrs, const uint64_t* lengths, const uint64_t* counts, size_t values,
                 uint64_t* out) {
  std::vector<size_t> first(values + 1, 0);  // value v's first piece
  uint64_t bytes = 0;
  for (size_t v = 0; v < values; ++v) first[v + 1] = first[v] + counts[v];
  for (size_t k = 0; k < first[values]; ++k) bytes += lengths[k];
  auto hash_range = [&](size_t from, size_t to) {
    hash_interleaved(addrs, lengths, counts, first, from, to, out);
  };
  // A thread costs tens of microseconds to start: only for batches that take milliseconds to hash.
  constexpr uint64_t kSplitFrom = 16 << 20;
  constexpr size_t kMaxHashThreads = 4;
  const size_t threads = std::min<size_t>(
      {values, 1 + bytes / kSplitFrom, kMaxHashThreads, std::max(1u, std::thread::hardware_concurrency())});
  if (threads <= 1) {
    hash_range(0, values);
    return;
  }
  // Split by bytes, not by values: values differ in size.
  std::vector<size_t> cuts{0};
  uint64_t seen = 0;
  for (size_t v = 0; v < values && cuts.size() < threads; ++v) {
    for (size_t k = first[v]; k < first[v + 1]; ++k) seen += lengths[k];
    if (seen * threads >= bytes * cuts.size()) cuts.push_back(v + 1);
  }
  if (cuts.back() != values) cuts.push_back(values);
  std::vector<std::thread> helpers;
  for (size_t t = 1; t + 1 < cuts.size(); ++t) helpers.emplace_back(hash_range, cuts[t], cuts[t + 1]);
  hash_range(cuts[0], cuts[1]);
  for (auto& h : helpers) h.join();
}

uint64_t hash_pieces(const uint64_t* addrs, const uint64_t* lengths, size_t n) {
  if (n == 1) return api.one_shot(reinterpret_cast<const void*>(addrs[0]), lengths[0]);
  Stream hash;
  for (size_t i = 0; i < n; ++i) hash.update(reinterpret_cast<const void*>(addrs[i]), lengths[i]);
  return hash.digest();
}

namespace {
ThreadState& this_thread_state() {
  thread_local ThreadState state;
  return state;
}
}  // namespace

Stream::Stream() : state_(this_thread_state().get()) {
  api.reset(static_cast<State*>(state_));
}

void Stream::update(const void* data, size_t n) {
  api.update(static_cast<State*>(state_), data, n);
}

uint64_t Stream::digest() const {
  return api.digest(static_cast<const State*>(state_));
}

void copy_and_hash(void* dst, const void* src, size_t n, Stream& hash) {
  constexpr size_t kChunk = 64 << 10;  // copied, then hashed while in L1/L2
  auto* d = static_cast<char*>(dst);
  const auto* from = static_cast<const char*>(src);
  for (size_t done = 0; done < n; done += kChunk) {
    const size_t length = std::min(kChunk, n - done);
    copy_bytes(d + done, from + done, length);
    hash.update(d + done, length);
  }
}

uint64_t copy_and_hash(void* dst, const void* src, size_t n) {
  if (fused_enabled() && n > FusedCopy::kFusedMin) {
    FusedCopy fused(n);
    fused.copy(dst, src, n);
    return fused.digest();
  }
  Stream hash;
  copy_and_hash(dst, src, n, hash);
  return hash.digest();
}

}  // namespace kvs::xxh3
