// Typed, validated field access for Loom's JSON readers (core/, and the planner's validation files).
// Collects the first error so a reader can check many fields and report one clear line.
#pragma once

#include <cmath>
#include <limits>
#include <optional>
#include <string>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace loom {

class FieldReader {
 public:
  FieldReader(const nlohmann::ordered_json& json, std::string what) : json_(json), what_(std::move(what)) {
    if (!json_.is_object()) fail(fmt::format("{}: expected a JSON object", what_));
  }

  bool has(const char* key) const { return json_.is_object() && json_.contains(key) && !json_[key].is_null(); }

  // Integer in [min, max]; absent → fallback (or an error when required).
  long long integer(const char* key, std::optional<long long> fallback, long long min = 1,
                    long long max = std::numeric_limits<int>::max()) {
    if (!ok()) return 0;
    if (!has(key)) {
      if (!fallback) fail(fmt::format("{}: missing field '{}'", what_, key));
      return fallback.value_or(0);
    }
    const auto& v = json_[key];
    double x = 0;
    if (v.is_number_integer() || v.is_number_unsigned()) {
      x = v.get<double>();
    } else if (v.is_number_float() && std::floor(v.get<double>()) == v.get<double>()) {
      x = v.get<double>();
    } else {
      fail(fmt::format("{}: '{}' must be an integer", what_, key));
      return 0;
    }
    if (x < static_cast<double>(min) || x > static_cast<double>(max)) {
      fail(fmt::format("{}: '{}' = {} is out of range [{}, {}]", what_, key, v.dump(), min, max));
      return 0;
    }
    return static_cast<long long>(x);
  }

  double number(const char* key, std::optional<double> fallback, double min = 0.0,
                double max = std::numeric_limits<double>::max()) {
    if (!ok()) return 0;
    if (!has(key)) {
      if (!fallback) fail(fmt::format("{}: missing field '{}'", what_, key));
      return fallback.value_or(0);
    }
    const auto& v = json_[key];
    if (!v.is_number()) {
      fail(fmt::format("{}: '{}' must be a number", what_, key));
      return 0;
    }
    const double x = v.get<double>();
    if (!std::isfinite(x) || x < min || x > max) {
      fail(fmt::format("{}: '{}' = {} is out of range [{}, {}]", what_, key, v.dump(), min, max));
      return 0;
    }
    return x;
  }

  std::string string(const char* key, std::optional<std::string> fallback) {
    if (!ok()) return {};
    if (!has(key)) {
      if (!fallback) fail(fmt::format("{}: missing field '{}'", what_, key));
      return fallback.value_or("");
    }
    if (!json_[key].is_string()) {
      fail(fmt::format("{}: '{}' must be a string", what_, key));
      return {};
    }
    return json_[key].get<std::string>();
  }

  bool boolean(const char* key, std::optional<bool> fallback) {
    if (!ok()) return false;
    if (!has(key)) {
      if (!fallback) fail(fmt::format("{}: missing field '{}'", what_, key));
      return fallback.value_or(false);
    }
    if (!json_[key].is_boolean()) {
      fail(fmt::format("{}: '{}' must be true or false", what_, key));
      return false;
    }
    return json_[key].get<bool>();
  }

  void fail(std::string message) {
    if (ok()) error_ = std::move(message);
  }
  bool ok() const { return error_.empty(); }
  const std::string& error() const { return error_; }
  const std::string& what() const { return what_; }

 private:
  const nlohmann::ordered_json& json_;
  std::string what_;
  std::string error_;
};

}  // namespace loom
