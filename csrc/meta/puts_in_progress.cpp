#include "meta/puts_in_progress.h"

namespace kvs::meta {

void PutsInProgress::start(uint32_t row, uint32_t incarnation, uint32_t writer, uint64_t charge,
                           double deadline) {
  if (writer >= held_.size()) held_.resize(writer + 1);
  ++held_[writer].objects;
  held_[writer].bytes += charge;
  ++live_;
  queue_.push_back(Entry{row, incarnation, deadline - credit_});
}

void PutsInProgress::end(uint32_t writer, uint64_t charge) {
  PutsHeld& h = held_[writer];
  --h.objects;
  h.bytes -= charge;
  --live_;
}

}  // namespace kvs::meta
