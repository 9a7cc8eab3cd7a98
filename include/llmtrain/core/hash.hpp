// The 64-bit mix every seeded choice of the project uses (the loader's sample
// order, llmtrain-prepare's train/val split): SplitMix64's finalizer (Steele,
// Lea, Flood 2014). A pure function, the same on every rank and platform.
#pragma once
#include <cstdint>

namespace llmtrain {

constexpr uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

}  // namespace llmtrain
