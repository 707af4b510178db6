// Memory-to-memory slice copy shared by the local and shm transports.
#pragma once

#include "transport/transport.h"

namespace kvs {

// Copies one slice between its local pointer and `remote`, honouring the batch's copy guard. The
// caller reports the slice with the returned status.
Status copy_slice(const Slice& slice, char* remote);

// The setting both memory-to-memory transports have: how large a slice one copy task moves.
OptionSpec copy_slice_size_option();

}  // namespace kvs
