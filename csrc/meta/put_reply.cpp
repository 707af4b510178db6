#include "meta/put_reply.h"

#include <stdexcept>

#include "meta/msgpack_writer.h"

namespace kvs::meta {

std::string encode_put_reply(const std::vector<PutOutcome>& outcomes, const std::vector<PlacedCopy>& copies) {
  MsgpackWriter w;
  w.reserve(8 + outcomes.size() * 40);  // (a placed item with one replica: ~30 bytes)
  w.array(static_cast<uint32_t>(outcomes.size()));
  for (const PutOutcome& o : outcomes) {
    w.array(3);
    if (o.kind == PutOutcome::Kind::kFailed) {
      w.uint(o.code);
      w.str(o.message);
      w.nil();
      continue;
    }
    w.uint(0);
    w.str("");
    if (o.kind == PutOutcome::Kind::kStored) {
      w.nil();
      continue;
    }
    if (static_cast<uint64_t>(o.first) + o.count > copies.size())
      throw std::out_of_range("a placed item names copies past the reply's");
    w.array(o.count);
    for (uint32_t i = o.first; i < o.first + o.count; ++i) {
      const PlacedCopy& c = copies[i];
      w.array(5);
      w.str(c.engine);
      w.uint(c.region_id);
      w.uint(c.offset);
      w.uint(c.slot);
      w.uint(c.gen);
    }
  }
  return w.take();
}

}  // namespace kvs::meta
