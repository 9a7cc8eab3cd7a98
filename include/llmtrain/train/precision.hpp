// Moved: the mixed-precision policy is model/'s (llmtrain/model/precision.hpp),
// so that prediction/ (calibration) can use it without including the loop.
// Kept only until src/train/trainer.cpp includes the new path; then delete.
#pragma once
#include "llmtrain/model/precision.hpp"
