#include "llmtrain/plan/scaling_law.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <random>
#include <set>
#include <sstream>

#include <fmt/format.h>

#include "llmtrain/core/error.hpp"
#include "plan/lbfgs.hpp"

namespace llmtrain {

double ScalingLaw::loss(double params, double tokens) const {
  return E + A / std::pow(params, alpha) + B / std::pow(tokens, beta);
}

std::string ScalingLaw::to_string() const {
  return fmt::format("E={:.4g} A={:.4g} B={:.4g} alpha={:.4g} beta={:.4g}", E, A, B, alpha, beta);
}

ScalingLaw ScalingLaw::parse(const std::string& text) {
  std::vector<double> v;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    try {
      size_t pos = 0;
      const double x = std::stod(item, &pos);
      if (pos != item.size() || !std::isfinite(x)) throw std::invalid_argument(item);
      v.push_back(x);
    } catch (const std::exception&) {
      throw ConfigError(fmt::format("scaling law '{}': '{}' is not a number (expected E,A,B,alpha,beta)", text, item));
    }
  }
  if (v.size() != 5)
    throw ConfigError(fmt::format("scaling law '{}': expected five numbers E,A,B,alpha,beta, got {}", text, v.size()));
  if (v[0] < 0 || v[1] <= 0 || v[2] <= 0)
    throw ConfigError(fmt::format("scaling law '{}': E must be >= 0 and A, B > 0", text));
  return {v[0], v[1], v[2], v[3], v[4]};
}

namespace {

using Theta = std::vector<double>;  // a = log A, b = log B, e = log E, alpha, beta

struct Data {
  std::vector<double> log_n, log_d, log_l;
};

// Sum over observations of Huber_delta(r) / delta, r = log L_pred - log L_obs,
// log L_pred = logsumexp(a - alpha log N, b - beta log D, e). `weights` counts
// how often each observation is in the sample (bootstrap); empty = once each.
double objective(const Data& data, const std::vector<double>& weights, double delta, const Theta& t, Theta& grad,
                 std::vector<double>* residuals = nullptr) {
  std::fill(grad.begin(), grad.end(), 0.0);
  double f = 0;
  for (size_t i = 0; i < data.log_l.size(); ++i) {
    const double w = weights.empty() ? 1.0 : weights[i];
    if (w == 0) continue;
    const double u1 = t[0] - t[3] * data.log_n[i], u2 = t[1] - t[4] * data.log_d[i], u3 = t[2];
    const double m = std::max({u1, u2, u3});
    const double e1 = std::exp(u1 - m), e2 = std::exp(u2 - m), e3 = std::exp(u3 - m), s = e1 + e2 + e3;
    const double r = m + std::log(s) - data.log_l[i];
    if (residuals) (*residuals)[i] = r;
    const double ar = std::fabs(r);
    f += w * (ar <= delta ? 0.5 * r * r / delta : ar - 0.5 * delta);
    const double dr = w * std::clamp(r / delta, -1.0, 1.0);
    const double p1 = e1 / s, p2 = e2 / s, p3 = e3 / s;
    grad[0] += dr * p1;
    grad[1] += dr * p2;
    grad[2] += dr * p3;
    grad[3] -= dr * p1 * data.log_n[i];
    grad[4] -= dr * p2 * data.log_d[i];
  }
  return f;
}

struct Optimum {
  Theta theta;
  double f;
};

Optimum fit_from(const Data& data, const std::vector<double>& weights, double delta, const Theta& start) {
  plan_detail::LbfgsOptions o;
  auto res = plan_detail::minimize_lbfgs(
      [&](const std::vector<double>& x, std::vector<double>& g) { return objective(data, weights, delta, x, g); },
      start, o);
  return {res.x, res.f};
}

ScalingLaw law_of(const Theta& t) { return {std::exp(t[2]), std::exp(t[0]), std::exp(t[1]), t[3], t[4]}; }

std::array<double, 5> fields(const ScalingLaw& l) { return {l.E, l.A, l.B, l.alpha, l.beta}; }
ScalingLaw from_fields(const std::array<double, 5>& v) { return {v[0], v[1], v[2], v[3], v[4]}; }

void check_spread(const std::vector<LossObservation>& obs, const std::vector<size_t>& idx, const char* what) {
  std::set<double> ns, ds;
  for (size_t i : idx) ns.insert(obs[i].params), ds.insert(obs[i].tokens);
  if (ns.size() < 2 || ds.size() < 2)
    throw Error(fmt::format("{}: the runs must differ in size and in tokens to fit alpha and beta ({} distinct "
                            "parameter count(s), {} distinct token count(s))",
                            what, ns.size(), ds.size()));
}

}  // namespace

FitResult fit_scaling_law(const std::vector<LossObservation>& obs, const FitOptions& options) {
  if (obs.size() < 5)
    throw Error(fmt::format("the fit needs at least 5 runs, one per constant (E, A, B, alpha, beta); got {}",
                            obs.size()));
  Data data;
  for (const auto& o : obs) {
    if (!(o.params > 0 && o.tokens > 0 && o.loss > 0) || !std::isfinite(o.params) || !std::isfinite(o.tokens) ||
        !std::isfinite(o.loss))
      throw Error(fmt::format("run '{}': parameters ({}), tokens ({}) and loss ({}) must be positive and finite",
                              o.source, o.params, o.tokens, o.loss));
    data.log_n.push_back(std::log(o.params));
    data.log_d.push_back(std::log(o.tokens));
    data.log_l.push_back(std::log(o.loss));
  }
  std::vector<size_t> all(obs.size());
  for (size_t i = 0; i < all.size(); ++i) all[i] = i;
  check_spread(obs, all, "fit");
  const double delta = options.huber_delta;

  // Approach 3's grid of starting points.
  std::vector<Optimum> optima;
  for (double alpha = 0; alpha <= 2.0 + 1e-9; alpha += 0.5)
    for (double beta = 0; beta <= 2.0 + 1e-9; beta += 0.5)
      for (double e = -1; e <= 1.5 + 1e-9; e += 0.5)
        for (double a = 0; a <= 25 + 1e-9; a += 5)
          for (double b = 0; b <= 25 + 1e-9; b += 5) optima.push_back(fit_from(data, {}, delta, {a, b, e, alpha, beta}));
  FitResult r;
  r.starts = static_cast<int>(optima.size());
  std::sort(optima.begin(), optima.end(), [](const Optimum& x, const Optimum& y) {
    if (!std::isfinite(x.f)) return false;
    if (!std::isfinite(y.f)) return true;
    return x.f < y.f;
  });
  if (!std::isfinite(optima.front().f)) throw Error("the fit did not converge from any starting point");
  const Theta best = optima.front().theta;
  r.law = law_of(best);
  r.residuals.assign(obs.size(), 0.0);
  Theta g(5);
  r.objective = objective(data, {}, delta, best, g, &r.residuals);

  // Distinct good optima seed the bootstrap refits (the full grid per resample
  // would cost the grid's time again per sample).
  std::vector<Theta> seeds;
  for (const auto& o : optima) {
    if (seeds.size() >= 12 || !std::isfinite(o.f)) break;
    bool distinct = true;
    for (const auto& s : seeds) {
      double d = 0;
      for (int k = 0; k < 5; ++k) d = std::max(d, std::fabs(s[k] - o.theta[k]));
      if (d < 1e-3) distinct = false;
    }
    if (distinct) seeds.push_back(o.theta);
  }

  if (options.bootstrap > 0) {
    std::mt19937_64 rng(options.seed);
    std::uniform_int_distribution<size_t> pick(0, obs.size() - 1);
    std::vector<std::array<double, 5>> samples;
    for (int b = 0; b < options.bootstrap; ++b) {
      std::vector<double> w(obs.size(), 0.0);
      std::set<size_t> distinct;
      std::set<double> ns, ds;
      for (size_t k = 0; k < obs.size(); ++k) {
        const size_t i = pick(rng);
        w[i] += 1;
        distinct.insert(i), ns.insert(obs[i].params), ds.insert(obs[i].tokens);
      }
      // A resample that cannot determine the five constants is drawn again.
      if (distinct.size() < 5 || ns.size() < 2 || ds.size() < 2) {
        --b;
        continue;
      }
      Optimum bestb{{}, INFINITY};
      for (const auto& s : seeds) {
        auto o = fit_from(data, w, delta, s);
        if (std::isfinite(o.f) && o.f < bestb.f) bestb = o;
      }
      if (std::isfinite(bestb.f)) samples.push_back(fields(law_of(bestb.theta)));
    }
    r.bootstrap_samples = static_cast<int>(samples.size());
    if (!samples.empty()) {
      std::array<double, 5> sig{}, lo{}, hi{};
      for (int k = 0; k < 5; ++k) {
        std::vector<double> v;
        for (const auto& s : samples) v.push_back(s[k]);
        std::sort(v.begin(), v.end());
        auto q = [&](double p) { return v[static_cast<size_t>(std::lround(p * static_cast<double>(v.size() - 1)))]; };
        sig[k] = 0.5 * (q(0.84) - q(0.16));
        lo[k] = q(0.05), hi[k] = q(0.95);
      }
      r.sigma = from_fields(sig), r.p05 = from_fields(lo), r.p95 = from_fields(hi);
    }
  }
  return r;
}

}  // namespace llmtrain
