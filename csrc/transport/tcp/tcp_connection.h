// One data connection of the TCP transport's initiator side: a sender thread (requests, write payloads)
// and a receiver thread (replies, read payloads straight into the destination), so slices are pipelined.
// A connection that dies hands the slices it still held to its channel (another path may carry them),
// or fails them when it has no channel to hand them to.
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "core/session.h"
#include "core/slice.h"
#include "transport/tcp/tcp_config.h"
#include "transport/tcp/wire.h"

namespace kvs::tcp {

// Connects (from `source` when given: a path's local address), proves `session` and checks the peer's
// proof (wire.h), and that it is still the engine `engine_id`; returns the socket.
StatusOr<int> open_connection(const std::string& host, uint16_t port, uint64_t engine_id,
                              const Session& session, const TcpConfig& config,
                              const std::string& source = "");

// What the connections of one path carried, summed over the connections it ever had.
struct PathCounters {
  std::atomic<uint64_t> bytes{0};
  std::atomic<uint64_t> slices{0};
};

class TcpConnection {
 public:
  // on_lost may be empty: the slices then fail with the connection's error.
  TcpConnection(int fd, const TcpConfig& config, std::shared_ptr<PathCounters> counters = nullptr,
                LostSlices on_lost = nullptr);
  ~TcpConnection();
  TcpConnection(const TcpConnection&) = delete;
  TcpConnection& operator=(const TcpConnection&) = delete;

  void enqueue(std::vector<Slice>&& slices, uint64_t bytes);
  bool dead() const { return dead_.load(); }
  // The peer said goodbye while it carried nothing (a server cuts idle connections: wire.h is_goodbye):
  // nothing was lost, open another. A peer that died closes without one.
  bool closed_idle() const { return closed_idle_.load(); }
  // It died because the peer stopped answering (not a reset): the peer as a whole is unresponsive.
  bool unresponsive() const { return unresponsive_.load(); }
  uint64_t load() const { return load_bytes_.load(); }

 private:
  void send_loop();
  void recv_loop();
  // Registers a slice as outstanding and sends it; the caller holds send_mu_.
  void dispatch(Slice&& slice);
  // Sends slices in order, runs of them (read headers, small writes) in one vector write each.
  void dispatch_all(std::vector<Slice>& slices);
  // Registers a slice as outstanding: its request id, or 0 when it was finished or handed back instead.
  uint64_t register_slice(Slice& slice);
  static FrameHeader frame_header(const Slice& slice, uint64_t request_id);
  Status send_slice(const Slice& slice, uint64_t request_id);
  Status receive_reply(const FrameHeader& header);
  // A read's payload into the slice's memory (its pieces in order), hashed as it lands when asked, while
  // its request is live and in time; `landed` false when it was drained instead (from the first byte
  // that came after that).
  Status receive_into(const Slice& slice, bool* landed);
  void fail(const Status& status);
  bool carries_nothing();
  void finish(const Slice& slice, const Status& status);
  // Slices this connection can no longer carry: to the channel, or failed.
  void lose(std::vector<Slice>&& slices, const Status& status);

  int fd_;
  TcpConfig config_;
  std::shared_ptr<PathCounters> counters_;
  LostSlices on_lost_;
  std::atomic<bool> unresponsive_{false};
  std::atomic<bool> dead_{false};
  std::atomic<bool> closed_idle_{false};
  std::atomic<bool> stopping_{false};
  std::atomic<uint64_t> load_bytes_{0};  // queued + outstanding, for choosing a connection

  std::mutex send_mu_;  // whoever writes to the socket: the sender thread or an inline submitter
  std::mutex queue_mu_;
  std::condition_variable queue_cv_;
  std::deque<Slice> queue_;

  std::mutex outstanding_mu_;
  std::unordered_map<uint64_t, Slice> outstanding_;
  uint64_t next_request_id_ = 1;
  std::atomic<int64_t> last_progress_ns_{0};

  std::thread sender_;
  std::thread receiver_;
};

}  // namespace kvs::tcp
