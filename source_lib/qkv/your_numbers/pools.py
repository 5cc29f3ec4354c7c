"""The self-check questions' pools: every allowed parameter set of a varied question, listed by distinct answer.

One literal list per question (the edition's lock hashes them: `qkv.your_numbers.pool_digest`). The first row is
the canonical variant, the numbers the lesson's text and the empty key use. Rows were chosen so that any two rows'
right answers lie outside each other's tolerance windows, with every catalogued mistake of a row outside its own
(tests/test_your_numbers_answers.py checks both against autograde/qkv_grading). No answers here: the edition ships
this file. Never edit a pool under a live class: `make grade` refuses when one changed since the edition was built.
"""
from typing import NamedTuple


class Pool(NamedTuple):
    """A numeric question's parameters: their names, and one row of values per variant (canonical first)."""
    names: tuple
    rows: tuple


# a choice question varies by the order of its four canonical options
CHOICE = Pool(("order",), tuple((letter,) for letter in "abcd"))

# lesson folder -> question name -> Pool. Lesson 07's memory_exponent is not varied: the quadratic law is its
# teaching point, the same for everyone.
POOLS = {
    "01-lookup": {
        "lookup_on_miss": CHOICE,
        "blended_output": Pool(("x", "v1", "T"), (
            (2, 10, 1), (1, 4, 1), (1.5, 4, 1), (2, 4, 1), (2.5, 4, 1), (3, 4, 1), (1, 5, 1), (1.5, 5, 1), (2, 5,
            1), (2.5, 5, 1), (3, 5, 1), (1.5, 6, 1), (2, 6, 1), (2.5, 6, 1), (3, 6, 1), (1, 7, 1), (2, 7, 1), (2.5,
            7, 1), (3, 7, 1), (1, 8, 1), (1.5, 8, 1), (2, 8, 1), (2.5, 8, 1), (3, 8, 1), (1, 9, 1), (1.5, 9, 1), (2,
            9, 1), (2.5, 9, 1), (3, 9, 1), (1, 10, 1), (1.5, 10, 1), (2.5, 10, 1), (3, 10, 1), (1, 11, 1), (1.5, 11,
            1), (2, 11, 1), (2.5, 11, 1), (3, 11, 1), (1, 12, 1), (1.5, 12, 1), (2, 12, 1), (2.5, 12, 1), (3, 12,
            1), (1, 13, 1), (1.5, 13, 1), (2.5, 13, 1), (3, 13, 1), (1, 14, 1), (2, 14, 1), (2.5, 14, 1), (3, 14,
            1), (1, 15, 1), (1.5, 15, 1), (2, 15, 1), (2.5, 15, 1), (3, 15, 1), (1, 16, 1), (1.5, 16, 1), (2, 16,
            1), (2.5, 16, 1), (3, 16, 1), (1, 17, 1), (1.5, 17, 1), (2, 17, 1), (2.5, 17, 1), (3, 17, 1), (1, 18,
            1), (1.5, 18, 1), (2, 18, 1), (2.5, 18, 1), (3, 18, 1), (1.5, 19, 1), (2, 19, 1), (2.5, 19, 1), (3, 19,
            1), (1, 20, 1), (1.5, 20, 1), (2, 20, 1), (2.5, 20, 1), (3, 20, 1), (2, 4, 0.5), (2.5, 4, 0.5), (2.5, 5,
            0.5), (2, 6, 0.5), (2.5, 6, 0.5), (2, 7, 0.5), (2.5, 7, 0.5), (2, 8, 0.5), (2, 9, 0.5), (2.5, 9, 0.5),
            (2.5, 10, 0.5), (3, 10, 0.5), (2, 11, 0.5), (2.5, 11, 0.5), (2, 12, 0.5), (2.5, 12, 0.5), (3, 12, 0.5),
            (2, 13, 0.5), (2.5, 13, 0.5), (3, 13, 0.5), (2, 14, 0.5), (3, 14, 0.5), (2.5, 15, 0.5), (2.5, 16, 0.5),
            (3, 16, 0.5), (2, 17, 0.5), (2.5, 17, 0.5), (3, 17, 0.5), (2, 18, 0.5), (2.5, 18, 0.5), (3, 18, 0.5),
            (2, 19, 0.5), (2.5, 19, 0.5), (3, 19, 0.5), (2, 20, 0.5), (2.5, 20, 0.5), (3, 20, 0.5), (1, 4, 2), (1.5,
            4, 2), (2.5, 4, 2), (1.5, 5, 2), (2.5, 5, 2), (1, 6, 2), (2.5, 6, 2), (1, 7, 2), (2.5, 7, 2), (2.5, 8,
            2), (1, 9, 2), (1.5, 9, 2), (2.5, 9, 2), (1.5, 10, 2), (2.5, 10, 2), (1, 11, 2), (1.5, 11, 2), (2.5, 11,
            2), (1.5, 12, 2), (2.5, 12, 2), (1, 13, 2), (2.5, 13, 2), (1, 14, 2), (2.5, 14, 2), (1.5, 15, 2), (2.5,
            15, 2), (1.5, 17, 2), (1, 18, 2), (1.5, 18, 2), (2.5, 18, 2), (1, 19, 2), (1, 20, 2), (1.5, 20, 2)
        )),
        "why_separate": CHOICE,
    },
    "02-by-hand": {
        "score_shape": CHOICE,
        "dot_products": Pool(("T",), (
            (10,), (6,), (7,), (8,), (9,), (11,), (12,), (13,), (14,), (15,), (16,), (17,), (18,), (19,), (20,),
            (21,), (22,), (23,), (24,), (25,), (26,), (27,), (28,), (29,), (30,)
        )),
        "scale_d128": Pool(("d_k",), (
            (128,), (16,), (24,), (32,), (40,), (48,), (80,), (96,), (112,), (160,), (192,), (256,), (320,), (384,),
            (512,), (768,), (1024,), (2048,)
        )),
        "is_symmetric": CHOICE,
    },
    "03-scaling": {
        "why_scale": CHOICE,
        "without_scaling": CHOICE,
        "variance_at_128": Pool(("d_k",), (
            (128,), (8,), (12,), (16,), (20,), (24,), (32,), (40,), (48,), (56,), (80,), (96,), (112,), (160,),
            (192,), (224,), (256,), (320,), (384,), (448,), (512,), (768,), (1024,)
        )),
        "entropy_uniform_8": Pool(("n",), (
            (8,), (3,), (4,), (5,), (6,), (7,), (9,), (10,), (11,), (12,), (13,), (14,), (15,), (17,), (18,), (19,),
            (20,), (21,), (22,), (23,), (24,), (25,), (26,), (27,), (28,), (29,), (30,), (31,), (32,)
        )),
    },
    "04-masking": {
        "causal_blocks": CHOICE,
        "blocked_pairs": Pool(("T",), (
            (8,), (4,), (5,), (6,), (7,), (9,), (10,), (11,), (12,), (13,), (14,), (15,), (16,), (17,), (18,),
            (19,), (20,), (21,), (22,), (23,), (24,), (25,), (26,), (27,), (28,), (29,), (30,), (31,), (32,), (33,),
            (34,), (35,), (36,), (37,), (38,), (39,), (40,)
        )),
        "future_share_zero_mask": Pool(("T", "position"), (
            (5, 1), (4, 1), (4, 2), (5, 2), (5, 3), (6, 1), (6, 2), (6, 4), (7, 1), (7, 2), (7, 3), (7, 4), (7, 5),
            (8, 1), (8, 3), (8, 5), (8, 6), (9, 1), (9, 2), (9, 4), (9, 5), (9, 7), (10, 1), (10, 3), (10, 7), (10,
            8)
        )),
        "why_meaningless": CHOICE,
    },
    "05-heads": {
        "design_choice": CHOICE,
        "gqa_saves": CHOICE,
        "qwen_kv_bytes_per_token": Pool(("n_layers", "n_kv_heads", "d_head", "bytes"), (
            (24, 2, 64, 2), (12, 2, 64, 2), (16, 2, 64, 2), (20, 2, 64, 2), (28, 2, 64, 2), (32, 2, 64, 2), (36, 2,
            64, 2), (40, 2, 64, 2), (24, 4, 64, 2), (28, 4, 64, 2), (32, 4, 64, 2), (36, 4, 64, 2), (40, 4, 64, 2),
            (24, 8, 64, 2), (28, 8, 64, 2), (32, 8, 64, 2), (36, 8, 64, 2), (40, 8, 64, 2), (12, 1, 64, 2), (16, 1,
            64, 2), (20, 1, 64, 2), (28, 1, 64, 2), (36, 1, 64, 2), (24, 8, 128, 2), (28, 8, 128, 2), (32, 8, 128,
            2), (36, 8, 128, 2), (40, 8, 128, 2), (12, 2, 80, 2), (20, 2, 80, 2), (24, 2, 80, 2), (28, 2, 80, 2),
            (36, 2, 80, 2), (40, 2, 80, 2), (24, 4, 80, 2), (28, 4, 80, 2), (36, 4, 80, 2), (40, 4, 80, 2), (24, 8,
            80, 2), (28, 8, 80, 2), (36, 8, 80, 2), (40, 8, 80, 2), (12, 1, 80, 2), (20, 1, 80, 2), (28, 1, 80, 2),
            (36, 1, 80, 2), (28, 2, 96, 2), (36, 2, 96, 2), (28, 4, 96, 2), (36, 4, 96, 2), (28, 8, 96, 2), (36, 8,
            96, 2), (40, 8, 96, 2), (12, 1, 96, 2), (28, 1, 96, 2), (36, 1, 96, 2), (24, 8, 128, 4), (28, 8, 128,
            4), (32, 8, 128, 4), (36, 8, 128, 4), (40, 8, 128, 4), (28, 8, 80, 4), (36, 8, 80, 4), (40, 8, 80, 4),
            (28, 8, 96, 4), (36, 8, 96, 4), (40, 8, 96, 4)
        )),
        "qwen_kv_saving_factor": Pool(("n_heads", "n_kv_heads"), (
            (14, 2), (8, 4), (6, 2), (8, 2), (10, 2), (12, 2), (16, 2), (18, 2), (20, 2), (22, 2), (24, 2), (26, 2),
            (28, 2), (30, 2), (32, 2)
        )),
    },
    "06-sinks": {
        "weight_refutes": CHOICE,
        "sink_explanation": CHOICE,
        # GPT-2's quoted 61% at 6 tokens stays in the text; the student's sentence has T tokens -> 1/T. T up to 30
        # (the design's 16, widened): 28 answers instead of 14 keep P(two students share >= 10 of 28) under 1% (A1)
        "gpt2_uniform_share": Pool(("T",), (
            (6,), (3,), (4,), (5,), (7,), (8,), (9,), (10,), (11,), (12,), (13,), (14,), (15,), (16,), (17,), (18,),
            (19,), (20,), (21,), (22,), (23,), (24,), (25,), (26,), (27,), (28,), (29,), (30,)
        )),
        # the first-token share of SmolLM2 at the student's layer on the seed sentence (the peak, layer 25, is the
        # canonical row and stays the lesson's figure); layers 8, 18 and 21 are left out: their shares lie within
        # 0.002 of layers 4's and 8's, so they would be one answer
        "sink_peak_layer": Pool(("layer",), (
            (25,), (0,), (1,), (2,), (3,), (4,), (5,), (6,), (7,), (9,), (10,), (11,), (12,), (13,), (14,), (15,),
            (16,), (17,), (19,), (20,), (22,), (23,), (24,), (26,), (27,), (28,), (29,)
        )),
        "ablation_outcome": CHOICE,
    },
    "07-cost": {
        # 31 rows each, so that two students' numbers differ on both numeric questions with P = (30/31)^2 = 0.94 and
        # a copier is named (A2). No row's right answer lies within 2 tolerances of another's or of a catalogued
        # mistake of another row (the linear ratio, the cubed one, the difference; half, double, triple, MB): such
        # an answer would be an honest mistake, and a copier who copied it would not be named. Ratios from
        # 1.25 to 64, whole or in quarters, so that their squares are exact in binary floats
        "context_growth": Pool(("n_old", "n_new"), (
            (2048, 8192), (512, 768), (2048, 5120), (4096, 12288), (512, 2560), (1024, 6144), (4096, 40960), (512,
            6144), (2048, 40960), (4096, 131072), (8192, 10240), (4096, 7168), (2048, 7168), (4096, 28672), (1024,
            14336), (1024, 24576), (512, 20480), (2048, 98304), (1024, 65536), (4096, 11264), (4096, 13312), (2048,
            7680), (2048, 9216), (1024, 5632), (2048, 13312), (1024, 7680), (1024, 11264), (1024, 13312), (1024, 15360),
            (1024, 18432), (512, 14336)
        )),
        "more_important_reason": CHOICE,
        # one sequence within SmolLM2's context (8,192): multiples of 128 from 8,192 down to 512, each kept unless
        # it clashes with one already kept as above (4,096 is half of 8,192: "K only" of the canonical row)
        "smollm2_cache_mib": Pool(("T",), (
            (8192,), (512,), (640,), (768,), (896,), (1152,), (1664,), (2048,), (2560,), (2816,), (3072,), (3840,),
            (4224,), (4352,), (4736,), (4864,), (5248,), (5376,), (5760,), (5888,), (6272,), (6400,), (6528,), (6656,),
            (6784,), (6912,), (7168,), (7296,), (7424,), (7936,), (8064,)
        )),
    },
}
