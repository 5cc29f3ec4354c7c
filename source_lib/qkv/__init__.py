"""qkv: the shared library of the qkv attention course."""
from qkv.threads import match_blas_threads as _match_blas_threads

_match_blas_threads()  # BLAS threads = CPUs the cgroup quota really grants (Binder shows many, grants ~1)
