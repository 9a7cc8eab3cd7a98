// A small L-BFGS minimizer (two-loop recursion, Armijo backtracking) for the
// scaling-law fit: five parameters, analytic gradients, double precision.
#pragma once
#include <functional>
#include <vector>

namespace llmtrain::plan_detail {

// Returns f(x) and writes its gradient into `grad` (already sized like x).
using Objective = std::function<double(const std::vector<double>& x, std::vector<double>& grad)>;

struct LbfgsOptions {
  int max_iters = 400;
  int history = 8;
  double grad_tol = 1e-9;  // stop when the gradient's max-norm is below this
  double f_tol = 1e-13;    // ... or f changes by less than f_tol * (1 + |f|)
};

struct LbfgsResult {
  std::vector<double> x;
  double f = 0;
  int iters = 0;
};

LbfgsResult minimize_lbfgs(const Objective& f, std::vector<double> x0, const LbfgsOptions& options = {});

}  // namespace llmtrain::plan_detail
