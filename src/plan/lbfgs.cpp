#include "plan/lbfgs.hpp"

#include <algorithm>
#include <cmath>
#include <deque>

namespace llmtrain::plan_detail {
namespace {
double dot(const std::vector<double>& a, const std::vector<double>& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}
double max_abs(const std::vector<double>& a) {
  double m = 0;
  for (double v : a) m = std::max(m, std::fabs(v));
  return m;
}
}  // namespace

LbfgsResult minimize_lbfgs(const Objective& f, std::vector<double> x, const LbfgsOptions& o) {
  const size_t n = x.size();
  std::vector<double> g(n), g_new(n), x_new(n), d(n);
  double fx = f(x, g);
  std::deque<std::vector<double>> S, Y;  // curvature pairs s = dx, y = dg, newest last
  std::deque<double> rho;
  LbfgsResult r;
  int it = 0;
  for (; it < o.max_iters && std::isfinite(fx); ++it) {
    if (max_abs(g) < o.grad_tol) break;
    // Two-loop recursion: d = -H g.
    d = g;
    std::vector<double> alpha(S.size());
    for (size_t k = S.size(); k-- > 0;) {
      alpha[k] = rho[k] * dot(S[k], d);
      for (size_t i = 0; i < n; ++i) d[i] -= alpha[k] * Y[k][i];
    }
    const double gamma = S.empty() ? 1.0 / std::max(1.0, max_abs(g)) : dot(S.back(), Y.back()) / dot(Y.back(), Y.back());
    for (auto& v : d) v *= gamma;
    for (size_t k = 0; k < S.size(); ++k) {
      const double beta = rho[k] * dot(Y[k], d);
      for (size_t i = 0; i < n; ++i) d[i] += S[k][i] * (alpha[k] - beta);
    }
    for (auto& v : d) v = -v;
    double slope = dot(g, d);
    if (!(slope < 0)) {  // not a descent direction: restart from steepest descent
      S.clear(), Y.clear(), rho.clear();
      for (size_t i = 0; i < n; ++i) d[i] = -g[i] / std::max(1.0, max_abs(g));
      slope = dot(g, d);
    }
    // Armijo backtracking.
    double step = 1.0, f_new = fx;
    bool accepted = false;
    for (int ls = 0; ls < 60; ++ls) {
      for (size_t i = 0; i < n; ++i) x_new[i] = x[i] + step * d[i];
      f_new = f(x_new, g_new);
      if (std::isfinite(f_new) && f_new <= fx + 1e-4 * step * slope) {
        accepted = true;
        break;
      }
      step *= 0.5;
    }
    if (!accepted) break;
    std::vector<double> s(n), y(n);
    for (size_t i = 0; i < n; ++i) s[i] = x_new[i] - x[i], y[i] = g_new[i] - g[i];
    const double sy = dot(s, y);
    if (sy > 1e-16 * std::max(1.0, dot(y, y))) {
      S.push_back(std::move(s)), Y.push_back(std::move(y)), rho.push_back(1.0 / sy);
      if (static_cast<int>(S.size()) > o.history) S.pop_front(), Y.pop_front(), rho.pop_front();
    }
    const double change = std::fabs(fx - f_new);
    x.swap(x_new);
    g.swap(g_new);
    fx = f_new;
    if (change < o.f_tol * (1.0 + std::fabs(fx)) && max_abs(g) < 1e-3) break;
  }
  r.x = std::move(x);
  r.f = fx;
  r.iters = it;
  return r;
}

}  // namespace llmtrain::plan_detail
