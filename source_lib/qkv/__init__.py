"""qkv: the shared library of the qkv attention course."""
from qkv.threads import match_blas_threads as _match_blas_threads

_match_blas_threads()  # BLAS threads = CPUs the cgroup quota really grants (Binder shows many, grants ~1)

# Set in a kernel that no front end will display, such as the grader's: widgets skip drawing their pictures.
NO_FRONT_END = "QKV_NO_FRONT_END"

# In a notebook, every matplotlib figure is shown with its description as alt text (issue 44), whichever lesson
# draws it and whether or not it imports qkv.plots
from qkv.figure_display import show_figures_with_alt_text as _show_figures_with_alt_text  # noqa: E402

_show_figures_with_alt_text()
