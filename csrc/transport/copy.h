// Memory-to-memory slice copy shared by the local and shm transports.
#pragma once

#include "transport/transport.h"

namespace kvs {

// Copies one slice between its local pointer and `remote`, honouring the batch's copy guard. The
// caller reports the slice with the returned status.
Status copy_slice(const Slice& slice, char* remote);

// Batch::begin_copy for a slice whose request is live and whose batch's deadline has not passed: past it
// the request is over for its caller (the waiter times it out at its next look), so no copy starts, and
// the waiter is not kept from returning by copies that would only land late.
bool begin_copy_in_time(const Slice& slice);

// The setting both memory-to-memory transports have: how large a slice one copy task moves.
OptionSpec copy_slice_size_option();

}  // namespace kvs
