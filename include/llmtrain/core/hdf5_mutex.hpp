// The process-wide HDF5 lock. Debian's parallel HDF5 (and most cluster builds)
// is compiled without --enable-threadsafe, so no two threads may be inside the
// HDF5 library at once: the data loader's worker threads read token shards while
// the training thread writes checkpoints, opens evaluation loaders, prepares data.
//
// Every HDF5 call in llmtrain goes through H5_CHECK (checked) or H5_LOCKED
// (unchecked: predicates, sizes, closers), as src/core/hdf5_util.hpp defines
// them: they hold this lock for the call and,
// for H5_CHECK, for reading HDF5's error stack after it; h5::H5Id closes under
// it. The lock is recursive, so a function may also hold it across a sequence
// of calls (a shard read: open, select, read). tests/core/check_hdf5_lock.py
// fails the build's tests on any HDF5 call outside those macros.
#pragma once
#include <mutex>

namespace llmtrain {

std::recursive_mutex& hdf5_mutex();

namespace detail {
// Runs f() holding hdf5_mutex(); returns its value.
template <typename F>
auto hdf5_locked(F&& f) {
  std::lock_guard<std::recursive_mutex> lock(hdf5_mutex());
  return f();
}
}  // namespace detail

}  // namespace llmtrain
