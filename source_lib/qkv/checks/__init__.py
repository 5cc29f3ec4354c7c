"""Visible checks, one module per lesson: fixed, readable examples with targeted hints.

Each function takes the student's function, runs it against the reference in qkv and raises
qkv.checking.Hint saying what is probably wrong. The known mistakes (`*_MISTAKES`) are shared with
the instructor's hidden tests so that a hidden failure gets the same explanation.
"""
