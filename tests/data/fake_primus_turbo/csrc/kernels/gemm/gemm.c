/* primus_turbo.pytorch._C (C, Python C API): C[M,N] = A[M,K] @ B[N,K]^T in float32
 * on raw pointers (the Python side passes tensor.data_ptr()). */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "gemm_config.h"

/* The widest vectors the running CPU has, chosen when the library loads (the build
 * may run on another machine than the worker): on x86-64 AVX2 more than halves the
 * time of this loop, which is most of a CPU pass of the rebuild tests. */
#if defined(__GNUC__) && defined(__x86_64__)
__attribute__((target_clones("avx2", "default")))
#endif
static void matmul_nt(const float *a, const float *b, float *c, long m, long n, long k) {
    for (int sweep = 0; sweep < PT_FIXTURE_SWEEPS; ++sweep) {
        for (long i = 0; i < m; ++i) {
            for (long j = 0; j < n; ++j) {
                const float *ra = a + i * k, *rb = b + j * k;
                float acc = 0.0f;
                for (long p = 0; p < k; ++p) acc += ra[p] * rb[p];
                c[i * n + j] = acc;
            }
        }
        __asm__ volatile("" ::: "memory"); /* every sweep is real work */
    }
}

static PyObject *py_matmul_nt(PyObject *self, PyObject *args) {
    unsigned long long a, b, c;
    long m, n, k;
    if (!PyArg_ParseTuple(args, "KKKlll", &a, &b, &c, &m, &n, &k)) return NULL;
    Py_BEGIN_ALLOW_THREADS
    matmul_nt((const float *)a, (const float *)b, (float *)c, m, n, k);
    Py_END_ALLOW_THREADS
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"matmul_nt", py_matmul_nt, METH_VARARGS,
     "matmul_nt(a_ptr, b_ptr, c_ptr, m, n, k): C = A @ B^T, float32, contiguous"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_C", NULL, -1, methods};

PyMODINIT_FUNC PyInit__C(void) {
    PyObject *mod = PyModule_Create(&module);
    if (mod == NULL) return NULL;
    PyModule_AddIntConstant(mod, "HAS_CUDA", 0);
    PyModule_AddIntConstant(mod, "SWEEPS", PT_FIXTURE_SWEEPS);
    return mod;
}
