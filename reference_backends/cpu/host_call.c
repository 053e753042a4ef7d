/* torchvendor_cpu: calling a generated kernel from Python without ctypes (built with the package
 * as torchvendor.reference_backends.cpu._host_call; toolchain.py falls back to ctypes without it).
 *
 * A HostCall is one exported kernel `int32_t name(const void* launch, void* args)` (codegen.py):
 * called as kernel(*tensors, *sizes), it writes each tensor's data pointer and each size into
 * an argument block on the stack and calls the kernel; a nonzero status calls the Python
 * `on_error(status)` given at bind time, which raises. Through ctypes the same call costs about
 * a microsecond more (argument conversion, a struct packed in Python): a small model's
 * partition makes a dozen such calls per step. Data pointers come from torch's own C helper
 * (the one Inductor's C++ kernel bindings use) for exact Tensor/Parameter objects, else from
 * `data_ptr()`. The GIL is held: the kernels are short, and OpenMP threads need no GIL.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stddef.h>
#include <stdint.h>

#define TV_MAX_ARGS 128

typedef int32_t (*tv_kernel)(const void*, void*);
typedef void* (*tv_data_ptr)(PyObject*);

static tv_data_ptr data_ptr_of = NULL;
static PyTypeObject* exact_types[2] = {NULL, NULL};
static PyObject* loader = NULL;

typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    tv_kernel fn;
    Py_ssize_t n_buffers;
    PyObject* name;
    PyObject* on_error;
    PyObject* keepalive;
} HostCall;

static int pointer_of(PyObject* t, int64_t* out) {
    PyTypeObject* tp = Py_TYPE(t);
    if (data_ptr_of != NULL && (tp == exact_types[0] || tp == exact_types[1])) {
        *out = (int64_t)(intptr_t)data_ptr_of(t);
        return 0;
    }
    PyObject* p = PyObject_CallMethod(t, "data_ptr", NULL);
    if (p == NULL) return -1;
    *out = (int64_t)(intptr_t)PyLong_AsVoidPtr(p);
    Py_DECREF(p);
    return PyErr_Occurred() ? -1 : 0;
}

static PyObject* host_call(PyObject* self_, PyObject* const* args, size_t nargsf, PyObject* kwnames) {
    HostCall* self = (HostCall*)self_;
    Py_ssize_t n = PyVectorcall_NARGS(nargsf);
    int64_t block[TV_MAX_ARGS];
    if (self->fn == NULL) {
        PyErr_Format(PyExc_RuntimeError, "kernel %U: its library is not loaded yet (call load(path) first)", self->name);
        return NULL;
    }
    if ((kwnames != NULL && PyTuple_GET_SIZE(kwnames) > 0) || n < self->n_buffers || n > TV_MAX_ARGS) {
        PyErr_Format(PyExc_TypeError, "kernel %U takes its %zd buffers, then its sizes, positionally (at most %d "
                     "arguments); got %zd", self->name, self->n_buffers, TV_MAX_ARGS, n);
        return NULL;
    }
    for (Py_ssize_t i = 0; i < self->n_buffers; ++i)
        if (pointer_of(args[i], &block[i]) < 0) return NULL;
    for (Py_ssize_t i = self->n_buffers; i < n; ++i) {
        block[i] = PyLong_AsLongLong(args[i]);
        if (block[i] == -1 && PyErr_Occurred()) return NULL;
    }
    int32_t status = self->fn(NULL, block);
    if (status == 0) Py_RETURN_NONE;
    PyObject* r = PyObject_CallFunction(self->on_error, "i", (int)status);
    Py_XDECREF(r);
    if (!PyErr_Occurred())
        PyErr_Format(PyExc_RuntimeError, "kernel %U failed with status %d", self->name, (int)status);
    return NULL;
}

static PyObject* HostCall_new(PyTypeObject* type, PyObject* args, PyObject* kwargs) {
    (void)kwargs;
    PyObject* name;
    Py_ssize_t n_buffers;
    if (!PyArg_ParseTuple(args, "Un:HostCall", &name, &n_buffers)) return NULL;
    if (n_buffers < 0 || n_buffers > TV_MAX_ARGS) {
        PyErr_Format(PyExc_ValueError, "kernel %U: %zd buffers (at most %d)", name, n_buffers, TV_MAX_ARGS);
        return NULL;
    }
    HostCall* self = (HostCall*)type->tp_alloc(type, 0);
    if (self == NULL) return NULL;
    self->vectorcall = host_call;
    self->fn = NULL;
    self->n_buffers = n_buffers;
    Py_INCREF(name);
    self->name = name;
    self->on_error = NULL;
    self->keepalive = NULL;
    return (PyObject*)self;
}

static void HostCall_dealloc(HostCall* self) {
    Py_XDECREF(self->name);
    Py_XDECREF(self->on_error);
    Py_XDECREF(self->keepalive);
    Py_TYPE(self)->tp_free((PyObject*)self);
}

/* bind(address, on_error, keepalive): the kernel's address in a loaded library (kept alive). */
static PyObject* HostCall_bind(HostCall* self, PyObject* args) {
    unsigned long long address;
    PyObject *on_error, *keepalive;
    if (!PyArg_ParseTuple(args, "KOO:bind", &address, &on_error, &keepalive)) return NULL;
    Py_INCREF(on_error);
    Py_INCREF(keepalive);
    Py_XDECREF(self->on_error);
    Py_XDECREF(self->keepalive);
    self->on_error = on_error;
    self->keepalive = keepalive;
    self->fn = (tv_kernel)(uintptr_t)address;
    Py_RETURN_NONE;
}

/* load(path): the Python loader set by configure() opens the library and calls bind. */
static PyObject* HostCall_load(HostCall* self, PyObject* path) {
    if (loader == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "host_call.configure() was not called");
        return NULL;
    }
    return PyObject_CallFunctionObjArgs(loader, (PyObject*)self, path, NULL);
}

static PyObject* HostCall_get_name(HostCall* self, void* closure) {
    (void)closure;
    Py_INCREF(self->name);
    return self->name;
}

/* native(device, sizes): the kernel's native form for the SDK runner's C++ replay
 * (torchvendor.sdk.compile.runner_replay): one host launch of the same entry and error report. */
static PyObject* HostCall_native(HostCall* self, PyObject* args) {
    PyObject *device, *sizes;
    if (!PyArg_ParseTuple(args, "OO:native", &device, &sizes)) return NULL;
    if (self->fn == NULL) Py_RETURN_NONE;
    return Py_BuildValue("(((N()()i()()iOO))())", PyLong_FromVoidPtr((void*)self->fn), 0, 0, Py_None,
                         self->on_error != NULL ? self->on_error : Py_None);
}

static PyMethodDef HostCall_methods[] = {
    {"native", (PyCFunction)HostCall_native, METH_VARARGS, "native(device, sizes): (launches, scratch)"},
    {"bind", (PyCFunction)HostCall_bind, METH_VARARGS, "bind(address, on_error, keepalive)"},
    {"load", (PyCFunction)HostCall_load, METH_O, "load(path): open the kernel's shared library"},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef HostCall_getset[] = {
    {"name", (getter)HostCall_get_name, NULL, "the kernel's exported name", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject HostCallType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "torchvendor.reference_backends.cpu._host_call.HostCall",
    .tp_basicsize = sizeof(HostCall),
    .tp_dealloc = (destructor)HostCall_dealloc,
    .tp_vectorcall_offset = offsetof(HostCall, vectorcall),
    .tp_call = PyVectorcall_Call,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_doc = "HostCall(name, n_buffers): a generated kernel, called as kernel(*tensors, *sizes)",
    .tp_methods = HostCall_methods,
    .tp_getset = HostCall_getset,
    .tp_new = HostCall_new,
};

/* configure(data_ptr_address or 0, tensor_type, parameter_type, loader) */
static PyObject* configure(PyObject* module, PyObject* args) {
    (void)module;
    unsigned long long address;
    PyObject *tensor, *parameter, *load;
    if (!PyArg_ParseTuple(args, "KO!O!O:configure", &address, &PyType_Type, &tensor, &PyType_Type, &parameter, &load))
        return NULL;
    data_ptr_of = (tv_data_ptr)(uintptr_t)address;
    Py_INCREF(tensor);
    Py_INCREF(parameter);
    Py_INCREF(load);
    exact_types[0] = (PyTypeObject*)tensor;
    exact_types[1] = (PyTypeObject*)parameter;
    Py_XDECREF(loader);
    loader = load;
    Py_RETURN_NONE;
}

static PyMethodDef module_methods[] = {
    {"configure", configure, METH_VARARGS, "configure(data_ptr_address, Tensor, Parameter, loader)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {PyModuleDef_HEAD_INIT, "_host_call", NULL, -1, module_methods, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__host_call(void) {
    if (PyType_Ready(&HostCallType) < 0) return NULL;
    PyObject* m = PyModule_Create(&module_def);
    if (m == NULL) return NULL;
    Py_INCREF(&HostCallType);
    if (PyModule_AddObject(m, "HostCall", (PyObject*)&HostCallType) < 0) {
        Py_DECREF(&HostCallType);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
