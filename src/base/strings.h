#pragma once
// Small text helpers every layer uses: one join, one fixed-point number format.
#include <string>
#include <vector>

namespace autooptim::base {

// "a, b, c" (or with `sep`); "" for an empty list.
std::string join(const std::vector<std::string>& items, const std::string& sep = ", ");

// `value` with `decimals` digits after the point ("1.50"); "nan"/"inf" as printf writes them.
std::string format_fixed(double value, int decimals);

}  // namespace autooptim::base
