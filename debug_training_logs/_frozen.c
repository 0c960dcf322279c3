/* The positional constructor of frozen slotted dataclasses in C (see debug_training_logs/frozen.py).

new(cls, members, *values): a new instance of ``cls`` with the slot of each member descriptor in ``members`` (a
tuple, one per field, in field order) set to the value at the same place. What a packed scan result is read back
with: the Python constructor costs a call and a descriptor call per field for each object (most of the time of
reading a file's NCCL lines and evidence hits back in the main process); this costs one allocation. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>

static PyObject *frozen_new(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    if (nargs < 2 || !PyType_Check(args[0]) || !PyTuple_CheckExact(args[1])) {
        PyErr_SetString(PyExc_TypeError, "new(cls, members, *values)");
        return NULL;
    }
    PyTypeObject *tp = (PyTypeObject *)args[0];
    PyObject *members = args[1];
    Py_ssize_t n = PyTuple_GET_SIZE(members);
    if (nargs - 2 != n) {
        PyErr_Format(PyExc_TypeError, "%s takes %zd values (%zd given)", tp->tp_name, n, nargs - 2);
        return NULL;
    }
    for (Py_ssize_t i = 0; i < n; i++) { /* checked before anything is made: a slot of this class, holding an object */
        PyObject *d = PyTuple_GET_ITEM(members, i);
        if (!Py_IS_TYPE(d, &PyMemberDescr_Type) || !PyType_IsSubtype(tp, PyDescr_TYPE(d)) ||
            ((PyMemberDescrObject *)d)->d_member->type != T_OBJECT_EX ||
            (((PyMemberDescrObject *)d)->d_member->flags & READONLY)) {
            PyErr_SetString(PyExc_TypeError, "members must be writable object slots of cls");
            return NULL;
        }
    }
    PyObject *obj = tp->tp_alloc(tp, 0); /* slots start NULL */
    if (obj == NULL) {
        return NULL;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyMemberDef *m = ((PyMemberDescrObject *)PyTuple_GET_ITEM(members, i))->d_member;
        PyObject **slot = (PyObject **)((char *)obj + m->offset);
        PyObject *old = *slot;
        Py_INCREF(args[i + 2]);
        *slot = args[i + 2];
        Py_XDECREF(old);
    }
    return obj;
}

/* reduce(make, members, obj): (make, (the value of each member's slot of obj, in order)), what pickle saves an
instance as (its dispatch table's entry for the class, a partial of this with the class's constructor and members):
one C call per object where a generated Python function cost a frame and an attribute read per field. */
static PyObject *frozen_reduce(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    if (nargs != 3 || !PyTuple_CheckExact(args[1])) {
        PyErr_SetString(PyExc_TypeError, "reduce(make, members, obj)");
        return NULL;
    }
    PyObject *members = args[1], *obj = args[2];
    Py_ssize_t n = PyTuple_GET_SIZE(members);
    PyObject *values = PyTuple_New(n);
    if (values == NULL) {
        return NULL;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *d = PyTuple_GET_ITEM(members, i);
        PyObject *v;
        if (Py_IS_TYPE(d, &PyMemberDescr_Type) && ((PyMemberDescrObject *)d)->d_member->type == T_OBJECT_EX &&
            PyObject_TypeCheck(obj, PyDescr_TYPE(d))) {
            v = *(PyObject **)((char *)obj + ((PyMemberDescrObject *)d)->d_member->offset);
            if (v == NULL) {
                PyErr_Format(PyExc_AttributeError, "'%s' object has an unset slot", Py_TYPE(obj)->tp_name);
                Py_DECREF(values);
                return NULL;
            }
            Py_INCREF(v);
        } else { /* any other descriptor: read as Python would */
            v = Py_TYPE(d)->tp_descr_get != NULL ? Py_TYPE(d)->tp_descr_get(d, obj, (PyObject *)Py_TYPE(obj)) : NULL;
            if (v == NULL) {
                if (!PyErr_Occurred()) {
                    PyErr_SetString(PyExc_TypeError, "members must be descriptors");
                }
                Py_DECREF(values);
                return NULL;
            }
        }
        PyTuple_SET_ITEM(values, i, v);
    }
    PyObject *out = PyTuple_Pack(2, args[0], values);
    Py_DECREF(values);
    return out;
}

static PyMethodDef methods[] = {
    {"new", (PyCFunction)(void (*)(void))frozen_new, METH_FASTCALL,
     "new(cls, members, *values): cls's instance with each member descriptor's slot set to its value"},
    {"reduce", (PyCFunction)(void (*)(void))frozen_reduce, METH_FASTCALL,
     "reduce(make, members, obj): (make, the value of each member descriptor's slot of obj)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_frozen", NULL, -1, methods, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__frozen(void) { return PyModule_Create(&module); }
