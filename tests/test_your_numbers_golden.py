"""A5: the self-check variants are the same on every machine. tests/data/your_numbers_golden.jsonl (50 keys x every
self-check question: the variant code, the parameters, the right answer) was written by tests/golden_your_numbers.py;
today's derivation must write it byte for byte. It was also written under Python 3.12 and under other numpy minor
versions, byte for byte the same (issue 43's closing note lists them), so a regrade on another machine gives the
same numbers and the same expected answers."""
import pathlib

import golden_your_numbers

GOLDEN = pathlib.Path(__file__).parent / "data" / "your_numbers_golden.jsonl"


def test_the_derivation_reproduces_the_golden_table_byte_for_byte():
    written, golden = golden_your_numbers.table().encode("utf-8"), GOLDEN.read_bytes()
    assert written.count(b"\n") == 50 * 7 and written.count(b'"answers":') == 350
    assert written == golden, next(f"first difference, line {n + 1}:\n{a}\n{b}" for n, (a, b) in
                                   enumerate(zip(written.splitlines(), golden.splitlines())) if a != b)
