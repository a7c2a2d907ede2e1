#!/usr/bin/env python3
"""Benchmark programs JAX makes that the corpus lacks: loop-heavy ones (many small steps) and
model blocks (a GPT-2 style transformer block, forward and training step; a ResNet block with
batch norm, forward and backward; a bf16 attention block; causal f32 attention; an embedding
lookup's gradient; a classifier's cross-entropy loss; a vectorized binary search), as HLO text
plus arguments.

usage: python3 benches/models/programs.py OUT_DIR [NAME...]
writes OUT_DIR/NAME/module.hlo and OUT_DIR/NAME/args/{0,1,...}.npy for every program (or the
named ones); bf16 arguments are raw '<u2' bits, the corpus's convention.
"""
import os
import sys

os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import ml_dtypes  # noqa: E402
import numpy as np  # noqa: E402
from jax import lax  # noqa: E402

BF16 = jnp.bfloat16


# ---------------------------------------------------------------- loop-heavy programs
def binary_search_loop():
    """A 20 x 20 grid of queries, each a binary search (a while loop of 8 scalar steps) over a
    sorted table of 256 values: 3,200 tiny loop iterations."""

    def search(table, q):
        def cond(s):
            lo, hi = s
            return lo < hi

        def body(s):
            lo, hi = s
            mid = (lo + hi) // 2
            go_right = table[mid] < q
            return jnp.where(go_right, mid + 1, lo), jnp.where(go_right, hi, mid)

        lo, _ = lax.while_loop(cond, body, (jnp.int32(0), jnp.int32(table.shape[0])))
        return lo

    def f(table, queries):
        def row(i, acc):
            def col(j, acc):
                return acc + search(table, queries[i, j])

            return lax.fori_loop(0, queries.shape[1], col, acc)

        return lax.fori_loop(0, queries.shape[0], row, jnp.int32(0))

    rng = np.random.default_rng(1)
    table = np.sort(rng.standard_normal(256).astype(np.float32))
    queries = rng.standard_normal((20, 20)).astype(np.float32)
    return f, [table, queries]


def ds_scan_bf16():
    """A scan over the 2048 positions of a bf16[1,2048,768] sequence: each step dynamic-slices
    one position, updates an f32 running state and dynamic-update-slices its output."""

    def f(xs, decay):
        def step(h, x):
            h = h * decay + x.astype(jnp.float32)
            return h, jnp.tanh(h).astype(BF16)

        _, ys = lax.scan(step, jnp.zeros((768,), jnp.float32), xs[0])
        return ys[None]

    rng = np.random.default_rng(2)
    xs = rng.standard_normal((1, 2048, 768)).astype(ml_dtypes.bfloat16)
    decay = np.full((768,), 0.9, np.float32)
    return f, [xs, decay]


def lstm_scan():
    """An LSTM over 64 steps, batch 8, input 128, hidden 256 (f32)."""
    hidden, inputs, batch, steps = 256, 128, 8, 64

    def f(xs, wx, wh, b):
        def step(carry, x):
            h, c = carry
            z = x @ wx + h @ wh + b
            i, fg, g, o = jnp.split(z, 4, axis=-1)
            c = jax.nn.sigmoid(fg) * c + jax.nn.sigmoid(i) * jnp.tanh(g)
            h = jax.nn.sigmoid(o) * jnp.tanh(c)
            return (h, c), h

        zeros = jnp.zeros((batch, hidden), jnp.float32)
        (h, _), ys = lax.scan(step, (zeros, zeros), xs)
        return h, ys

    rng = np.random.default_rng(3)
    xs = rng.standard_normal((steps, batch, inputs)).astype(np.float32)
    wx = (rng.standard_normal((inputs, 4 * hidden)) / np.sqrt(inputs)).astype(np.float32)
    wh = (rng.standard_normal((hidden, 4 * hidden)) / np.sqrt(hidden)).astype(np.float32)
    b = np.zeros((4 * hidden,), np.float32)
    return f, [xs, wx, wh, b]


def scalar_while_10k():
    """A while loop of 10,000 scalar iterations (a linear congruential walk): per-step
    overhead and nothing else."""

    def f(x):
        def body(i, s):
            return s * jnp.float32(0.999) + jnp.float32(0.5) * jnp.sin(s + i.astype(jnp.float32))

        return lax.fori_loop(0, 10000, body, x)

    return f, [np.float32(0.25)]


# ---------------------------------------------------------------- model blocks
def _gpt2_params(rng, width=768, ffn=3072):
    def w(*shape):
        return (rng.standard_normal(shape) * 0.02).astype(np.float32)

    return {
        "ln1_g": np.ones(width, np.float32), "ln1_b": np.zeros(width, np.float32),
        "qkv": w(width, 3 * width), "qkv_b": np.zeros(3 * width, np.float32),
        "proj": w(width, width), "proj_b": np.zeros(width, np.float32),
        "ln2_g": np.ones(width, np.float32), "ln2_b": np.zeros(width, np.float32),
        "fc": w(width, ffn), "fc_b": np.zeros(ffn, np.float32),
        "out": w(ffn, width), "out_b": np.zeros(width, np.float32),
    }


def _layer_norm(x, g, b):
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) * lax.rsqrt(var + 1e-5) * g + b


def _gpt2_block(p, x, heads=12):
    t, width = x.shape[-2], x.shape[-1]
    head = width // heads
    h = _layer_norm(x, p["ln1_g"], p["ln1_b"])
    q, k, v = jnp.split(h @ p["qkv"] + p["qkv_b"], 3, axis=-1)
    q, k, v = (a.reshape(*a.shape[:-1], heads, head) for a in (q, k, v))
    s = jnp.einsum("bqhd,bkhd->bhqk", q, k) / np.sqrt(head)
    s = jnp.where(jnp.tril(jnp.ones((t, t), bool)), s, -1e9)
    a = jnp.einsum("bhqk,bkhd->bqhd", jax.nn.softmax(s, axis=-1), v).reshape(x.shape)
    x = x + a @ p["proj"] + p["proj_b"]
    h = _layer_norm(x, p["ln2_g"], p["ln2_b"])
    return x + jax.nn.gelu(h @ p["fc"] + p["fc_b"]) @ p["out"] + p["out_b"]


def gpt2_block_forward():
    """A GPT-2 small transformer block (width 768, 12 heads, MLP 3072) over 4 x 128 tokens."""
    rng = np.random.default_rng(4)
    p = _gpt2_params(rng)
    x = rng.standard_normal((4, 128, 768)).astype(np.float32)
    return (lambda p, x: _gpt2_block(p, x)), [p, x]


def gpt2_train_step():
    """One SGD step of the block above on a mean-squared loss: forward, backward, update."""
    rng = np.random.default_rng(5)
    p = _gpt2_params(rng)
    x = rng.standard_normal((4, 128, 768)).astype(np.float32)
    y = rng.standard_normal((4, 128, 768)).astype(np.float32)

    def f(p, x, y):
        loss, g = jax.value_and_grad(lambda p: jnp.mean((_gpt2_block(p, x) - y) ** 2))(p)
        return loss, jax.tree.map(lambda a, b: a - 1e-3 * b, p, g)

    return f, [p, x, y]


def resnet_block_train():
    """A ResNet basic block (two 3x3 convolutions, batch norm in training mode, ReLU, residual)
    over 8 x 32 x 32 x 64 NHWC: loss, and its gradient with respect to every parameter."""
    rng = np.random.default_rng(6)
    c = 64
    p = {
        "w1": (rng.standard_normal((3, 3, c, c)) * np.sqrt(2 / (9 * c))).astype(np.float32),
        "g1": np.ones(c, np.float32), "b1": np.zeros(c, np.float32),
        "w2": (rng.standard_normal((3, 3, c, c)) * np.sqrt(2 / (9 * c))).astype(np.float32),
        "g2": np.ones(c, np.float32), "b2": np.zeros(c, np.float32),
    }
    x = rng.standard_normal((8, 32, 32, c)).astype(np.float32)

    def bn(h, g, b):
        mean = h.mean((0, 1, 2))
        var = h.var((0, 1, 2))
        return (h - mean) * lax.rsqrt(var + 1e-5) * g + b

    def conv(h, w):
        return lax.conv_general_dilated(h, w, (1, 1), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC"))

    def block(p, x):
        h = jax.nn.relu(bn(conv(x, p["w1"]), p["g1"], p["b1"]))
        h = bn(conv(h, p["w2"]), p["g2"], p["b2"])
        return jax.nn.relu(h + x)

    def f(p, x):
        return jax.value_and_grad(lambda p: jnp.mean(block(p, x) ** 2))(p)

    return f, [p, x]


def mha_bf16():
    """A bf16 multi-head attention block (width 512, 8 heads) over 2 x 256 tokens, with an
    f32 softmax, as mixed-precision models run it."""
    rng = np.random.default_rng(7)
    width, heads = 512, 8
    head = width // heads

    def w(*shape):
        return (rng.standard_normal(shape) * 0.04).astype(ml_dtypes.bfloat16)

    p = {"q": w(width, width), "k": w(width, width), "v": w(width, width), "o": w(width, width)}
    x = rng.standard_normal((2, 256, width)).astype(ml_dtypes.bfloat16)

    def f(p, x):
        def split(a):
            return a.reshape(*a.shape[:-1], heads, head)

        q, k, v = split(x @ p["q"]), split(x @ p["k"]), split(x @ p["v"])
        s = jnp.einsum("bqhd,bkhd->bhqk", q, k, preferred_element_type=jnp.float32) / np.sqrt(head)
        a = jax.nn.softmax(s, axis=-1).astype(BF16)
        return x + jnp.einsum("bhqk,bkhd->bqhd", a, v).reshape(x.shape) @ p["o"]

    return f, [p, x]


def attention_causal():
    """Causal self-attention in f32 (2 x 8 heads x 512 tokens, head dim 128) as decoders write
    it: scores scaled by 1/sqrt(128) (not a power of two), masked to -inf above the diagonal,
    softmax, then the weighted values."""
    rng = np.random.default_rng(8)
    q, k, v = (rng.standard_normal((2, 8, 512, 128)).astype(np.float32) for _ in range(3))

    def f(q, k, v):
        s = jnp.einsum("bhqd,bhkd->bhqk", q, k) / jnp.sqrt(jnp.float32(128))
        mask = jnp.tril(jnp.ones((512, 512), bool))
        p = jax.nn.softmax(jnp.where(mask, s, -jnp.inf), axis=-1)
        return jnp.einsum("bhqk,bhkd->bhqd", p, v)

    return f, [q, k, v]


def embedding_grad():
    """An embedding lookup (a 32000 x 512 f32 table, 8 x 512 token ids) and its gradient: a
    gather, then a scatter-add of 4096 rows into a zero table."""
    rng = np.random.default_rng(9)
    table = (rng.standard_normal((32000, 512)) * 0.02).astype(np.float32)
    ids = rng.integers(0, 32000, (8, 512)).astype(np.int32)

    def f(table, ids):
        return jax.value_and_grad(lambda t: jnp.sum(jnp.tanh(jnp.take(t, ids, axis=0)) ** 2))(table)

    return f, [table, ids]


def cross_entropy_loss():
    """A classifier's loss: the mean negative log-probability of 8192 labels under
    log_softmax of f32[8192,1000] logits (take_along_axis reads one class per row)."""
    rng = np.random.default_rng(10)
    logits = rng.standard_normal((8192, 1000)).astype(np.float32)
    labels = rng.integers(0, 1000, 8192).astype(np.int32)

    def f(logits, labels):
        logp = jax.nn.log_softmax(logits)
        return -jnp.mean(jnp.take_along_axis(logp, labels[:, None], axis=1))

    return f, [logits, labels]


def searchsorted():
    """jnp.searchsorted of 1M queries in a sorted table of 4096: a while loop of 13 vector
    steps, each a midpoint, a gather from the table and two selects."""
    rng = np.random.default_rng(11)
    table = np.sort(rng.standard_normal(4096).astype(np.float32))
    queries = rng.standard_normal(1 << 20).astype(np.float32)
    return (lambda t, q: jnp.searchsorted(t, q)), [table, queries]


PROGRAMS = {
    "binary_search_loop": binary_search_loop,
    "ds_scan_bf16": ds_scan_bf16,
    "lstm_scan": lstm_scan,
    "scalar_while_10k": scalar_while_10k,
    "gpt2_block_forward": gpt2_block_forward,
    "gpt2_train_step": gpt2_train_step,
    "resnet_block_train": resnet_block_train,
    "mha_bf16": mha_bf16,
    "attention_causal": attention_causal,
    "embedding_grad": embedding_grad,
    "cross_entropy_loss": cross_entropy_loss,
    "searchsorted": searchsorted,
}


def write(out, name):
    f, args = PROGRAMS[name]()
    leaves = jax.tree.leaves(args)
    specs = jax.tree.map(lambda a: jax.ShapeDtypeStruct(np.shape(a), np.asarray(a).dtype), args)
    text = jax.jit(f).lower(*specs).as_text(dialect="hlo")
    folder = os.path.join(out, name)
    os.makedirs(os.path.join(folder, "args"), exist_ok=True)
    with open(os.path.join(folder, "module.hlo"), "w") as fh:
        fh.write(text)
    for i, a in enumerate(leaves):
        a = np.asarray(a)
        if a.dtype == ml_dtypes.bfloat16:
            a = a.view("<u2")
        np.save(os.path.join(folder, "args", f"{i}.npy"), a)
    print(f"{folder}/module.hlo: {len(leaves)} arguments, {len(text) / 1024:.0f} KiB of HLO")


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    out, names = sys.argv[1], sys.argv[2:] or list(PROGRAMS)
    for name in names:
        if name not in PROGRAMS:
            sys.exit(f"unknown program {name}; known: {', '.join(PROGRAMS)}")
        write(out, name)


if __name__ == "__main__":
    main()
