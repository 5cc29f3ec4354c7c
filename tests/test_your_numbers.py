"""qkv.your_numbers (issue 43): each student's numbers for the self-check questions, derived from (salt, lesson,
question, key) by rendezvous hashing over enumerated pools; the empty key is the canonical variant, today's numbers.
Spread (A1), the derivation's stability and bad input (A9). Its cost is measured in bench/bench_your_numbers.py."""
import collections
import functools
import json

import pytest

from qkv import your_numbers
from qkv.checking import Hint
from qkv.your_numbers import LETTERS, POOLS, numbers, question_params

TERM_SALT = "qkv-2026-autumn"
KEYS = [f"student{i:04d}" for i in range(3000)]


@pytest.fixture
def plain_process(monkeypatch):
    for variable in ("QKV_VARIANT_KEY", "QKV_VARIANT_SALT", "JUPYTERHUB_USER", "QKV_SELF_STUDY"):
        monkeypatch.delenv(variable, raising=False)
    monkeypatch.setattr(your_numbers, "CONFIG_FILE", your_numbers.CONFIG_FILE.with_name("no-such-config.json"))
    monkeypatch.setattr(your_numbers, "_kernel_key", {})


@pytest.fixture
def notebook_kernel(plain_process, monkeypatch):
    monkeypatch.setattr(your_numbers, "_in_notebook_kernel", lambda: True)


@pytest.fixture
def graded_edition(plain_process, monkeypatch, tmp_path):
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"salt": TERM_SALT, "lessons": ["03-scaling"], "key_label": "your university login",
                                  "key_pattern": "[a-z][a-z0-9]{1,15}"}))
    monkeypatch.setattr(your_numbers, "CONFIG_FILE", config)


def varied_questions():
    return [(lesson, question) for lesson, pools in POOLS.items() for question in pools]


# ---------------------------------------------------------------- the canonical variant is today's

TODAY = {  # the numbers the lessons' text used before variants, with today's letters "abcd"
    ("01-lookup", "blended_output"): {"x": 2, "v1": 10, "T": 1}, ("02-by-hand", "dot_products"): {"T": 10},
    ("02-by-hand", "scale_d128"): {"d_k": 128}, ("03-scaling", "variance_at_128"): {"d_k": 128},
    ("03-scaling", "entropy_uniform_8"): {"n": 8}, ("04-masking", "blocked_pairs"): {"T": 8},
    ("04-masking", "future_share_zero_mask"): {"T": 5, "position": 1},
    ("05-heads", "qwen_kv_bytes_per_token"): {"n_layers": 24, "n_kv_heads": 2, "d_head": 64, "bytes": 2},
    ("05-heads", "qwen_kv_saving_factor"): {"n_heads": 14, "n_kv_heads": 2},
    ("06-sinks", "gpt2_uniform_share"): {"T": 6}, ("06-sinks", "sink_peak_layer"): {"layer": 25},
    ("07-cost", "context_growth"): {"n_old": 2048, "n_new": 8192}, ("07-cost", "smollm2_cache_mib"): {"T": 8192},
}


def test_the_empty_key_gives_the_canonical_variant_today_s_numbers_and_letters(plain_process):
    for lesson, question in varied_questions():
        for salt in ("self-study", TERM_SALT):
            params = numbers(lesson, "", salt=salt).params[question]
            assert params == TODAY.get((lesson, question), {"order": "abcd"}), (lesson, question)
    assert numbers("03-scaling", "   ").key == ""


def test_the_derivation_is_pinned_same_on_every_machine(plain_process):
    # a golden row: hashlib and json only, so any change here changes every class's numbers under a live term
    mine = numbers("03-scaling", "jsmith", salt="self-study")
    assert (mine.key, mine.code) == ("jsmith", "5AEX")
    assert mine.params == {"why_scale": {"order": "dcab"}, "without_scaling": {"order": "bacd"},
                           "variance_at_128": {"d_k": 112}, "entropy_uniform_8": {"n": 9}}
    assert numbers("03-scaling", "jsmith", salt=TERM_SALT).params != mine.params  # a new term, new numbers


# ---------------------------------------------------------------- spread (A1)

@functools.lru_cache(maxsize=None)
def _shares(lesson, question, salt=TERM_SALT):
    counts = collections.Counter(json.dumps(question_params(lesson, question, key, salt)) for key in KEYS)
    return counts


@pytest.mark.parametrize("lesson,question", varied_questions())
def test_every_variant_is_drawn_and_none_by_more_than_twice_its_share(lesson, question):
    pool = POOLS[lesson][question]
    counts = _shares(lesson, question)
    if pool.names == ("order",):
        first = collections.Counter(json.loads(order)["order"][0] for order in counts.elements())
        assert set(first) == set(LETTERS) and max(first.values()) <= 2 * len(KEYS) / 4, first
        return
    assert len(counts) == len(pool.rows), f"{len(pool.rows) - len(counts)} variants never drawn"
    assert max(counts.values()) <= 2 * len(KEYS) / len(pool.rows), counts.most_common(3)
    assert len(pool.rows) >= 12 and len(pool.rows) <= 200  # >= 12 answers; <= 200 hashes per derivation (1 ms)


SELF_CHECKS = 28  # the course's self-check questions; those without a pool (memory_exponent) are the same for all


def test_two_students_share_few_right_answers(plain_process):
    # A1: for a pair of random keys, a question's right answers coincide with probability sum_v p_v^2 (a choice:
    # the right option at the same letter, 1/4; an unvaried question: 1). Expected coincidences over the 28
    # questions <= 6, over the varied numeric ones <= 1, and P(a pair coincides on >= 10 of 28) <= 1%
    numeric, same = 0.0, []
    for lesson, question in varied_questions():
        if POOLS[lesson][question].names == ("order",):
            same.append(0.25)
        else:
            same.append(sum((n / len(KEYS)) ** 2 for n in _shares(lesson, question).values()))
            numeric += same[-1]
    same += [1.0] * (SELF_CHECKS - len(same))
    distribution = [1.0]  # distribution[k]: P(k coinciding answers)
    for p in same:
        distribution = [a * (1 - p) + b * p for a, b in zip(distribution + [0.0], [0.0] + distribution)]
    measured = (f"A1 over {len(KEYS)} keys: expected coinciding right answers per pair {sum(same):.2f} of "
                f"{SELF_CHECKS}, {numeric:.2f} of the 13 numeric; P(pair coincides on >= 10 of {SELF_CHECKS}) = "
                f"{sum(distribution[10:]):.3%}")
    distinct = ", ".join(f"{q} {len(_shares(lesson, q))}" for lesson, q in varied_questions()
                         if POOLS[lesson][q].names != ("order",))
    # the closing note's figures (pytest -s; per question: bench/bench_your_numbers.py)
    print(f"\n{measured}\nA1 distinct right answers drawn per numeric question: {distinct}")
    assert SELF_CHECKS - len(varied_questions()) == 1  # every question varies but memory_exponent
    assert numeric <= 1.0 and sum(same) <= 6.0, measured
    assert sum(distribution[10:]) <= 0.01, measured


def test_retiring_a_variant_moves_only_the_students_who_had_it(monkeypatch):
    lesson, question = "05-heads", "qwen_kv_bytes_per_token"
    before = {key: question_params(lesson, question, key, TERM_SALT) for key in KEYS[:1000]}
    pool = POOLS[lesson][question]
    retired = pool.rows[5]
    monkeypatch.setitem(POOLS[lesson], question, pool._replace(rows=tuple(r for r in pool.rows if r != retired)))
    moved = [key for key in before if question_params(lesson, question, key, TERM_SALT) != before[key]]
    assert moved and all(list(before[key].values()) == list(retired) for key in moved)


# ---------------------------------------------------------------- the key (A9)

def test_case_spaces_and_unicode_look_alikes_give_the_same_numbers(plain_process):
    # full-width letters (NFKC), case (casefold), spaces and an ideographic space around it (strip)
    keys = ("jsmith", " JSmith ", "\uff4a\uff53\uff4d\uff49\uff54\uff48", "JSMITH\u3000")
    assert len({json.dumps(numbers("03-scaling", key, salt=TERM_SALT).params) for key in keys}) == 1
    assert len({numbers("03-scaling", key, salt=TERM_SALT).code for key in keys}) == 1


@pytest.mark.parametrize("key,message", [(42, "text in quotes"), ("x" * 500, "at most"),
                                         ("js\nmith", "control character")])
def test_a_bad_key_gets_a_sentence(plain_process, key, message):
    with pytest.raises(Hint, match=message):
        numbers("03-scaling", key)


def test_a_lesson_named_wrongly_gets_a_sentence(plain_process):
    with pytest.raises(Hint, match="folder name"):
        numbers(3, "jsmith")


def test_in_a_graded_edition_an_empty_key_asks_for_the_login(graded_edition):
    with pytest.raises(Hint, match="your university login"):
        numbers("03-scaling", "")
    assert numbers("03-scaling", "jsmith").salt == TERM_SALT  # the edition's salt


def test_a_class_edition_shows_a_lesson_its_course_does_not_vary_with_the_canonical_numbers(graded_edition):
    fixed = numbers("04-masking", "jsmith")  # the edition varies 03 only: 04 is graded on the lesson's numbers
    assert fixed.params == numbers("04-masking", "", salt="self-study").params and "own numbers" in repr(fixed)


def test_the_grader_s_empty_key_means_the_canonical_numbers(plain_process, monkeypatch):
    monkeypatch.setenv("QKV_VARIANT_KEY", "")  # variants off for the lesson being graded
    assert numbers("03-scaling", "jsmith").params == numbers("03-scaling", "", salt="self-study").params


def test_a_key_not_like_a_login_warns(graded_edition):
    assert "does not look like your university login" in repr(numbers("03-scaling", "j.smith@uni.example"))
    assert "does not look" not in repr(numbers("03-scaling", "jsmith"))


def test_a_notebook_kernel_refuses_a_second_key_a_plain_process_does_not(notebook_kernel):
    numbers("03-scaling", "alice")
    numbers("03-scaling", " Alice")  # the same key again: fine
    with pytest.raises(Hint, match="already shows the numbers for 'alice': restart the kernel"):
        numbers("03-scaling", "bob")
    your_numbers._in_notebook_kernel = lambda: False  # restored by monkeypatch
    your_numbers._kernel_key.clear()


def test_plain_processes_derive_any_number_of_keys(plain_process):
    assert len({numbers("03-scaling", key).code for key in ("alice", "bob", "carol")}) == 3


def test_the_grader_s_key_wins_over_the_typed_one_and_the_hub_login_fills_an_empty_one(plain_process, monkeypatch):
    monkeypatch.setenv("JUPYTERHUB_USER", "Carol")
    hub = numbers("03-scaling", "")
    assert (hub.key, hub.source) == ("carol", "hub") and "JupyterHub login" in repr(hub)
    assert numbers("03-scaling", "dave").key == "dave"  # a typed key wins over the hub's
    monkeypatch.setenv("QKV_VARIANT_KEY", "erin")
    monkeypatch.setenv("QKV_VARIANT_SALT", TERM_SALT)
    graded = numbers("03-scaling", "dave")
    assert (graded.key, graded.source, graded.salt) == ("erin", "grader", TERM_SALT)


def test_a_question_shows_its_numbers_and_its_options_in_the_student_s_order(plain_process, capsys):
    mine = numbers("03-scaling", "jsmith")
    mine.show("variance_at_128")
    mine.show("why_scale")  # order "dcab"
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "Your numbers: d_k = 112."
    assert out[1] == "(a) to make the matrix product cheaper" and out[4].startswith("(d) so that the scores keep")
    assert your_numbers.canonical_letter("dcab", "d") == "b" and your_numbers.shown_letter("dcab", "b") == "d"
    assert your_numbers.canonical_letter("dcab", "e") is None


def test_another_set_is_for_self_study_only(plain_process, graded_edition):
    with pytest.raises(Hint, match="for self-study"):
        numbers("03-scaling", "jsmith").another()


def test_another_set_draws_a_fresh_key_outside_a_graded_edition(notebook_kernel):
    first = numbers("03-scaling", "")
    practice = first.another()
    assert practice.key.startswith("practice-") and practice.params != first.params
