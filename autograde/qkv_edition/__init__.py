"""The student edition of the course (issue 33), instructor side only: never shipped (like qkv_autograde, qkv_grading).

- fixtures: records what the visible checks of a lesson ask of the functions an edition withholds;
- library: writes the student build of `qkv` (withheld functions replaced by stubs that replay those fixtures);
- library: what it withholds is declared in qkv_autograde.kernels.holdings, which the grader's kernel view reads too;
- probe: tries everything an edition holds as the answer to each open exercise's hidden test (probe_exercises: the
  hidden tests and how they call the student's functions; probe_kernel: the sandboxed kernel holding the candidates);
- reading: whether any text or git blob an edition ships reads as an open exercise's reference;
- build: `make student-edition`, the repository an instructor publishes for a graded class.
"""
