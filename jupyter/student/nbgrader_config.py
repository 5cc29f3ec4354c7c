# The students' nbgrader configuration: nothing to set. Its presence on JUPYTER_CONFIG_PATH stops nbgrader's
# Validate button from logging "No nbgrader_config.py file found" in a folder of notebooks that has none.
