// ActivityNote: what this process is doing inside a call that can block on another
// process (an HDF5 file open: MPI_File_open is collective and can wait on an MPI-IO
// lock), said where the call is made, so that the watchdog's message can name it
// ("opening /data/train_00000.h5") instead of only the loop's phase. Any thread
// (the loader's prefetch, the asynchronous checkpoint writer) may hold one.
#pragma once
#include <cstdint>
#include <string>

namespace llmtrain {

class ActivityNote {
 public:
  explicit ActivityNote(std::string what);  // open from now until destruction
  ~ActivityNote();
  ActivityNote(const ActivityNote&) = delete;
  ActivityNote& operator=(const ActivityNote&) = delete;

 private:
  uint64_t id_;
};

struct ActivityNotes {
  std::string text;      // the open notes, oldest first, joined by "; " ("" when none)
  double oldest_s = 0.0;  // how long the oldest has been open
};
// The notes open now, in this process.
ActivityNotes activity_notes();

}  // namespace llmtrain
