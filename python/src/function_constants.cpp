// The one reader of Metal function constants from Python values, for em.metal.Kernel's options and the testing
// module's emulator hook (compiled into both extensions).
#include <cmath>

#include "common.h"

namespace ember::bind {

using metal::FunctionConstant;

// An int must fit the MSL type's range (it would otherwise wrap or become INT_MIN), a float must be finite
// (there is no MSL literal for NaN or inf, and a double past float's range becomes one).
FunctionConstant parse_function_constant(py::handle index, const std::string& type, py::handle value) {
  FunctionConstant c;
  const py::object idx = py::reinterpret_borrow<py::object>(index);
  EMBER_CHECK(py::isinstance<py::int_>(idx) && !py::isinstance<py::bool_>(idx) && idx.cast<long long>() >= 0 &&
                  idx.cast<long long>() <= 0xffff,
              Value, "[metal] a function constant's index must be an int in [0, 65535], got ", py::repr(idx).cast<std::string>());
  c.index = idx.cast<uint32_t>();
  const std::string shown = py::repr(value).cast<std::string>();
  auto integer = [&](long long lo, long long hi) {
    EMBER_CHECK(py::isinstance<py::int_>(value) ||
                    (py::isinstance<py::float_>(value) && std::isfinite(value.cast<double>()) &&
                     std::floor(value.cast<double>()) == value.cast<double>()),
                Value, "[metal] function constant ", c.index, " of type ", type, ": ", shown, " is not an integer");
    const py::int_ v = py::isinstance<py::int_>(value) ? py::reinterpret_borrow<py::int_>(value)
                                                       : py::int_(py::reinterpret_borrow<py::object>(value));
    const bool in = v >= py::int_(lo) && v <= py::int_(hi);
    EMBER_CHECK(in, Value, "[metal] function constant ", c.index, " of type ", type, ": ", shown,
                " is outside its range [", lo, ", ", hi, "]");
    return (double)v.cast<long long>();
  };
  if (type == "bool") {
    c.type = FunctionConstant::Type::Bool;
    c.value = integer(0, 1);
  } else if (type == "int") {
    c.type = FunctionConstant::Type::Int;
    c.value = integer(INT32_MIN, INT32_MAX);
  } else if (type == "uint") {
    c.type = FunctionConstant::Type::UInt;
    c.value = integer(0, UINT32_MAX);
  } else if (type == "float") {
    c.type = FunctionConstant::Type::Float;
    EMBER_CHECK(py::isinstance<py::float_>(value) || py::isinstance<py::int_>(value), Value, "[metal] function constant ",
                c.index, " of type float: ", shown, " is not a number");
    const double d = py::isinstance<py::int_>(value) ? py::float_(py::reinterpret_borrow<py::object>(value)).cast<double>()
                                                     : value.cast<double>();
    EMBER_CHECK(std::isfinite(d) && std::isfinite((float)d), Value, "[metal] function constant ", c.index,
                " of type float: ", shown, " is not a finite float (Metal has no literal for NaN or inf)");
    c.value = (float)d;
  } else {
    throw Error(ErrorKind::Value, "[metal] function constant type must be bool, int, uint or float, got " + type);
  }
  return c;
}

std::vector<FunctionConstant> parse_function_constants(const py::list& items, const char* who) {
  std::vector<FunctionConstant> out;
  for (const auto& item : items) {
    EMBER_CHECK(py::isinstance<py::tuple>(item) && (py::len(item) == 2 || py::len(item) == 3), Value, "[", who,
                "] a function constant is (index, value) or (index, type, value), got ",
                py::repr(item).cast<std::string>());
    const py::tuple t = py::reinterpret_borrow<py::tuple>(item);
    if (t.size() == 3) {
      out.push_back(parse_function_constant(t[0], t[1].cast<std::string>(), t[2]));
      continue;
    }
    // (index, value): the MSL type from the Python type (exactly bool, int or float, as options document).
    PyObject* v = t[1].ptr();
    const char* type = PyBool_Check(v) ? "bool" : PyLong_CheckExact(v) ? "int" : PyFloat_CheckExact(v) ? "float" : nullptr;
    const bool index_ok = PyLong_Check(t[0].ptr()) && !PyBool_Check(t[0].ptr()) && t[0].cast<py::int_>() >= py::int_(0);
    EMBER_CHECK(index_ok && type != nullptr, Type, "[", who, "] function constant ", py::repr(t[0]).cast<std::string>(),
                ": ", py::repr(t[1]).cast<std::string>(), " must be an index >= 0 and a bool, int or float");
    out.push_back(parse_function_constant(t[0], type, t[1]));
  }
  return out;
}

}  // namespace ember::bind
