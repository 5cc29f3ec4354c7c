"""How fast is qkv.model on this machine? Prints measurements; asserts nothing.

    .venv/bin/python bench/bench_model.py
    .venv/bin/python bench/bench_model.py --llamacpp-python /tmp/llamacpp/bin/python

Targets on the 2-core course machine: load <= 5 s, 32-token forward <= 0.5 s. The llama.cpp
comparison runs in-process if llama_cpp is importable, else in the interpreter given by
--llamacpp-python (or $QKV_LLAMACPP_PYTHON): llama-cpp-python never goes into the project venv.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

N_TOKENS = 32
REPEATS = 7

# Runs in whichever interpreter has llama_cpp; prints the median seconds of one prompt evaluation.
LLAMACPP_TIMER = r"""
import json, statistics, sys, time
import llama_cpp
path, ids, repeats = sys.argv[1], json.loads(sys.argv[2]), int(sys.argv[3])
llm = llama_cpp.Llama(model_path=path, n_ctx=512, n_threads=2, n_batch=512, verbose=False)
times = []
for _ in range(repeats + 1):
    llm.reset()
    start = time.perf_counter()
    llm.eval(ids)
    times.append(time.perf_counter() - start)
print(statistics.median(times[1:]))
"""


def report(label, seconds, note=""):
    print(f"{label + ':':<30}{seconds:7.3f} s   {note}".rstrip())


def median_seconds(function, repeats):
    function()  # warm-up: page in the memory-mapped weights, start BLAS threads
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        function()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def llamacpp_seconds(path, ids, python):
    try:
        import llama_cpp  # noqa: F401
        python = sys.executable
    except ImportError:
        if not python:
            return None
    result = subprocess.run([python, "-c", LLAMACPP_TIMER, str(path), json.dumps(ids), str(REPEATS)],
                            capture_output=True, text=True)
    if result.returncode != 0:
        print(f"llama.cpp timing failed: {result.stderr.strip().splitlines()[-1:]}")
        return None
    return float(result.stdout.strip().splitlines()[-1])


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--llamacpp-python", default=os.environ.get("QKV_LLAMACPP_PYTHON"),
                        help="a Python interpreter that has llama_cpp installed")
    args = parser.parse_args()

    # OpenBLAS threads that spin while other processes hold the cores make the forward several
    # times slower: print what the machine was doing so a reader can judge the numbers.
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores; "
          f"OPENBLAS_NUM_THREADS={os.environ.get('OPENBLAS_NUM_THREADS', 'unset')}")
    start = time.perf_counter()
    from qkv import gguf_weights, model as qkv_model
    from qkv.fetch import model_path
    path = model_path()
    import_seconds = time.perf_counter() - start
    start = time.perf_counter()
    model = qkv_model.load(path)
    load_seconds = time.perf_counter() - start
    report("import + verify model file", import_seconds)
    report("load (float32 cache)", load_seconds, "target <= 5 s")
    start = time.perf_counter()
    gguf_weights.read_gguf(path, qkv_model.Config)
    report("load straight from the GGUF", time.perf_counter() - start,
           "dequantize Q4_1; `make model` does this once and keeps the float32 cache")

    text = ("Attention lets every token look back at the tokens before it and decide, head by head, "
            "which of them matter for predicting the next word in the sentence, and how much.")
    ids = qkv_model.encode(model, text)[:N_TOKENS]
    assert len(ids) == N_TOKENS, f"the benchmark text must give at least {N_TOKENS} tokens"
    forward_seconds = median_seconds(lambda: qkv_model.forward(model, ids), REPEATS)
    report(f"forward, {len(ids)} tokens", forward_seconds, f"target <= 0.5 s (median of {REPEATS})")
    weights_seconds = median_seconds(lambda: qkv_model.forward(model, ids, return_weights=True), REPEATS)
    report("  with return_weights", weights_seconds)
    # issue 41: every layer checks that its attn_norm, W_q, W_k, W_v are SmolLM2's own (qkv.own_weights), by identity
    from qkv import own_weights
    checked = own_weights.require_own_projections
    own_weights.require_own_projections = lambda layer: None
    unchecked_seconds = median_seconds(lambda: qkv_model.forward(model, ids), REPEATS)
    own_weights.require_own_projections = checked
    report("  own-weights check off", unchecked_seconds,
           f"with / without = {forward_seconds / unchecked_seconds:.3f}")

    reference = llamacpp_seconds(path, ids, args.llamacpp_python)
    if reference is None:
        print("llama.cpp: not measured (no llama_cpp here; pass --llamacpp-python)")
    else:
        report(f"llama.cpp, same {len(ids)} tokens", reference,
               f"numpy / llama.cpp = {forward_seconds / reference:.1f}x")


if __name__ == "__main__":
    main()
