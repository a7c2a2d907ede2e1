"""tessera.compile on corpus modules against XLA:CPU's outputs, on every backend."""

import numpy as np
import pytest

import tessera
from conftest import Case, assert_close

# Dots and a model, bf16, a loop, non-default entry layouts with a tuple result (relaid on the
# way in and out), integers and predicates, f16.
CASES = ["model_mlp2", "unary_bf16", "while_fori_loop", "hand_layout_2d", "binary_div_rem_s32", "binary_f16", "argsort"]


@pytest.mark.parametrize("backend", ["llvm", "cranelift", "interp"])
@pytest.mark.parametrize("name", CASES)
def test_corpus_case(name, backend):
    case = Case(name)
    exe = tessera.compile(case.text, backend=backend)
    assert exe.backend == backend
    assert exe.compile_seconds > 0
    got = exe(*case.args())
    expected = case.expected()
    if len(expected) == 1 and not isinstance(got, tuple):
        got = (got,)
    assert isinstance(got, tuple) and len(got) == len(expected)
    for i, (g, (want, rtol, atol)) in enumerate(zip(got, expected)):
        assert_close(g, want, rtol, atol, f"{name} output {i} on {backend}")


def test_a_path_to_a_module_compiles(tmp_path):
    path = tmp_path / "negate.hlo"
    path.write_text("HloModule m\nENTRY e {\n  p = f32[3] parameter(0)\n  ROOT n = f32[3] negate(p)\n}\n")
    exe = tessera.compile(path, backend="cranelift")
    np.testing.assert_array_equal(exe(np.array([1, -2, 3], np.float32)), [-1, 2, -3])
    exe = tessera.compile(str(path))
    assert exe.parameters == [((3,), np.dtype(np.float32))]
    assert exe.results == [((3,), np.dtype(np.float32))]


def test_arrays_that_are_not_c_contiguous_are_read_correctly():
    exe = tessera.compile(
        "HloModule m\nENTRY e {\n  p = f32[3,2] parameter(0)\n  ROOT n = f32[3,2] negate(p)\n}\n"
    )
    x = np.arange(6, dtype=np.float32).reshape(2, 3).T  # a transposed view
    np.testing.assert_array_equal(exe(x), -x)


def test_scalars_and_threads():
    exe = tessera.compile(
        "HloModule m\nENTRY e {\n  a = s32[] parameter(0)\n  b = s32[] parameter(1)\n  ROOT s = s32[] add(a, b)\n}\n",
        threads=1,
    )
    assert exe(np.int32(2), np.array(40, np.int32)) == 42
