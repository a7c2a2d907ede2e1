"""Donation from Python: a result the program pairs with a donated argument comes back as that
very array, updated in place, with the values a run that donates nothing gives."""

import numpy as np
import pytest

import tessera

SGD = """
HloModule sgd, input_output_alias={ {0}: (0, {}, may-alias), {1}: (1, {}, may-alias) }

ENTRY main {
  w = f32[256,64] parameter(0)
  v = f32[256,64] parameter(1)
  g = f32[256,64] parameter(2)
  mu = f32[] constant(0.9)
  mus = f32[256,64] broadcast(mu), dimensions={}
  lr = f32[] constant(0.125)
  lrs = f32[256,64] broadcast(lr), dimensions={}
  kept = f32[256,64] multiply(v, mus)
  v2 = f32[256,64] add(kept, g)
  step = f32[256,64] multiply(v2, lrs)
  w2 = f32[256,64] subtract(w, step)
  ROOT out = (f32[256,64], f32[256,64]) tuple(w2, v2)
}
"""


def state(seed):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal((256, 64)).astype(np.float32) for _ in range(3)]


@pytest.mark.parametrize("backend", ["llvm", "cranelift", "interp"])
def test_donated_arrays_take_their_results(backend):
    exe = tessera.compile(SGD, backend)
    assert exe.donated_results == ([] if backend == "interp" else [(0, 0), (1, 1)])
    w, v, g = state(0)
    want = exe(w, v, g)
    # Results come back 64-byte aligned: fed to the next call, they are updated in place.
    w2, v2 = exe(w, v, g)
    assert all(a.ctypes.data % 64 == 0 for a in (w2, v2))
    kept = [w2.copy(), v2.copy()]
    w3, v3 = exe(w2, v2, g, donate=(0, 1))
    assert (w3 is w2 and v3 is v2) == (backend != "interp")
    w_next, v_next = exe(kept[0], kept[1], g)
    np.testing.assert_array_equal(w3, w_next)
    np.testing.assert_array_equal(v3, v_next)
    np.testing.assert_array_equal(w2 if backend == "interp" else kept[0], kept[0])
    for got, expected in zip(exe(w, v, g), want):
        np.testing.assert_array_equal(got, expected)


def test_unaligned_and_undonated_arrays_are_left_alone():
    exe = tessera.compile(SGD, "llvm")
    w, v, g = state(1)
    copies = [w.copy(), v.copy(), g.copy()]
    want = exe(w, v, g)
    # numpy's own arrays (16 bytes past a 64-byte boundary here) still take their results,
    # written after the run; arrays not donated stay as they were.
    unaligned = np.empty(256 * 64 + 1, np.float32)[1:].reshape(256, 64)
    unaligned[...] = copies[0]
    got = exe(unaligned, v, g, donate=(0,))
    assert got[0] is unaligned and got[1] is not v
    np.testing.assert_array_equal(got[0], want[0])
    np.testing.assert_array_equal(got[1], want[1])
    np.testing.assert_array_equal(v, copies[1])
    np.testing.assert_array_equal(g, copies[2])


def test_an_array_passed_twice_is_never_written_while_read():
    exe = tessera.compile(SGD, "llvm")
    w, _, g = state(2)
    with pytest.raises(ValueError, match="overlaps"):
        exe._native.run([memoryview(w.reshape(-1).view(np.uint8))] * 2 + [memoryview(g.reshape(-1).view(np.uint8))],
                        [memoryview(w.reshape(-1).view(np.uint8)), memoryview(np.empty_like(w).reshape(-1).view(np.uint8))])


def test_jit_donates_as_jax_does():
    jax = pytest.importorskip("jax")

    def step(w, v, g):
        v = 0.9 * v + g
        return w - 0.125 * v, v

    w, v, g = (tessera.empty((256, 64), np.float32) for _ in range(3))
    for a, b in zip((w, v, g), state(3)):
        a[...] = b
    want = [np.asarray(x) for x in jax.jit(step)(w, v, g)]
    f = tessera.jit(step, donate_argnums=(0, 1))
    w2, v2 = f(w, v, g)
    assert w2 is w and v2 is v
    np.testing.assert_allclose(w2, want[0], rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(v2, want[1], rtol=1e-6, atol=1e-6)
