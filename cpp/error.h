// Error: the one exception type the core throws; its kind picks the Python class (EmberError subclasses).
#pragma once
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace ember {

// Interrupted: the op stopped at a Ctrl-C (see cpu/parallel.h); the binding raises KeyboardInterrupt.
// Type: a value of the wrong Python type (EmberTypeError); DType is for dtype problems only.
enum class ErrorKind { Value, Shape, DType, Device, Index, Unsupported, Memory, Interrupted, Type };

struct Error : std::runtime_error {
  ErrorKind kind;
  Error(ErrorKind k, const std::string& msg) : std::runtime_error(msg), kind(k) {}
};

inline std::string shape_str(const std::vector<int64_t>& s) {
  std::ostringstream o;
  o << "(";
  for (size_t i = 0; i < s.size(); ++i) o << (i ? ", " : "") << s[i];
  if (s.size() == 1) o << ",";
  o << ")";
  return o.str();
}

template <typename... Args> std::string cat_str(const Args&... args) {
  std::ostringstream o;
  (o << ... << args);
  return o.str();
}

}  // namespace ember

// EMBER_CHECK(cond, kind, "[op] message", ...): throws ember::Error with the concatenated message.
#define EMBER_CHECK(cond, kind, ...) \
  do {                               \
    if (!(cond)) throw ::ember::Error(::ember::ErrorKind::kind, ::ember::cat_str(__VA_ARGS__)); \
  } while (0)
