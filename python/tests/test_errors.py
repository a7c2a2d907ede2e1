"""Bad inputs raise the right Python exceptions, with Tessera's message, and never crash."""

import numpy as np
import pytest

import tessera

NEGATE = "HloModule m\nENTRY e {\n  p = f32[2,3] parameter(0)\n  q = s32[] parameter(1)\n  ROOT n = f32[2,3] negate(p)\n}\n"


@pytest.fixture(scope="module")
def exe():
    return tessera.compile(NEGATE, backend="cranelift")


def test_wrong_count(exe):
    with pytest.raises(ValueError, match="takes 2 arguments, got 1"):
        exe(np.ones((2, 3), np.float32))


def test_wrong_shape_names_the_parameter(exe):
    with pytest.raises(ValueError, match=r"parameter 0: expected shape \(2, 3\), got \(3, 2\)"):
        exe(np.ones((3, 2), np.float32), np.int32(0))


def test_wrong_dtype_names_the_parameter(exe):
    with pytest.raises(ValueError, match="parameter 1: expected dtype int32, got float64"):
        exe(np.ones((2, 3), np.float32), 1.5)
    with pytest.raises(ValueError, match="parameter 0: expected dtype float32, got float64"):
        exe(np.ones((2, 3)), np.int32(0))


def test_unparsable_text_gives_line_and_column():
    with pytest.raises(tessera.CompileError, match=r"^4:19: expects opcode but sees: negat"):
        tessera.compile("HloModule m\nENTRY e {\n  p = f32[2] parameter(0)\n  ROOT n = f32[2] negat(p)\n}\n")


def test_invalid_modules_name_the_instruction():
    text = "HloModule m\nENTRY e {\n  p = f32[2] parameter(0)\n  ROOT n = f32[3] negate(p)\n}\n"
    with pytest.raises(tessera.CompileError, match="instruction %n: .*f32\\[3\\]"):
        tessera.compile(text)


def test_unsupported_ops_name_the_op():
    text = (
        "HloModule m\nENTRY e {\n  p = f32[2] parameter(0)\n"
        '  ROOT c = f32[2] custom-call(p), custom_call_target="my_unknown_target"\n}\n'
    )
    with pytest.raises(tessera.CompileError, match="my_unknown_target"):
        tessera.compile(text)


def test_unknown_backend_and_missing_files():
    with pytest.raises(ValueError, match="unknown backend 'gpu'"):
        tessera.compile(NEGATE, backend="gpu")
    with pytest.raises(FileNotFoundError):
        tessera.compile("/no/such/module.hlo")


def test_errors_are_tessera_errors():
    assert issubclass(tessera.CompileError, tessera.TesseraError)
    assert issubclass(tessera.RunError, tessera.TesseraError)
    assert issubclass(tessera.TesseraError, Exception)


def test_the_native_layer_refuses_results_that_alias_other_buffers():
    exe = tessera.compile("HloModule m\nENTRY e {\n  p = f32[4] parameter(0)\n  ROOT n = f32[4] negate(p)\n}\n")
    a = np.ones(8, np.float32)
    view = memoryview(a.view(np.uint8))
    # Half overlapping the argument: refused. The very buffer of the argument is a donation,
    # which takes the result.
    with pytest.raises(ValueError, match="overlaps"):
        exe._native.run([view[:16]], [view[8:24]])
    exe._native.run([view[:16]], [view[:16]])
    assert a.tolist() == [-1.0] * 4 + [1.0] * 4
    with pytest.raises(ValueError, match="read-only"):
        exe._native.run([view[:16]], [memoryview(bytes(16))])
    with pytest.raises(ValueError, match="needs 16 bytes, the buffer has 8"):
        exe._native.run([memoryview(bytes(8))], [memoryview(bytearray(16))])
