"""A5: the self-check variants are the same on every machine. tests/data/your_numbers_golden.jsonl (50 keys x every
self-check question: the variant code, the parameters, the right answer) was written by tests/golden_your_numbers.py;
today's derivation must write it byte for byte. Written by hand in throwaway environments (2026-12-06), it came out
byte for byte the same under Python 3.11.7 with numpy 2.0.2, 2.1.3, 2.2.6, 2.3.5 and the pinned 2.4.6, and under
Python 3.12.1 and 3.13.0 with numpy 2.4.6; numpy 1.26.4 differs in the last bit of 13 answers (its exp and log:
np.log(10) = 2.3025850929940455, not 2.302585092994046), far inside every tolerance, so grades stay the same."""
import pathlib

import golden_your_numbers

GOLDEN = pathlib.Path(__file__).parent / "data" / "your_numbers_golden.jsonl"


def test_the_derivation_reproduces_the_golden_table_byte_for_byte():
    written, golden = golden_your_numbers.table().encode("utf-8"), GOLDEN.read_bytes()
    assert written.count(b"\n") == 50 * 7 and written.count(b'"answers":') == 350
    assert written == golden, next(f"first difference, line {n + 1}:\n{a}\n{b}" for n, (a, b) in
                                   enumerate(zip(written.splitlines(), golden.splitlines())) if a != b)
