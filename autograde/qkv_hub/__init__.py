"""The course on a JupyterHub (issue 42), instructor side only: `make hub-setup INSTRUCTOR=<user>`, run as root.

- hub_setup: the command; checks, then each step, saying what it did (safe to run again);
- shared_env: what every user's server runs, under PREFIX (the environment, the students' qkv, the kernel spec, the
  students' Jupyter settings, the model);
- lockdown: the instructor's course folder, readable by the instructor alone, and the table of who reads what.
"""
