# The course's IPython kernels: `make install` and postBuild copy this file into the environment's etc/ipython/,
# where every kernel started from it reads it (qkv_edition/notebook_form.py says why and holds the notebooks' side).
# A kernel reports its language as Python major.minor, as the course's notebooks record it: JupyterLab writes the
# kernel's language_info into a notebook when it opens it, and a patch release (3.11.7 here, 3.11.2 there) that the
# notebook does not hold would mark an untouched notebook modified and rewrite it on autosave. Nothing reads the patch.
import sys

from ipykernel.ipkernel import IPythonKernel

IPythonKernel.language_info = {**IPythonKernel.language_info, "version": "%d.%d" % sys.version_info[:2]}
