// Errors as values: Result<T> holds either a value or an Error with a one-line message and a kind.
// Library code returns these; only the CLI/GUI boundary turns an Error into an exit status: bad
// input exits 2, an internal failure (Loom's own fault) exits 1.
#pragma once

#include <string>
#include <utility>
#include <variant>

namespace loom {

// Bad input is the caller's to fix (a malformed file, an impossible size); an internal error is a
// bug in Loom (an engine deadlock, a broken invariant) and is reported as such.
enum class ErrorKind { kBadInput, kInternal };

struct Error {
  std::string message;
  ErrorKind kind = ErrorKind::kBadInput;
  bool internal() const { return kind == ErrorKind::kInternal; }
};

template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : state_(std::move(value)) {}      // NOLINT(google-explicit-constructor)
  Result(Error error) : state_(std::move(error)) {}  // NOLINT(google-explicit-constructor)

  bool ok() const { return std::holds_alternative<T>(state_); }
  explicit operator bool() const { return ok(); }

  const T& value() const& { return std::get<T>(state_); }
  T& value() & { return std::get<T>(state_); }
  T&& value() && { return std::get<T>(std::move(state_)); }
  const T& operator*() const& { return value(); }
  T& operator*() & { return value(); }
  const T* operator->() const { return &value(); }
  T* operator->() { return &value(); }

  const Error& error() const { return std::get<Error>(state_); }

 private:
  std::variant<T, Error> state_;
};

// Result<void> equivalent.
class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(Error error) : error_(std::move(error)), ok_(false) {}  // NOLINT(google-explicit-constructor)
  bool ok() const { return ok_; }
  explicit operator bool() const { return ok_; }
  const Error& error() const { return error_; }

 private:
  Error error_;
  bool ok_ = true;
};

inline Error make_error(std::string message) { return Error{std::move(message), ErrorKind::kBadInput}; }
inline Error make_internal_error(std::string message) { return Error{std::move(message), ErrorKind::kInternal}; }
// The same kind of error with more context in front ("model.json: " + message).
inline Error prefix_error(const std::string& prefix, const Error& error) {
  return Error{prefix + error.message, error.kind};
}

}  // namespace loom
