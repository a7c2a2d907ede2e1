"""tessera.jit against jax.jit on the same inputs."""

import numpy as np
import pytest

jax = pytest.importorskip("jax")
import jax.numpy as jnp  # noqa: E402

import tessera  # noqa: E402


def close(got, want, rtol=2e-5, atol=2e-6):
    got_leaves, got_tree = jax.tree_util.tree_flatten(got)
    want_leaves, want_tree = jax.tree_util.tree_flatten(want)
    assert got_tree == want_tree
    for g, w in zip(got_leaves, want_leaves):
        assert isinstance(g, np.ndarray)
        w = np.asarray(w)
        assert g.shape == w.shape and g.dtype == w.dtype, (g.shape, g.dtype, w.shape, w.dtype)
        np.testing.assert_allclose(g.astype(np.float64), w.astype(np.float64), rtol=rtol, atol=atol)


def mlp(params, x):
    for w, b in params[:-1]:
        x = jax.nn.relu(x @ w + b)
    w, b = params[-1]
    return x @ w + b


@pytest.mark.parametrize("backend", ["llvm", "cranelift"])
def test_mlp(backend):
    rng = np.random.default_rng(0)
    sizes = [64, 128, 128, 10]
    params = [
        (rng.standard_normal((m, n)).astype(np.float32) / np.sqrt(m), rng.standard_normal(n).astype(np.float32) * 0.1)
        for m, n in zip(sizes[:-1], sizes[1:])
    ]
    x = rng.standard_normal((32, 64)).astype(np.float32)
    f = tessera.jit(mlp, backend=backend)
    close(f(params, x), jax.jit(mlp)(params, x))
    # A new batch size is a new signature: compiled again, still right.
    x2 = rng.standard_normal((5, 64)).astype(np.float32)
    close(f(params, x2), jax.jit(mlp)(params, x2))


def test_softmax():
    x = np.random.default_rng(1).standard_normal((16, 1000)).astype(np.float32) * 4
    f = tessera.jit(lambda x: jax.nn.softmax(x, axis=-1))
    close(f(x), jax.jit(lambda x: jax.nn.softmax(x, axis=-1))(x), rtol=1e-5, atol=1e-7)


def test_scan():
    def cumulative(xs, h0):
        def step(h, x):
            h = jnp.tanh(h * 0.5 + x)
            return h, h.sum()

        return jax.lax.scan(step, h0, xs)

    rng = np.random.default_rng(2)
    xs = rng.standard_normal((20, 8)).astype(np.float32)
    h0 = np.zeros(8, np.float32)
    close(tessera.jit(cumulative)(xs, h0), jax.jit(cumulative)(xs, h0), rtol=1e-5, atol=1e-6)


def test_dict_in_tuple_out_with_scalars_and_static_arguments():
    def f(d, scale, power):
        y = d["a"] @ d["b"] * scale
        return y ** power, {"total": y.sum(), "count": d["n"] + 1}

    rng = np.random.default_rng(3)
    d = {"a": rng.standard_normal((4, 5)).astype(np.float32), "b": rng.standard_normal((5, 3)).astype(np.float32), "n": np.int32(7)}
    g = tessera.jit(f, static_argnums=2)
    # A Python float argument takes JAX's f32, as under jax.jit.
    got = g(d, 0.5, 2)
    want = jax.jit(f, static_argnums=2)(d, 0.5, 2)
    close(got, want)
    assert isinstance(got, tuple) and set(got[1]) == {"total", "count"}
    assert got[1]["count"].dtype == np.int32 and got[1]["count"] == 8
    close(g(d, 0.5, 3), jax.jit(f, static_argnums=2)(d, 0.5, 3))


def test_bfloat16():
    import ml_dtypes

    x = np.random.default_rng(4).standard_normal((8, 16)).astype(ml_dtypes.bfloat16)
    f = lambda x: (x * x).sum(axis=-1)  # noqa: E731
    got = tessera.jit(f)(x)
    assert got.dtype == ml_dtypes.bfloat16
    close(got, jax.jit(f)(x), rtol=2e-2, atol=1e-2)
