#include "transport/copy.h"

#include <optional>

#include "common/copy_bytes.h"
#include "common/xxh3.h"
#include "common/xxh3_copy.h"

namespace kvs {

namespace {

// A slice whose local side is several pieces: each copied in order against consecutive remote bytes.
void copy_pieces(const Slice& slice, char* remote) {
  const bool hash = slice.op == TransferOp::kRead && slice.digest && xxh3::loaded();
  if (hash && xxh3::fused_enabled() && slice.length > xxh3::FusedCopy::kFusedMin) {
    xxh3::FusedCopy fused(slice.length);
    for (uint32_t k = 0; k < slice.piece_count; ++k) {
      fused.copy(slice.pieces[k].addr, remote, slice.pieces[k].length);
      remote += slice.pieces[k].length;
    }
    slice.batch->set_digest(slice.request, fused.digest());
    return;
  }
  std::optional<xxh3::Stream> digest;
  if (hash) digest.emplace();
  for (uint32_t k = 0; k < slice.piece_count; ++k) {
    const Piece& p = slice.pieces[k];
    if (hash) {
      xxh3::copy_and_hash(p.addr, remote, p.length, *digest);
    } else if (slice.op == TransferOp::kRead) {
      copy_bytes(p.addr, remote, p.length);
    } else if (slice.length >= kStreamFrom) {  // (a put's pieces: nothing here reads them back)
      copy_streaming(remote, p.addr, p.length);
    } else {
      copy_bytes(remote, p.addr, p.length);
    }
    remote += p.length;
  }
  if (hash) slice.batch->set_digest(slice.request, digest->digest());
}

}  // namespace

bool begin_copy_in_time(const Slice& slice) {
  return Clock::now() < slice.batch->deadline() && slice.batch->begin_copy(slice.request);
}

Status copy_slice(const Slice& slice, char* remote) {
  if (!begin_copy_in_time(slice)) return Status(Code::kTimedOut, "request over (or past its deadline)");
  if (slice.piece_count != 0) {
    copy_pieces(slice, remote);
  } else if (slice.op == TransferOp::kRead && slice.digest && xxh3::loaded()) {
    slice.batch->set_digest(slice.request, xxh3::copy_and_hash(slice.local, remote, slice.length));
  } else if (slice.op == TransferOp::kRead) {
    copy_bytes(slice.local, remote, slice.length);
  } else if (slice.length >= kStreamFrom) {  // a put's bytes: read elsewhere, later
    copy_streaming(remote, slice.local, slice.length);
  } else {
    copy_bytes(remote, slice.local, slice.length);
  }
  slice.batch->end_copy();
  return Status::OK();
}

OptionSpec copy_slice_size_option() {
  return {"slice_size",
          OptionKind::kSize,
          4 << 20,
          4096,
          int64_t{1} << 30,
          "Requests are cut into slices of at most this many bytes, copied by the engine's copy threads."};
}

}  // namespace kvs
