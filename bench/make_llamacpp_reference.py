"""Produce tests/data/llamacpp_reference.{json,npz}: what llama.cpp itself says about our GGUF.

qkv.model must agree with llama.cpp on token ids, logits and greedy continuations. This script
asks llama.cpp (through llama-cpp-python) and stores its answers. Never install llama-cpp-python
into the project environment; use a throwaway one (building llama.cpp takes ~15 min on 2 cores):

    python3 -m venv /tmp/llamacpp
    /tmp/llamacpp/bin/pip install llama-cpp-python numpy
    /tmp/llamacpp/bin/python bench/make_llamacpp_reference.py     # from the repo root

It fetches the model with qkv.fetch (stdlib only, imported from source_lib/ without installing
qkv) and overwrites the two files under tests/data/.

llama.cpp is asked twice:
- "q4_1": the GGUF as shipped. llama.cpp's Q4_1 matmuls quantize the activations to 8 bits on
  the fly, so its logits differ from any float32 computation by up to ~1 logit (correlation
  ~0.9995) and greedy decoding may part ways at near-ties.
- "f32": the same weights dequantized to F32 by llama.cpp's own quantize tool (a temporary
  540 MB file). llama.cpp then computes in float32 like qkv.model, so agreement should be
  ~1e-2 in logits and exact in greedy tokens: the tight check of our maths.
"""

from __future__ import annotations

import ctypes
import json
import sys
import tempfile
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "source_lib"))

import llama_cpp  # noqa: E402

from qkv.fetch import GGUF_SHA256, model_path  # noqa: E402

DATA = REPO / "tests" / "data"

# Strings that exercise the pre-tokenizer: single digits, contractions, runs of spaces,
# newlines and tabs, non-ASCII letters, emoji, code, and the chat template's control tokens.
TOKENIZER_STRINGS = [
    "The capital of France is",
    "Hello, world! In 2024 there were 12345 tokens.",
    "  two leading spaces,\ttabs\tand\n\nnew lines  \n",
    "don't you'll we've I'm they'd IT'S",
    "naïve café — Zürich, 東京, Москва 🙂",
    "def square(x):\n    return x ** 2  # 3.14159",
    "<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n",
]

# Prompts whose last-position logits and greedy continuation are stored.
PROMPTS = [
    "The capital of France is",
    "<|im_start|>user\nWhat is the largest planet in the solar system?<|im_end|>\n<|im_start|>assistant\n",
    "Attention lets each token look at earlier tokens. In a transformer, the query",
]
N_GREEDY = 12
F32_LOGITS_FOR = (0, 1)  # prompts whose f32 logits are stored too; all six arrays would pass 500 KB


def tokenize(llm, text):
    # special=True: control tokens like <|im_start|> become their single ids, as in the chat template
    return llm.tokenize(text.encode("utf-8"), add_bos=False, special=True)


def json_one_item_per_line(header, **lists):
    # Readable in a diff: one test case per line instead of one token id per line.
    lines = [f" {json.dumps(key)}: {json.dumps(value, ensure_ascii=False)}," for key, value in header.items()]
    for key, items in lists.items():
        body = ",\n".join(f"  {json.dumps(item, ensure_ascii=False)}" for item in items)
        lines.append(f" {json.dumps(key)}: [\n{body}\n ],")
    lines[-1] = lines[-1].rstrip(",")
    return "{\n" + "\n".join(lines) + "\n}\n"


def dequantize_to_f32(gguf, destination):
    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = 0  # LLAMA_FTYPE_ALL_F32
    params.allow_requantize = True
    params.nthread = 2
    status = llama_cpp.llama_model_quantize(gguf.encode(), str(destination).encode(), ctypes.byref(params))
    if status != 0:
        raise RuntimeError(f"llama_model_quantize to F32 failed with status {status}")


def run_prompts(gguf, prompt_ids):
    """For each prompt: llama.cpp's last-position logits, and its greedy continuation with the
    top-1 minus top-2 logit margin at every step (small margins are near-ties)."""
    llm = llama_cpp.Llama(model_path=gguf, n_ctx=512, n_threads=2, logits_all=True, verbose=False)
    results = []
    for ids in prompt_ids:
        llm.reset()
        llm.eval(ids)
        last_logits = np.array(llm.scores[llm.n_tokens - 1], dtype=np.float32)
        greedy, margins = [], []
        for _ in range(N_GREEDY):
            scores = np.array(llm.scores[llm.n_tokens - 1], dtype=np.float32)
            top_two = np.sort(scores)[-2:]
            greedy.append(int(np.argmax(scores)))
            margins.append(round(float(top_two[1] - top_two[0]), 3))
            llm.eval([greedy[-1]])
        results.append((last_logits, {
            "greedy_ids": greedy, "greedy_margins": margins,
            "greedy_text": llm.detokenize(greedy).decode("utf-8", errors="replace")}))
    return results


def main():
    gguf = str(model_path())
    vocab_only = llama_cpp.Llama(model_path=gguf, vocab_only=True, verbose=False)
    tokenizer_ids = {text: tokenize(vocab_only, text) for text in TOKENIZER_STRINGS}
    prompt_ids = [tokenize(vocab_only, text) for text in PROMPTS]
    del vocab_only

    runs = {"q4_1": run_prompts(gguf, prompt_ids)}
    with tempfile.TemporaryDirectory() as scratch:
        f32_gguf = Path(scratch) / "f32.gguf"
        dequantize_to_f32(gguf, f32_gguf)
        runs["f32"] = run_prompts(str(f32_gguf), prompt_ids)

    logits, prompts = {}, []
    for number, (text, ids) in enumerate(zip(PROMPTS, prompt_ids)):
        prompt = {"text": text, "ids": ids}
        for run, results in runs.items():
            last_logits, greedy = results[number]
            prompt[run] = greedy
            if run == "q4_1" or number in F32_LOGITS_FOR:
                logits[f"{run}_prompt_{number}"] = last_logits.astype(np.float16)  # ~85 KB compressed
        prompts.append(prompt)

    DATA.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(DATA / "llamacpp_reference.npz", **logits)
    header = {
        "produced_by": "bench/make_llamacpp_reference.py",
        "llama_cpp_python": llama_cpp.__version__,
        "gguf_sha256": GGUF_SHA256,
        "runs": "q4_1: llama.cpp on the GGUF as shipped; f32: on the same weights dequantized to F32 by llama.cpp",
        "logits": "llamacpp_reference.npz holds <run>_prompt_<i>: float16 [vocab] logits at the last prompt position",
    }
    tokenizer = [{"text": text, "ids": ids} for text, ids in tokenizer_ids.items()]
    (DATA / "llamacpp_reference.json").write_text(json_one_item_per_line(header, tokenizer=tokenizer, prompts=prompts))
    for prompt in prompts:
        print(repr(prompt["text"][:40]), "->", repr(prompt["q4_1"]["greedy_text"]),
              "| f32:", repr(prompt["f32"]["greedy_text"]))
    print(f"wrote {DATA / 'llamacpp_reference.json'} and {DATA / 'llamacpp_reference.npz'}")


if __name__ == "__main__":
    main()
