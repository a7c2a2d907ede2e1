"""A JAX MLP through Tessera: compiled with tessera.jit, timed against jax.jit on the same
inputs, then exported ahead of time as an object file and a C header.

    pip install ./python jax
    python examples/python/mlp.py [--backend llvm|cranelift] [--out DIR]
"""

import argparse
import statistics
import tempfile
import time

import jax
import numpy as np

import tessera


def mlp(params, x):
    for w, b in params[:-1]:
        x = jax.nn.relu(x @ w + b)
    w, b = params[-1]
    return jax.nn.log_softmax(x @ w + b, axis=-1)


def median_us(f, *args, runs=50):
    f(*args)  # warm up (and compile)
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        jax.block_until_ready(f(*args))
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e6


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", default="llvm")
    parser.add_argument("--out", default=None, help="folder for the exported object and header")
    a = parser.parse_args()

    rng = np.random.default_rng(0)
    sizes = [784, 512, 512, 10]
    params = [
        (rng.standard_normal((m, n)).astype(np.float32) / np.sqrt(m), np.zeros(n, np.float32))
        for m, n in zip(sizes[:-1], sizes[1:])
    ]
    x = rng.standard_normal((128, 784)).astype(np.float32)

    text = jax.jit(mlp).lower(params, x).as_text(dialect="hlo")
    exe = tessera.compile(text, backend=a.backend)
    print(f"tessera {a.backend}: compiled in {exe.compile_seconds * 1e3:.1f} ms (compile cache: {exe.cache})")
    f = tessera.jit(mlp, backend=a.backend)
    got = f(params, x)
    want = np.asarray(jax.jit(mlp)(params, x))
    print(f"max |tessera - jax.jit| = {np.max(np.abs(got - want)):.2e}")
    t_tessera = median_us(f, params, x)
    t_jax = median_us(jax.jit(mlp), params, x)
    print(f"run (median of 50): tessera {t_tessera:.0f} us, jax.jit {t_jax:.0f} us "
          f"(tessera at {t_jax / t_tessera:.2f}x jax's speed)")

    out = a.out or tempfile.mkdtemp(prefix="tessera-mlp-")
    obj, header = tessera.export(mlp, params, x, name="mlp", directory=out, backend=a.backend)
    print(f"exported {obj} and {header}")


if __name__ == "__main__":
    main()
