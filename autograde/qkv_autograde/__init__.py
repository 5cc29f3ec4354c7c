"""The qkv grader: `make grade` (grading/grade_class.py) and the nbgrader preprocessors it shares with
`nbgrader autograde`, in four parts that import one way (tests/test_library_structure.py holds it):

    intake   what students hand in, to nbgrader's submitted/        imports no other part
    kernels  the student's code, sandboxed, called as plain data    imports no other part
    reports  feedback, grade files, anomaly report, item analysis   imports intake
    grading  preprocessors, verdicts, make grade, workers, Dask     imports intake, kernels, reports
"""
import sys
import time

STARTED = time.monotonic()  # make grade's start-up, printed in its summary, is measured from here

# nbformat imports jsonschema, which builds an Earley parser for the "iri" formats at import whenever rfc3987_syntax
# is installed (jupyter-events asks for it): 2.9 of the 3.2 s nbformat took to import on the course's 2-core
# machine, for two formats no notebook or nbgrader schema uses. Without it, jsonschema leaves those two unchecked.
sys.modules.setdefault("rfc3987_syntax", None)
