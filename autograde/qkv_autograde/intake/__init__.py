"""Intake: from what students hand in (an LMS export, nbgrader's exchange) to nbgrader's
`submitted/<student>/<lesson>/<notebook>.ipynb`, and the history of every submission.

Owns unpacking archives safely (extractor), whose file is whose (collector, lms_names), staging what nbgrader
grades within its limits (submissions), the LMS download as one step (lms_export) and history-<lesson>.jsonl.
Imports nothing else of qkv_autograde: what a student hands in is read before anything runs it.
"""
