#pragma once
// Stand-in for the header a CUDA build of LibTorch generates (it holds only
// this define): lets a CPU-only LibTorch's c10/cuda headers compile in the
// CUDA compile check (src/CMakeLists.txt). Never used by a real CUDA build.
#define C10_CUDA_BUILD_SHARED_LIBS
