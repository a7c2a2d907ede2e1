#!/usr/bin/env python3
"""A 1B-parameter bf16 decoder-only transformer forward over 11 tokens, as HLO text plus
arguments, for timing Tessera against XLA:CPU on a model whose weights do not fit in cache.

The shape follows Gemma 3 1B: 26 layers, model width 1152, 4 query heads sharing 1 key/value
head of width 256, a GeGLU MLP of width 6912, a 262,144-token vocabulary with tied embeddings
(999M parameters, 2.0 GB of bf16). Each layer: RMS norm, q/k/v projections, rotary position
embedding, causal attention, output projection, residual; RMS norm, GeGLU MLP, residual. The
module returns the f32 logits of every token and each layer's key and value (the KV cache a
decoder keeps), as a tuple: 1 + 2 x 26 outputs.

usage: python3 benches/models/transformer_1b.py OUT_DIR [--layers N]
writes OUT_DIR/module.hlo and OUT_DIR/args/{0,1,...}.npy (bf16 as raw '<u2' bits, the corpus's
convention)
"""
import argparse
import os

os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import ml_dtypes  # noqa: E402
import numpy as np  # noqa: E402

VOCAB, WIDTH, HEADS, KV_HEADS, HEAD, FFN, TOKENS = 262144, 1152, 4, 1, 256, 6912, 11
BF16 = jnp.bfloat16


def rms_norm(x, g):
    xf = x.astype(jnp.float32)
    var = jnp.mean(xf * xf, axis=-1, keepdims=True)
    return (xf * jax.lax.rsqrt(var + 1e-6) * (1.0 + g.astype(jnp.float32))).astype(BF16)


def rope(x, positions):
    half = HEAD // 2
    freq = 1.0 / (10000.0 ** (jnp.arange(half, dtype=jnp.float32) / half))
    angle = positions[:, None].astype(jnp.float32) * freq[None, :]
    sin, cos = jnp.sin(angle)[:, None, :], jnp.cos(angle)[:, None, :]
    x1, x2 = x[..., :half].astype(jnp.float32), x[..., half:].astype(jnp.float32)
    return jnp.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1).astype(BF16)


def layer(x, w, positions):
    attn_norm, wq, wk, wv, wo, mlp_norm, wgate, wup, wdown = w
    h = rms_norm(x, attn_norm)
    q = (h @ wq).reshape(TOKENS, HEADS, HEAD)
    k = (h @ wk).reshape(TOKENS, KV_HEADS, HEAD)
    v = (h @ wv).reshape(TOKENS, KV_HEADS, HEAD)
    q, k = rope(q, positions), rope(k, positions)
    kq = jnp.repeat(k, HEADS // KV_HEADS, axis=1)
    vq = jnp.repeat(v, HEADS // KV_HEADS, axis=1)
    scores = jnp.einsum("qhd,khd->hqk", q, kq, preferred_element_type=jnp.float32) / np.sqrt(HEAD)
    mask = jnp.tril(jnp.ones((TOKENS, TOKENS), bool))
    scores = jnp.where(mask[None], scores, -1e30)
    probs = jax.nn.softmax(scores, axis=-1).astype(BF16)
    ctx = jnp.einsum("hqk,khd->qhd", probs, vq).reshape(TOKENS, HEADS * HEAD)
    x = x + ctx @ wo
    h = rms_norm(x, mlp_norm)
    x = x + (jax.nn.gelu(h @ wgate) * (h @ wup)) @ wdown
    return x, k, v


def forward(tokens, embed, final_norm, *layer_weights):
    x = embed[tokens] * jnp.asarray(np.sqrt(WIDTH), BF16)
    positions = jnp.arange(TOKENS)
    cache = []
    for i in range(len(layer_weights) // 9):
        x, k, v = layer(x, layer_weights[9 * i : 9 * i + 9], positions)
        cache += [k, v]
    x = rms_norm(x, final_norm)
    logits = jnp.einsum("td,vd->tv", x, embed, preferred_element_type=jnp.float32)
    return (logits, *cache)


def layer_shapes():
    return [
        (WIDTH,), (WIDTH, HEADS * HEAD), (WIDTH, KV_HEADS * HEAD), (WIDTH, KV_HEADS * HEAD),
        (HEADS * HEAD, WIDTH), (WIDTH,), (WIDTH, FFN), (WIDTH, FFN), (FFN, WIDTH),
    ]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out")
    ap.add_argument("--layers", type=int, default=26)
    a = ap.parse_args()
    rng = np.random.default_rng(1)
    shapes = [(VOCAB, WIDTH), (WIDTH,)] + layer_shapes() * a.layers
    args_dir = os.path.join(a.out, "args")
    os.makedirs(args_dir, exist_ok=True)
    tokens = rng.integers(0, VOCAB, TOKENS).astype(np.int32)
    np.save(os.path.join(args_dir, "0.npy"), tokens)
    specs = [jax.ShapeDtypeStruct(tokens.shape, jnp.int32)]
    for i, shape in enumerate(shapes):
        # Norm gains near zero (the model scales by 1 + g); matrices with 1/sqrt(fan-in) scale
        # so activations stay O(1) through all layers.
        scale = 0.1 if len(shape) == 1 else 1.0 / np.sqrt(shape[0] if i != 0 else shape[1])
        w = (rng.standard_normal(shape, dtype=np.float32) * scale).astype(ml_dtypes.bfloat16)
        np.save(os.path.join(args_dir, f"{i + 1}.npy"), w.view(np.uint16))
        specs.append(jax.ShapeDtypeStruct(shape, BF16))
    text = jax.jit(forward).lower(*specs).as_text(dialect="hlo")
    with open(os.path.join(a.out, "module.hlo"), "w") as f:
        f.write(text)
    params = sum(int(np.prod(s)) for s in shapes)
    print(f"{a.out}/module.hlo: {a.layers} layers, {params / 1e9:.3f}B parameters, {len(shapes) + 1} arguments")


if __name__ == "__main__":
    main()
