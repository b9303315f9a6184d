// Bindings for Storage / CpuStorage: metadata, version counter, and zero-copy numpy access.
#include <cstring>
#include <optional>

#include "common.h"
#include "storage.h"

namespace ember::bind {
namespace {

using cpu::CpuStorage;

// numpy dtype for an ember dtype; bfloat16 is ml_dtypes.bfloat16 (a dependency of ember).
py::dtype np_dtype(DType dt) {
  switch (dt) {
    case DType::F32: return py::dtype::of<float>();
    case DType::F64: return py::dtype::of<double>();
    case DType::F16: return py::dtype("float16");
    case DType::BF16: {
      // Leaked on purpose: a static py::object would be released after the interpreter is gone.
      static PyObject* bf = py::object(py::module_::import("ml_dtypes").attr("bfloat16")).release().ptr();
      return py::dtype::from_args(py::reinterpret_borrow<py::object>(bf));
    }
    case DType::I64: return py::dtype::of<int64_t>();
    case DType::U32: return py::dtype::of<uint32_t>();
    case DType::U8: return py::dtype::of<uint8_t>();
    case DType::I32: return py::dtype::of<int32_t>();
    case DType::Bool: return py::dtype::of<bool>();
  }
  return py::dtype::of<float>();
}

// The base object of a writable view: keeps the storage alive and counts the view open until numpy
// drops the last array that uses it (slices of the view keep it too), so autograd sees the writes.
py::capsule writable_base(std::shared_ptr<BackendStorage> s) {
  s->open_writable_view();
  return py::capsule(new std::shared_ptr<BackendStorage>(std::move(s)), [](void* p) {
    auto* sp = static_cast<std::shared_ptr<BackendStorage>*>(p);
    (*sp)->close_writable_view();
    delete sp;
  });
}

// Strided view of (s, l) that keeps `owner` (the Python storage object) alive; a writable one has a
// writable_base instead.
py::array view(const py::object& owner, const Layout& l, bool writable, const char* op) {
  auto sp = owner.cast<std::shared_ptr<CpuStorage>>();
  const CpuStorage& s = *sp;
  check_in_bounds(s, l, op);  // rank, dims and reach, as every kernel entry point checks
  const ssize_t isz = (ssize_t)itemsize(s.dtype());
  std::vector<ssize_t> shape(l.shape().begin(), l.shape().end()), strides;
  for (auto st : l.stride()) strides.push_back(st * isz);
  char* ptr = static_cast<char*>(s.raw()) + (l.numel() ? l.offset() * isz : 0);
  if (writable) return py::array(np_dtype(s.dtype()), shape, strides, ptr, writable_base(std::move(sp)));
  py::array a(np_dtype(s.dtype()), shape, strides, ptr, owner);
  // Clear the flag through the C API: going through a.flags.writeable is a Python call per view.
  py::detail::array_proxy(a.ptr())->flags &= ~py::detail::npy_api::NPY_ARRAY_WRITEABLE_;
  return a;
}

// The storage an in-place custom op is mutating on this thread: its as_numpy views default to
// writable, every other storage's to read-only. Thread-local, so concurrent ops never interfere.
thread_local const BackendStorage* t_inplace_target = nullptr;
// The further storages a many-input em.CustomOp declares it mutates (mutates=(0, 2)), same rule.
thread_local std::vector<const BackendStorage*> t_inplace_more;

bool is_inplace_target(const BackendStorage* s) {
  if (s == t_inplace_target) return true;
  for (const BackendStorage* t : t_inplace_more)
    if (t == s) return true;
  return false;
}

// DLPack export callbacks as plain C functions. A consumer may call the deleter (or drop the capsule)
// while a Python exception is pending, e.g. numpy refusing bfloat16: running Python code then (a
// ctypes callback) swallowed that exception and numpy raised SystemError. These set the pending
// exception aside around the Python release function that interop.py registers.
PyObject* g_dl_release = nullptr;  // interop's release(address); leaked on purpose, like error_class

void dl_release(void* managed) {
  PyGILState_STATE gil = PyGILState_Ensure();
  PyObject *type, *value, *tb;
  PyErr_Fetch(&type, &value, &tb);
  if (g_dl_release) {
    PyObject* r = PyObject_CallFunction(g_dl_release, "K", (unsigned long long)(uintptr_t)managed);
    if (!r) PyErr_WriteUnraisable(g_dl_release);
    Py_XDECREF(r);
  }
  PyErr_Restore(type, value, tb);
  PyGILState_Release(gil);
}

void dl_capsule_destructor(PyObject* cap) {
  // Only an unconsumed capsule still owns the export (consumers rename it "used_...").
  const char* name = PyCapsule_GetName(cap);
  if (name && (!std::strcmp(name, "dltensor") || !std::strcmp(name, "dltensor_versioned")))
    dl_release(PyCapsule_GetPointer(cap, name));
}

}  // namespace

void bind_storage(py::module_& m) {
  m.def("_dlpack_callbacks", [](py::object release) {
    Py_XDECREF(g_dl_release);
    g_dl_release = release.release().ptr();
    return py::make_tuple((uintptr_t)&dl_release, (uintptr_t)&dl_capsule_destructor);
  }, "Registers interop's release(address); returns the addresses of the C deleter and capsule destructor.");

  py::class_<BackendStorage, std::shared_ptr<BackendStorage>>(m, "Storage",
                                                              "A flat buffer of elements of one dtype on one device; tensors read it through a Layout.")
      .def_property_readonly("dtype_code", [](const BackendStorage& s) { return (int)s.dtype(); },
                             "The element type's code (an index into em.ALL_DTYPES); .dtype gives the em.DType.")
      .def_property_readonly("device_kind", [](const BackendStorage& s) { return (int)s.device().kind; },
                             "The device kind's code (0 cpu, 1 metal, 2 cuda); .device gives the em.Device.")
      .def_property_readonly("device_index", [](const BackendStorage& s) { return s.device().index; },
                             "The index of the device among those of its kind.")
      .def_property_readonly("numel", &BackendStorage::numel, "The number of elements the buffer holds.")
      .def_property_readonly("version", &BackendStorage::version,
                             "The in-place write counter autograd checks: every in-place write bumps it.")
      // What autograd reads when it records the storage for backward: the version, and a mark that
      // makes DLPack exports of this buffer read-only.
      .def_property_readonly("saved_version", [](BackendStorage& s) {
        s.mark_saved();
        return s.version();
      }, "The version, read by autograd when it saves this storage; marks it saved (DLPack exports become read-only).")
      .def_property_readonly("saved", &BackendStorage::saved, "True once autograd has saved this storage for a backward.")
      .def("bump_version", &BackendStorage::bump_version,
           "Records an in-place write, so a later backward through a saved view of this buffer raises.")
      .def("same_buffer", &BackendStorage::same_buffer, py::arg("other"),
           "True when other shares memory with this storage (the same or overlapping buffers).");

  // Sets this thread's in-place target (None clears it) and returns the previous one, so nested
  // in-place ops restore it.
  m.def("_set_inplace_target", [](std::shared_ptr<BackendStorage> s) {
    const BackendStorage* prev = t_inplace_target;
    t_inplace_target = s.get();
    return (uintptr_t)prev;
  }, py::arg("storage").none(true));
  m.def("_restore_inplace_target", [](uintptr_t prev) {
    t_inplace_target = reinterpret_cast<const BackendStorage*>(prev);
  });
  // Adds storages to this thread's further in-place targets; returns the count before, which
  // _pop_inplace_targets restores (the storages stay alive: the caller holds them during the call).
  m.def("_push_inplace_targets", [](const std::vector<std::shared_ptr<BackendStorage>>& ss) {
    const size_t before = t_inplace_more.size();
    for (const auto& s : ss) t_inplace_more.push_back(s.get());
    return before;
  });
  m.def("_pop_inplace_targets", [](size_t n) {
    if (n < t_inplace_more.size()) t_inplace_more.resize(n);
  });

  py::class_<CpuStorage, BackendStorage, std::shared_ptr<CpuStorage>>(m, "CpuStorage",
                                                                      "A storage in host memory (64-byte aligned). A custom op's cpu_fwd "
                                                                      "receives its inputs as CpuStorages and returns a new one.")
      .def(
          "numpy", [](py::object self) {
            const auto& s = self.cast<const CpuStorage&>();
            return view(self, Layout::contiguous({s.numel()}), true, "numpy");
          },
          "Flat, writable, zero-copy view of the whole buffer. While it (or an array made from it) is "
          "alive, autograd treats the buffer as modified in place.")
      .def(
          "as_numpy",
          [](py::object self, const Layout& l, std::optional<bool> writable) {
            const auto& s = self.cast<const CpuStorage&>();
            return view(self, l, writable.value_or(is_inplace_target(&s)), "as_numpy");
          },
          py::arg("layout"), py::arg("writable") = py::none(),
          "Zero-copy strided view through a layout; read-only unless writable=True or this storage is "
          "the operand of the in-place op running on this thread. A writable view counts as an in-place "
          "write for autograd while it is alive.")
      .def("as_numpy", [](const py::object&, const py::args&, const py::kwargs&) -> py::object {
        EMBER_CHECK(false, Type, "[as_numpy] expected as_numpy(layout: Layout, writable: bool | None = None)");
      })
      .def_property_readonly("data_ptr", [](const CpuStorage& s) { return (uintptr_t)s.raw(); },
                             "The address of the first element, as an int (for ctypes or cffi kernels).")
      .def_property_readonly("nbytes", &CpuStorage::nbytes, "The size of the buffer in bytes.")
      .def_static(
          "_from_numpy_code",
          [](py::array arr, int code) {
            DType dt = to_dtype(code);
            EMBER_CHECK(arr.flags() & py::array::c_style, Value, "[from_numpy] expected a C-contiguous array");
            EMBER_CHECK((size_t)arr.itemsize() == itemsize(dt), DType, "[from_numpy] itemsize mismatch");
            auto s = cpu::new_cpu(dt, (int64_t)arr.size());
            std::memcpy(s->raw(), arr.data(), s->nbytes());
            return std::static_pointer_cast<BackendStorage>(s);
          },
          "Copies a C-contiguous array whose itemsize matches the dtype code.")
      .def_static(
          "_borrow",
          [](uintptr_t ptr, int64_t numel, int code, py::object keep_alive) {
            const DType dt = to_dtype(code);
            // The kernels read elements (and SIMD vectors of them) as typed loads: memory that is not
            // aligned to its element size would be undefined behaviour there. Callers copy instead.
            EMBER_CHECK(ptr % itemsize(dt) == 0, Value, "[borrow] address ", ptr, " is not aligned to the ",
                        itemsize(dt), "-byte elements of ", dtype_name(dt));
            EMBER_CHECK(numel >= 0, Value, "[borrow] negative element count ", numel);
            // Zero-copy: the storage holds a reference to `keep_alive` until it dies.
            auto* ref = new py::object(std::move(keep_alive));
            auto release = [ref] {
              py::gil_scoped_acquire g;
              delete ref;
            };
            auto s = std::make_shared<CpuStorage>(dt, numel, reinterpret_cast<void*>(ptr), release);
            return std::static_pointer_cast<BackendStorage>(s);
          },
          "Wraps external memory without copying (DLPack / numpy).")
      .def_static(
          "_empty_code",
          [](int64_t n, int code) { return std::static_pointer_cast<BackendStorage>(cpu::new_cpu(to_dtype(code), n)); });
}

}  // namespace ember::bind
