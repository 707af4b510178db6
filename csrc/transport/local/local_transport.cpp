#include "transport/local/local_transport.h"

#include <functional>
#include <mutex>
#include <unordered_map>

#include "transport/copy.h"

namespace kvs {
namespace {

constexpr uint8_t kSectionVersion = 1;

// Registries of the engines alive in this process, by engine id.
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
  LocalChannel(CopyPool* pool, std::weak_ptr<MemoryRegistry> target, const Session& session)
      : pool_(pool), target_(std::move(target)), keys_(std::make_shared<SessionKeys>(session.key)) {}

  void submit(std::vector<Slice>&& slices) override {
    std::vector<std::function<void()>> tasks;
    tasks.reserve(slices.size());
    for (auto& s : slices) {
      tasks.emplace_back([slice = std::move(s), target = target_, keys = keys_] {
        auto registry = target.lock();
        if (!registry) return slice.done(Status(Code::kConnectionFailed, "target engine closed"));
        auto pin = registry->pin_remote(slice.region_id, slice.key, slice.offset, slice.length, *keys);
        if (!pin.ok()) return slice.done(pin.status());
        FenceEntry fence(pin.value().fence(), slice.fence_slot, slice.fence_gen, slice.offset, slice.length,
                         slice.op == TransferOp::kWrite);
        if (!fence.status().ok()) return slice.done(fence.status());
        slice.done(copy_slice(slice, pin.value().at(slice.offset)));
      });
    }
    pool_->post(std::move(tasks));
  }
  bool healthy() const override { return !target_.expired(); }

 private:
  CopyPool* pool_;
  std::weak_ptr<MemoryRegistry> target_;
  std::shared_ptr<const SessionKeys> keys_;  // the peer's handshake session (its descriptor's keys)
};

class LocalTransport : public Transport {
 public:
  LocalTransport(const TransportContext& context, const Options& options)
      : context_(context), slice_size_(static_cast<uint64_t>(options.get("slice_size"))) {}
  ~LocalTransport() override { stop(); }

  Status start() override {
    std::lock_guard<std::mutex> lock(directory_mu());
    directory()[context_.engine_id] = context_.registry;
    return Status::OK();
  }
  void stop() override {
    std::lock_guard<std::mutex> lock(directory_mu());
    directory().erase(context_.engine_id);
  }
  std::vector<char> descriptor_section() const override { return {static_cast<char>(kSectionVersion)}; }
  std::map<std::string, std::string> describe_section(const std::vector<char>&) const override { return {}; }

  uint64_t slice_size() const override { return slice_size_; }
  bool reachable(const EngineDescriptor& peer) const override {
    const auto* section = peer.section("local");
    if (section == nullptr || section->empty() || (*section)[0] != static_cast<char>(kSectionVersion)) {
      return false;
    }
    std::lock_guard<std::mutex> lock(directory_mu());
    return directory().count(peer.engine_id) != 0;
  }
  StatusOr<std::shared_ptr<Channel>> connect(const EngineDescriptor& peer) override {
    std::lock_guard<std::mutex> lock(directory_mu());
    auto it = directory().find(peer.engine_id);
    if (it == directory().end()) return Status(Code::kNotFound, "engine is not in this process");
    return std::shared_ptr<Channel>(std::make_shared<LocalChannel>(context_.pool, it->second, peer.session));
  }

 private:
  TransportContext context_;
  uint64_t slice_size_;
};

}  // namespace

const TransportEntry& local_transport_entry() {
  static const TransportEntry entry{
      "local",
      Capabilities{0, kReachSameProcess, kAllHostKinds, kAllHostKinds, false, true},
      {copy_slice_size_option()},
      [](const TransportContext& context, const Options& options) -> std::unique_ptr<Transport> {
        return std::make_unique<LocalTransport>(context, options);
      },
  };
  return entry;
}

}  // namespace kvs
