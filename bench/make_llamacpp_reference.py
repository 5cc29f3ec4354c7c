"""Produce tests/data/llamacpp_reference.{json,npz}: what llama.cpp itself says about our GGUF.

qkv.model must agree with llama.cpp on token ids, logits and greedy continuations. This script
asks llama.cpp (through llama-cpp-python) and stores its answers. Never install llama-cpp-python
into the project environment; use a throwaway one (building llama.cpp takes ~15 min on 2 cores):

    python3 -m venv /tmp/llamacpp
    /tmp/llamacpp/bin/pip install llama-cpp-python numpy
    /tmp/llamacpp/bin/python bench/make_llamacpp_reference.py     # from the repo root

It fetches the model with qkv.fetch (stdlib only, imported from source_lib/ without installing
qkv) and overwrites the two files under tests/data/.
"""

from __future__ import annotations

import json
import sys
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


def tokenize(llm, text):
    # special=True: control tokens like <|im_start|> become their single ids, as in the chat template
    return llm.tokenize(text.encode("utf-8"), add_bos=False, special=True)


def main():
    gguf = str(model_path())
    vocab_only = llama_cpp.Llama(model_path=gguf, vocab_only=True, verbose=False)
    tokenizer_ids = {text: tokenize(vocab_only, text) for text in TOKENIZER_STRINGS}
    del vocab_only

    llm = llama_cpp.Llama(model_path=gguf, n_ctx=512, n_threads=2, logits_all=True, verbose=False)
    prompts, logits = [], {}
    for number, text in enumerate(PROMPTS):
        ids = tokenize(llm, text)
        llm.reset()
        llm.eval(ids)
        last_logits = np.array(llm.scores[llm.n_tokens - 1], dtype=np.float32)
        greedy = []
        for _ in range(N_GREEDY):
            next_id = int(np.argmax(llm.scores[llm.n_tokens - 1]))
            greedy.append(next_id)
            llm.eval([next_id])
        logits[f"prompt_{number}"] = last_logits.astype(np.float16)  # ~100 KB each; plenty for a correlation
        prompts.append({"text": text, "ids": ids, "greedy_ids": greedy,
                        "greedy_text": llm.detokenize(greedy).decode("utf-8", errors="replace")})

    DATA.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(DATA / "llamacpp_reference.npz", **logits)
    (DATA / "llamacpp_reference.json").write_text(json.dumps({
        "produced_by": "bench/make_llamacpp_reference.py",
        "llama_cpp_python": llama_cpp.__version__,
        "gguf_sha256": GGUF_SHA256,
        "tokenizer": [{"text": text, "ids": ids} for text, ids in tokenizer_ids.items()],
        "prompts": prompts,
        "logits": "llamacpp_reference.npz holds prompt_<i>: float16 [vocab] logits at the last prompt position",
    }, indent=1, ensure_ascii=False) + "\n")
    for prompt in prompts:
        print(repr(prompt["text"][:40]), "->", repr(prompt["greedy_text"]))
    print(f"wrote {DATA / 'llamacpp_reference.json'} and {DATA / 'llamacpp_reference.npz'}")


if __name__ == "__main__":
    main()
