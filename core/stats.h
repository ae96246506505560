// Small numeric helpers the fits and reports share: the median of a sample, and R² (the
// coefficient of determination) of fitted values against measured ones.
#pragma once

#include <vector>

namespace loom {

// The middle value (the mean of the two middle ones for an even count); 0 for no values.
double median(std::vector<double> values);

// 1 − Σ(measured − fitted)² / Σ(measured − mean)²; 1 when the measured values do not vary.
// `fitted` has one value per measured one.
double r_squared(const std::vector<double>& measured, const std::vector<double>& fitted);

}  // namespace loom
