// The transfer engine: owns the registry, serves its segment (TCP + shm), opens peer segments and
// turns batches of requests into slices on the transport chosen per peer.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "common/status.h"
#include "engine/batch.h"
#include "engine/copy_pool.h"
#include "engine/descriptor.h"
#include "engine/registry.h"
#include "transport/tcp/tcp_config.h"
#include "transport/transport.h"

namespace kvs {

namespace tcp {
class TcpServer;
}
namespace shm {
class ShmServer;
}

struct EngineConfig {
  std::string host = "127.0.0.1";  // address the segment listens on; it also names the segment
  uint16_t port = 0;               // 0: any free port
  std::string protocol = "auto";   // auto | local | shm | tcp: force one transport for every peer
  bool enable_shm = true;          // offer shared memory to same-host peers
  int copy_threads = 2;            // workers for local/shm copies
  uint64_t copy_slice_size = 4ull << 20;
  tcp::TcpConfig tcp;
};

// Flat batch: element i of every array describes request i.
struct BatchView {
  const uint8_t* ops;
  const uint64_t* local_addrs;
  const uint32_t* segments;
  const uint64_t* region_ids;
  const uint64_t* offsets;
  const uint64_t* lengths;
  size_t count;
};

class Engine {
 public:
  explicit Engine(EngineConfig config);
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  Status start();
  void stop();

  const std::string& name() const { return name_; }
  uint64_t id() const { return id_; }
  MemoryRegistry& registry() { return *registry_; }
  SegmentDescriptor descriptor() const;

  // Opens (or returns the already open) peer segment; protocol "" uses the engine's setting.
  StatusOr<uint32_t> open_segment(const std::string& name, const std::string& protocol);
  // Re-reads the peer's descriptor (new regions) and reconnects.
  Status refresh_segment(uint32_t handle);
  StatusOr<SegmentDescriptor> segment_descriptor(uint32_t handle);
  StatusOr<std::string> segment_transport(uint32_t handle);

  std::shared_ptr<Batch> submit(const BatchView& batch, int64_t timeout_ms);
  // Waits for a batch, running queued copies on this thread meanwhile (unless help is false, for a
  // caller with work of its own to overlap). Same result as Batch::wait.
  bool wait(Batch& batch, int64_t timeout_ms, bool help = true);
  // Runs one queued copy on the calling thread; false if none was queued.
  bool help_once() { return pool_->run_one(); }

 private:
  struct Segment;
  StatusOr<std::shared_ptr<Segment>> segment(uint32_t handle);
  Status connect_segment(Segment& seg, bool refresh_descriptor);
  StatusOr<Transport*> choose_transport(const SegmentDescriptor& peer, const std::string& protocol) const;

  EngineConfig config_;
  uint64_t id_;
  std::string name_;
  std::string host_id_;
  std::shared_ptr<MemoryRegistry> registry_;
  std::unique_ptr<CopyPool> pool_;
  std::vector<std::unique_ptr<Transport>> transports_;  // sorted by cost
  std::unique_ptr<tcp::TcpServer> tcp_server_;
  std::unique_ptr<shm::ShmServer> shm_server_;
  std::atomic<bool> running_{false};

  std::mutex segments_mu_;
  std::vector<std::shared_ptr<Segment>> segments_;
};

}  // namespace kvs
