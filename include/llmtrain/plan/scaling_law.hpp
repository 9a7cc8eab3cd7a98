// The parametric loss law of Hoffmann et al. 2022 (Chinchilla, approach 3),
// L(N, D) = E + A / N^alpha + B / D^beta, and its robust fit to measured runs.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace llmtrain {

struct ScalingLaw {
  double E = 1.69, A = 406.4, B = 410.7, alpha = 0.34, beta = 0.28;

  // Hoffmann et al. 2022, approach 3 (N = all parameters, D = training tokens).
  static ScalingLaw chinchilla() { return {}; }
  // Expected final loss (nats per token) of `params` parameters trained on `tokens` tokens.
  double loss(double params, double tokens) const;
  // "E=1.69 A=406.4 B=410.7 alpha=0.34 beta=0.28"
  std::string to_string() const;
  // Parses "E,A,B,alpha,beta" (five numbers); throws ConfigError naming what is wrong.
  static ScalingLaw parse(const std::string& text);
};

// One trained run: N (all parameters), D (tokens trained on), final loss.
struct LossObservation {
  double params = 0, tokens = 0, loss = 0;
  std::string source;  // where it came from (run-log path), for messages
};

struct FitOptions {
  double huber_delta = 1e-3;  // on log-loss residuals, as approach 3
  int bootstrap = 200;        // resamples over runs for the uncertainty (0 = none)
  uint64_t seed = 1234;       // of the bootstrap's resampling
};

struct FitResult {
  ScalingLaw law;            // the best fit over all starting points
  double objective = 0;      // sum of Huber(log L_pred - log L_obs) / delta at the optimum
  int starts = 0;            // starting points tried for the main fit
  std::vector<double> residuals;  // log L_pred - log L_obs per observation, in input order
  // Bootstrap over runs (resampled with replacement, each refit from the best
  // fit and the grid's best distinct optima). `sigma`: half the 16th..84th
  // percentile range of each constant (the standard deviation of a normal
  // spread, and robust to the few resamples whose A or B run off to huge values,
  // which make a plain standard deviation meaningless); p05 / p95: the 5th / 95th
  // percentiles. Zero when bootstrap = 0.
  int bootstrap_samples = 0;
  ScalingLaw sigma{0, 0, 0, 0, 0}, p05{0, 0, 0, 0, 0}, p95{0, 0, 0, 0, 0};
};

// Fits E, A, B, alpha, beta to `obs` as approach 3 does: parameters
// (a = log A, b = log B, e = log E, alpha, beta), prediction
// log L = logsumexp(a - alpha log N, b - beta log D, e), Huber loss (delta) on
// log L_pred - log L_obs, L-BFGS from a grid of starting points
// (alpha, beta in {0, 0.5, ..., 2}, e in {-1, -0.5, ..., 1.5}, a, b in {0, 5, ..., 25}),
// keeping the best. Throws Error when there are fewer observations than the
// five constants, or an observation is not positive and finite.
FitResult fit_scaling_law(const std::vector<LossObservation>& obs, const FitOptions& options = {});

}  // namespace llmtrain
