"""Per-student self-check numbers (issue 43): what deriving them costs, how far apart students' answers are, and what
grading with variants on adds per submission. Prints figures; asserts nothing (tests/test_your_numbers*.py do).

    python bench/bench_your_numbers.py [--grading [LESSON] [N] [ROUNDS]]

- derivation: ms per question (the slowest question, the largest pool) and per student and lesson (A8: <= 1 ms per
  question);
- spread (A1): distinct right answers per varied question (drawn, of its pool's), the expected number of coinciding
  right answers for a random pair of students over the course's 28 self-checks and its 13 numeric ones, and P(a pair
  coincides on >= 10), in one line the closing note can quote;
- copiers (A2): a class of 1,000 whose second half copies the first half: the share of copiers the fit analysis
  names with their source, per lesson, and the share of the self-check points each keeps;
- grading overhead: the grader's extra work per submission with variants on (the true key, the numbers of every
  varied question, the recorded answers, the report's rows for a class of 200), in CPU ms, beside the grading CPU
  per submission that bench/bench_class_grading.py measures (A8: <= +2%);
- with --grading: that comparison measured, a class of N submissions of LESSON (default 03-scaling, 12) graded by
  `make grade`'s grader (bench_class_grading.parallel) with variants off and on, alternately (ROUNDS, default 2):
  the CPU seconds per submission (worker plus kernel) of each, and the ratio (A8: <= 1.02). The exchange's ids are
  the keys.
"""
import json
import os
import pathlib
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "autograde"))

from qkv.your_numbers import POOLS, derive, question_params  # noqa: E402
from qkv.your_numbers import shown_letter  # noqa: E402
from qkv_autograde.reports.variant_rows import Grader, fitting_classmates  # noqa: E402
from qkv_grading import expected_answer  # noqa: E402

SALT = "qkv-2026-autumn"
KEYS = [f"student{i:05d}" for i in range(2000)]
TOTAL_SELF_CHECKS = 28


def timed(fn, repeat):
    start = time.process_time()
    for _ in range(repeat):
        fn()
    return (time.process_time() - start) / repeat


def derivation():
    print("== derivation (CPU ms)")
    worst = max(((lesson, q) for lesson in POOLS for q in POOLS[lesson]), key=lambda lq: len(POOLS[lq[0]][lq[1]].rows))
    per_question = timed(lambda: question_params(*worst, "jsmith", SALT), 500) * 1e3
    print(f"slowest question {worst[0]}/{worst[1]} ({len(POOLS[worst[0]][worst[1]].rows)} variants): "
          f"{per_question:.3f} ms per student (budget 1 ms)")
    for lesson in POOLS:
        cost = timed(lambda lesson=lesson: derive(lesson, "jsmith", SALT), 200)
        print(f"  {lesson}: {cost * 1e3:.3f} ms per student, all "
              f"{len(POOLS[lesson])} questions")


def spread(keys=KEYS):
    """A1's figures over `keys`: per varied question the distinct right answers drawn (of its pool's), the largest
    share beside 2/V, the chance two students' right answers coincide; then the expected coincidences per pair over
    the 28 self-checks and the 13 numeric ones, and P(a pair coincides on >= 10 of 28)."""
    print("== spread (A1) over", len(keys), "keys, salt", SALT)
    distribution = [1.0]  # distribution[k]: P(k coinciding answers)
    expected = numeric = 0.0
    varied = 0
    for lesson, questions in POOLS.items():
        for q, pool in questions.items():
            counts = {}
            for key in keys:
                p = json.dumps(question_params(lesson, q, key, SALT))
                counts[p] = counts.get(p, 0) + 1
            if pool.names == ("order",):
                same = 0.25  # the right option at the same letter
                shown = f"choice, {len(counts)} of 24 orders drawn"
            else:
                same = sum((n / len(keys)) ** 2 for n in counts.values())
                numeric += same
                shown = (f"{len(counts)} of {len(pool.rows)} distinct answers drawn, largest share "
                         f"{max(counts.values()) / len(keys):.1%} (2/V = {2 / len(pool.rows):.1%})")
            print(f"  {lesson}/{q}: {shown}; P(a pair coincides) {same:.3f}")
            expected += same
            varied += 1
            distribution = [a * (1 - same) + b * same for a, b in zip(distribution + [0], [0] + distribution)]
    fixed = TOTAL_SELF_CHECKS - varied  # memory_exponent: the same for everyone
    distribution = [0.0] * fixed + distribution
    print(f"A1: expected coinciding right answers per pair {expected + fixed:.2f} of {TOTAL_SELF_CHECKS} "
          f"({fixed} unvaried; design <= 6), {numeric:.2f} of the 13 numeric (design <= 1); "
          f"P(pair coincides on >= 10 of {TOTAL_SELF_CHECKS}) = {sum(distribution[10:]):.3%} (design <= 1%)")


def copiers(class_size=1000):
    """A2's naming rates measured on many copiers: the second half of a class copies the first half's right answers
    in every lesson; the share of copiers the fit analysis names with their source, per lesson, and the share of
    the 28 self-check points each keeps."""
    print(f"== copiers (A2): {class_size // 2} copiers in a class of {class_size}")
    keys = KEYS[:class_size]
    pairs = list(zip(keys[class_size // 2:], keys[:class_size // 2]))
    kept = {copier: 0 for copier, _ in pairs}
    start = time.process_time()
    for lesson in POOLS:
        grader = Grader(lesson, SALT)
        named = 0
        for copier, source in pairs:
            answers = {}
            for q, (correct, _) in grader.answers.items():
                params = grader.params(source, q)
                value = correct(params) if callable(correct) else correct
                answers[q] = shown_letter(params["order"], value) if params and "order" in params else float(value)
            named += source in [other for other, _ in fitting_classmates(grader, copier, answers, keys)]
            kept[copier] += grader.score(copier, answers)
        print(f"  {lesson}: {named / len(pairs):.1%} of copiers named with their source")
    shares = sorted(k / TOTAL_SELF_CHECKS for k in kept.values())
    print(f"A2: points kept per copier mean {sum(shares) / len(shares):.1%}, largest {shares[-1]:.1%}, over 35% "
          f"{sum(s > 0.35 for s in shares) / len(shares):.1%} of copiers ({time.process_time() - start:.1f} CPU-s)")


def grading_overhead(class_size=1000):
    print("== grading overhead per submission (CPU ms)")
    for lesson in POOLS:
        grader = Grader(lesson, SALT)
        keys = KEYS[:class_size]
        derive_cost = timed(lambda lesson=lesson, keys=keys: derive(lesson, keys[0], SALT), 100)
        # a copier: the right answers of a classmate, wrong for their own numbers
        copied = {q: expected_answer(lesson, q, grader.answers, grader.params(keys[1], q)) for q in POOLS[lesson]}
        copied = {q: (v if not isinstance(v, str) else shown_letter(grader.params(keys[1], q)["order"], v))
                  for q, v in copied.items()}
        fit_cost = timed(lambda grader=grader, keys=keys, copied=copied:
                         fitting_classmates(grader, keys[0], copied, keys), 20)
        print(f"  {lesson}: numbers {derive_cost * 1e3:.2f} ms, answers-fit rows of a copier in a class of "
              f"{class_size}: {fit_cost * 1e3:.2f} ms")
    print("compare with bench/bench_class_grading.py's CPU seconds per submission (several seconds): the sum above "
          "is the added share")


def grading_cpu(lesson, n, rounds=2):
    """CPU-s per submission of bench_class_grading's class graded with variants off, then on (alternately)."""
    sys.path.insert(0, str(ROOT / "bench"))
    import bench_class_grading as classes
    variant_settings = f"\nc.Variants.salt = {SALT!r}\nc.Variants.lessons = [{lesson!r}]\n"
    make_class = classes.a_class
    print(f"== grading CPU per submission, {lesson}, {n} submissions, variants off and on ({rounds} rounds)")
    measured = {"off": [], "on": []}
    for _ in range(rounds):
        for mode in ("off", "on"):
            def a_class(parent, lesson, n, mode=mode):
                instructor = make_class(parent, lesson, n)
                if mode == "on":
                    with (instructor / "nbgrader_config.py").open("a") as config:
                        config.write(variant_settings)
                return instructor
            classes.a_class = a_class
            try:
                _, runs, _ = classes.parallel(lesson, n, None)
            finally:
                classes.a_class = make_class
            cpu = sum(m["cpu_seconds"] for m in runs) / len(runs)
            measured[mode].append(cpu)
            print(f"  variants {mode:>3}: {cpu:.3f} CPU-s per submission")
    off, on = (sum(v) / len(v) for v in (measured["off"], measured["on"]))
    print(f"variants on / off: {on / off:.3f} (A8: <= 1.02; load average {os.getloadavg()[0]:.1f}, the rounds' spread "
          f"{min(measured['off'] + measured['on']):.3f}..{max(measured['off'] + measured['on']):.3f} s)")


if __name__ == "__main__":
    if "--grading" in sys.argv:
        extra = sys.argv[sys.argv.index("--grading") + 1:]
        grading_cpu(extra[0] if extra else "03-scaling", int(extra[1]) if len(extra) > 1 else 12,
                    int(extra[2]) if len(extra) > 2 else 2)
        sys.exit()
    derivation()
    spread()
    copiers()
    grading_overhead()
