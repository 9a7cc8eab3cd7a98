// The process-wide HDF5 lock. Debian's parallel HDF5 (and most cluster builds)
// is compiled without --enable-threadsafe, so no two threads may be inside the
// HDF5 library at once. TokenLoader's worker threads take this lock around every
// HDF5 call; any other code that calls HDF5 while a loader with
// use_dataloader=True is alive (checkpoints, evaluation loaders) must take it too.
#pragma once
#include <mutex>

namespace llmtrain {

std::recursive_mutex& hdf5_mutex();

}  // namespace llmtrain
