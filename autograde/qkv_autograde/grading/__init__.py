"""Grading: nbgrader's preprocessors of the course (one job each, chained in nbgrader_config.py), the test
cells judged in the grader's process (verdicts), `nbgrader autograde` with the class-level steps (converter), and
`make grade` (grade_class) with its parallel workers, bulk gradebook writes and the Dask cluster's certificates.

The top of the grader: may import intake, kernels and reports; none of them imports grading.
"""
