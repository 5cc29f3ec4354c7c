"""The student edition of the course (issue 33), instructor side only: never shipped (like qkv_autograde, qkv_grading).

- fixtures: records what the visible checks of a lesson ask of the functions an edition withholds;
- library: writes the student build of `qkv` (withheld functions replaced by stubs that replay those fixtures);
- probe: tries everything an edition holds as the answer to each open exercise's hidden test;
- build: `make student-edition`, the repository an instructor publishes for a graded class.
"""
