#include "engine/request_pieces.h"

#include <algorithm>

#include "engine/engine.h"

namespace kvs {

// Pins a request's pieces and appends them to `out` (nothing appended when one is refused): each must be
// registered, non-empty and of one kind of memory with the others, and together `total` bytes.
StatusOr<Located> pin_pieces(BatchPins& pins, TransferOp op, const uint64_t* addrs, const uint64_t* lengths,
                             uint32_t count, uint64_t total, std::vector<Piece>& out) {
  uint64_t sum = 0;
  Located first;
  for (uint32_t k = 0; k < count; ++k) {
    if (lengths[k] == 0 || sum + lengths[k] < sum) {
      return Status(Code::kInvalidArgument, "a piece is empty, or the pieces overflow");
    }
    sum += lengths[k];
    auto where = pins.pin(op, addrs[k], lengths[k]);
    if (!where.ok()) return where.status();
    if (k == 0) {
      first = where.value();
    } else if (where.value().first.kind != first.first.kind) {
      return Status(Code::kInvalidArgument, "the pieces of one request are in different kinds of memory");
    }
  }
  if (sum != total) return Status(Code::kInvalidArgument, "a request's length is not the sum of its pieces");
  for (uint32_t k = 0; k < count; ++k) out.push_back(Piece{reinterpret_cast<char*>(addrs[k]), lengths[k]});
  return first;
}

// Cuts `length` bytes of local memory at `local` into slices of at most `step`, from proto's remote
// offset on (advanced past them).
void cut(Slice& proto, char* local, uint64_t length, uint64_t step, std::vector<Slice>& out) {
  for (uint64_t done = 0; done < length; done += step) {
    Slice s = proto;
    s.local = local + done;
    s.length = std::min(step, length - done);
    proto.offset += s.length;
    out.push_back(std::move(s));
  }
}

// A request's pieces as slices: for a transport that gathers, runs of whole pieces of at most `step`
// bytes (and kMaxSlicePieces) each, a longer piece cut alone; else every piece a slice of its own.
void cut_pieces(Slice& proto, const Piece* pieces, uint32_t count, uint64_t step, bool gathers,
                std::vector<Slice>& out) {
  Slice run = proto;
  auto flush = [&] {
    if (run.piece_count == 1) {  // (one piece: a plain slice)
      run.local = run.pieces[0].addr;
      run.pieces = nullptr;
      run.piece_count = 0;
    }
    if (run.length != 0) out.push_back(run);
    proto.offset += run.length;
    run = proto;
  };
  for (uint32_t k = 0; k < count; ++k) {
    const Piece& p = pieces[k];
    if (!gathers || p.length > step) {
      flush();
      cut(proto, p.addr, p.length, step, out);
      run = proto;
      continue;
    }
    if (run.length + p.length > step || run.piece_count == kMaxSlicePieces) flush();
    if (run.piece_count == 0) run.pieces = &p;
    run.piece_count += 1;
    run.length += p.length;
  }
  flush();
}

}  // namespace kvs
