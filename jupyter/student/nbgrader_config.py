# The students' nbgrader configuration. Its presence on JUPYTER_CONFIG_PATH also stops nbgrader's Validate button
# from logging "No nbgrader_config.py file found" in a folder of notebooks that has none.
c = get_config()  # noqa: F821 - traitlets defines it when it loads this file

# Where no answer key is installed (the student edition), a self-check question's check cell can only record the
# answer: under Validate it says so on stderr (qkv.checking.questions), so Validate lists it with this heading
# (`nbgrader validate`; the Validate button shows each listed cell with what it printed).
c.Validator.failed_warning = (
    "VALIDATE LISTS {num_failed} CELL(S) BELOW. A self-check question is listed because its answer was recorded "
    "and is graded when the notebook is collected: Validate cannot tell whether it is right. Any other cell "
    "listed failed: fix it before you hand in, or it will not get full credit.\n")
