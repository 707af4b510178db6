#include "transport/local/local_transport.h"

#include <functional>
#include <mutex>
#include <unordered_map>

#include "transport/copy.h"

namespace kvs {
namespace {

std::mutex& directory_mu() {
  static std::mutex mu;
  return mu;
}

std::unordered_map<uint64_t, std::weak_ptr<MemoryRegistry>>& directory() {
  static std::unordered_map<uint64_t, std::weak_ptr<MemoryRegistry>> dir;
  return dir;
}

class LocalChannel : public Channel {
 public:
  LocalChannel(CopyPool* pool, std::weak_ptr<MemoryRegistry> target)
      : pool_(pool), target_(std::move(target)) {}

  void submit(std::vector<Slice>&& slices) override {
    std::vector<std::function<void()>> tasks;
    tasks.reserve(slices.size());
    for (auto& s : slices) {
      tasks.emplace_back([slice = std::move(s), target = target_] {
        auto registry = target.lock();
        if (!registry) return slice.done(Status(Code::kConnectionFailed, "target engine closed"));
        auto pin = registry->pin_remote(slice.region_id, slice.key, slice.offset, slice.length);
        if (!pin.ok()) return slice.done(pin.status());
        slice.done(copy_slice(slice, pin.value().at(slice.offset)));
      });
    }
    pool_->post(std::move(tasks));
  }
  bool healthy() const override { return !target_.expired(); }

 private:
  CopyPool* pool_;
  std::weak_ptr<MemoryRegistry> target_;
};

}  // namespace

void local_directory_add(uint64_t engine_id, std::weak_ptr<MemoryRegistry> registry) {
  std::lock_guard<std::mutex> lock(directory_mu());
  directory()[engine_id] = std::move(registry);
}

void local_directory_remove(uint64_t engine_id) {
  std::lock_guard<std::mutex> lock(directory_mu());
  directory().erase(engine_id);
}

bool LocalTransport::reachable(const SegmentDescriptor& peer) const {
  std::lock_guard<std::mutex> lock(directory_mu());
  return (peer.transports & kTransportLocal) && directory().count(peer.engine_id) != 0;
}

StatusOr<std::shared_ptr<Channel>> LocalTransport::connect(const SegmentDescriptor& peer) {
  std::lock_guard<std::mutex> lock(directory_mu());
  auto it = directory().find(peer.engine_id);
  if (it == directory().end()) return Status(Code::kNotFound, "engine is not in this process");
  return std::shared_ptr<Channel>(std::make_shared<LocalChannel>(pool_, it->second));
}

}  // namespace kvs
