"""Reports: what grading leaves for people. Feedback pages and their exporter, grades.csv and the LMS grade files,
the anomaly report, hand scores kept with the answer they were given for, item analysis and copy detection.

May import intake (student names, staging notes, history); never kernels or grading: a report reads what a run
left behind, it does not run anything.
"""
