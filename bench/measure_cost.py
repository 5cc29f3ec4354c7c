"""Lesson 07's measurements, printed with the ratios the lesson's goals are stated in: the quadratic wall of one
head, where SmolLM2's attention products overtake the rest of a layer, recurrence against attention, the KV
cache's speed-up (goal >= 5x for 64 new tokens after a 256-token prompt, both generations run in full), online
softmax at T = 8,192 (goals: peak memory <= 5% of naive attention's, time <= 1.5x), and the solution notebook
run end to end with nbclient (goal <= 90 s).

    .venv/bin/python bench/measure_cost.py            # everything
    .venv/bin/python bench/measure_cost.py --no-notebook
"""
import os
import pathlib
import sys
import time

import numpy as np

from qkv import cost, heads, kv_cache, model
from qkv.attention import attention

ROOT = pathlib.Path(__file__).resolve().parents[1]
NOTEBOOK = ROOT / "solutions" / "07-cost" / "07-cost.ipynb"


def goal(label, value, limit, at_least=False):
    met = value >= limit if at_least else value <= limit
    sign = ">=" if at_least else "<="
    print(f"  {label}: {value:.3g} (goal {sign} {limit:g}: {'met' if met else 'NOT met'})")


def counting():
    print("== counting")
    for T in (8, 16, 32):
        print(f"  {T} tokens -> {cost.score_count(T):,} scores")
    print(f"  GPT-2 small at 1,024 tokens: {cost.score_count(1024):,} per head per layer, "
          f"{cost.score_count(1024, 12, 12):,} for 12 x 12")
    print(f"  4,096 -> 16,384 tokens: x{cost.cost_ratio(4096, 16384):g};  "
          f"2,048 -> 8,192: x{cost.cost_ratio(2048, 8192):g}")


def wall():
    print("== one head (d = 64), naive attention")
    lengths = [128, 256, 512, 1024, 2048, 4096, 8192]
    seconds, peaks = [], []
    for T in lengths:
        s, p = cost.measure_attention(cost.naive_attention, T, repeats=3 if T <= 2048 else 1)
        seconds.append(s)
        peaks.append(p)
        print(f"  T = {T:>5}: {s * 1e3:>9.1f} ms, peak {p / 2**20:>8.1f} MiB")
    large = slice(3, None)
    print(f"  fitted on T >= 1024: time ~ T^{cost.fit_exponent(lengths[large], seconds[large]):.2f}, "
          f"peak memory ~ T^{cost.fit_exponent(lengths[large], peaks[large]):.2f}")


def smollm2_layers(m):
    print("== SmolLM2: FLOPs per layer and one layer measured")
    c = m.config
    print(f"  crossover (products = projections + MLP): T = {cost.crossover_length(c):,.0f}")
    for T in (256, 512, 1024, 2048, 4096):
        flops = cost.layer_flops(c, T)
        share = flops["attention products"] / sum(flops.values())
        s = cost.layer_seconds(m, T)
        products_s = s["Q K^T"] + s["weights @ V"]
        print(f"  T = {T:>5}: products {share:>6.1%} of the FLOPs; "
              f"attention block {s['attention block'] * 1e3:>8.1f} ms "
              f"({s['attention block'] / T * 1e6:>6.1f} us/token), MLP {s['MLP'] * 1e3:>7.1f} ms "
              f"({s['MLP'] / T * 1e6:>5.1f} us/token)")
        # what the count leaves out: the softmax's time, and the products' lower FLOP rate on [T, T] arrays
        softmax_share = s['mask and softmax'] / (products_s + s['mask and softmax'])
        print(f"           mask and softmax {softmax_share:>4.0%} of the "
              f"[T, T] work's time; GFLOP/s products {flops['attention products'] / products_s / 1e9:.1f}, "
              f"MLP {flops['MLP'] / s['MLP'] / 1e9:.1f}")


def recurrence():
    print("== recurrence against one attention layer, width 64")
    rng = np.random.default_rng(0)
    W_x, W_h, W_Q, W_K, W_V = (rng.normal(size=(64, 64)) / 8 for _ in range(5))
    for T in (256, 1024, 4096, 8192):
        X = rng.normal(size=(T, 64))
        start = time.perf_counter()
        H = cost.rnn_forward(X, W_x, W_h)
        rnn_s = time.perf_counter() - start
        start = time.perf_counter()
        np.tanh(X @ W_x + H @ W_h)
        batched_s = time.perf_counter() - start
        start = time.perf_counter()
        attention(X @ W_Q, X @ W_K, X @ W_V)
        att_s = time.perf_counter() - start
        print(f"  T = {T:>5}: recurrent {rnn_s * 1e3:>8.2f} ms in {T} steps (path T-1 = {T - 1}); the same arithmetic "
              f"as one product {batched_s * 1e3:>7.2f} ms (x{rnn_s / batched_s:.0f} for waiting); attention "
              f"{att_s * 1e3:>8.1f} ms in 1 step (path 1), x{att_s / rnn_s:.2f} the recurrence's time")
        rnn_rate = cost.rnn_flops(T, 64, 64) / rnn_s
        att_rate = (heads.attention_flops(T, 64, 1, 64, 1) - 2 * T * 64 * 64) / att_s   # no output projection here
        print(f"           GFLOP/s: recurrent {rnn_rate / 1e9:.2f}, attention {att_rate / 1e9:.2f} "
              f"(x{att_rate / rnn_rate:.1f})")

def kv_cache_generation(m):
    print("== KV cache: 64 new tokens after a 256-token prompt, both generations in full")
    c = m.config
    prompt = [int(i) for i in np.random.default_rng(7).integers(1000, c.vocab_size, size=256)]
    start = time.perf_counter()
    cached, cached_logits = kv_cache.generate_with_cache(m, prompt, 64, return_logits=True)
    with_cache = time.perf_counter() - start
    start = time.perf_counter()
    plain, plain_logits = [], []
    for _ in range(len(cached)):                       # model.generate's loop, keeping the logits it chose from
        row = model.forward(m, prompt + plain).logits[-1].copy()   # a view would keep all [T, vocab] logits alive
        plain_logits.append(row)
        plain.append(int(np.argmax(row)))
    without = time.perf_counter() - start
    gap = float(np.max(np.abs(np.array(plain_logits) - cached_logits)))
    print(f"  {len(cached)} tokens: with the cache {with_cache:.1f} s, without {without:.1f} s; "
          f"same tokens: {cached == plain}; largest logit difference {gap:.2g} (must be <= 1e-4)")
    goal("speed-up without / with the cache", without / with_cache, 5, at_least=True)

    Q, K, V = cost.random_qkv(4096, 64)
    lengths, step_s, full_s = [512, 1024, 2048, 4096], [], []
    for T in lengths:
        start = time.perf_counter()
        for _ in range(50):
            cost.attention_step(Q[None, T - 1:T], K[None, :T], V[None, :T])
        step_s.append((time.perf_counter() - start) / 50)
        start = time.perf_counter()
        attention(Q[:T], K[:T], V[:T])
        full_s.append(time.perf_counter() - start)
    print(f"  one head, cost of one new token: with the cache ~ T^{cost.fit_exponent(lengths, step_s):.2f}, "
          f"recomputing ~ T^{cost.fit_exponent(lengths, full_s):.2f} (T = {lengths})")
    smol = heads.AttentionShape("SmolLM2", c.n_layers, c.d_model, c.n_heads, c.n_kv_heads, c.d_head)
    for shape in (heads.as_multi_head(smol), smol):
        per_token = heads.kv_cache_bytes_per_token(shape, 2)
        print(f"  {shape.name}: {per_token:,} B/token, {per_token * c.context_length / 2**20:.1f} MiB at "
              f"{c.context_length} tokens (16-bit)")


def online_softmax():
    print("== online softmax at T = 8,192, one head, chunks of 256")
    # measured back to back, so that both see the same load on the machine
    naive_s, naive_peak = cost.measure_attention(cost.naive_attention, 8192)
    chunked_s, chunked_peak = cost.measure_attention(cost.chunked_attention, 8192, chunk=256)
    print(f"  naive {naive_s:.2f} s, {naive_peak / 2**20:.0f} MiB; chunked {chunked_s:.2f} s, "
          f"{chunked_peak / 2**20:.1f} MiB")
    goal("peak memory chunked / naive", chunked_peak / naive_peak, 0.05)
    goal("time chunked / naive", chunked_s / naive_s, 1.5)
    for chunk in (256, 512):
        full = cost.measure_attention(cost.chunked_attention, 4096, chunk=chunk, repeats=2)[0]
        causal = cost.measure_attention(cost.causal_chunked_attention, 4096, chunk=chunk, repeats=2)[0]
        computed, grid = cost.causal_block_counts(4096, chunk)
        print(f"  causal at T = 4096, chunk {chunk}: {computed} of {grid} blocks computed ({computed / grid:.1%}); "
              f"time causal / all blocks {causal / full:.2f}")


def notebook_time():
    import nbformat
    from nbclient import NotebookClient

    print("== the solution notebook, end to end (nbclient, from autograde/ like nbgrader)")
    nb = nbformat.read(NOTEBOOK, as_version=4)
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT / "autograde"), os.environ.get("PYTHONPATH")]))
    start = time.perf_counter()
    NotebookClient(nb, timeout=900, kernel_name="python3",
                   resources={"metadata": {"path": str(ROOT / "autograde")}}).execute()
    goal("seconds", time.perf_counter() - start, 90)


def main():
    print(f"load average before: {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores")
    m = model.load()
    counting()
    wall()
    smollm2_layers(m)
    recurrence()
    kv_cache_generation(m)
    online_softmax()
    if "--no-notebook" not in sys.argv:
        notebook_time()
    print(f"load average after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
