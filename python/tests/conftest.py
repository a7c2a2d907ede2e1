"""Shared helpers: the corpus (../shared/corpus beside the repository, or TESSERA_SHARED) and
its tolerance rule."""

import json
import os
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[2]


def shared() -> Path:
    return Path(os.environ.get("TESSERA_SHARED", REPO.parent / "shared"))


def _array(path: Path, dtype: str) -> np.ndarray:
    """A corpus .npy file as the case's dtype (bf16/f16 are stored as raw uint16 bits)."""
    a = np.load(path)
    if dtype == "bfloat16":
        import ml_dtypes

        return a.view(ml_dtypes.bfloat16)
    if dtype == "float16" and a.dtype == np.uint16:
        return a.view(np.float16)
    return a


class Case:
    def __init__(self, name: str):
        self.dir = shared() / "corpus" / name
        if not self.dir.is_dir():
            pytest.fail(f"no corpus case {self.dir} (set TESSERA_SHARED)")
        self.meta = json.loads((self.dir / "case.json").read_text())
        self.text = (self.dir / "module.hlo").read_text()

    def args(self) -> list:
        return [_array(self.dir / a["file"], a["dtype"]) for a in self.meta["args"]]

    def expected(self) -> list:
        return [(_array(self.dir / o["file"], o["dtype"]), o["rtol"], o["atol"]) for o in self.meta["outputs"]]


def assert_close(got: np.ndarray, want: np.ndarray, rtol: float, atol: float, what: str = ""):
    """The corpus rule: |a - e| <= atol + rtol * |e|, NaN at the same places, infinities equal;
    integers and booleans exact."""
    assert got.shape == want.shape, f"{what}: shape {got.shape} != {want.shape}"
    assert got.dtype == want.dtype, f"{what}: dtype {got.dtype} != {want.dtype}"
    if want.dtype.kind in "biu":
        np.testing.assert_array_equal(got, want, err_msg=what)
        return
    g, w = got.astype(np.complex128 if want.dtype.kind == "c" else np.float64), want.astype(
        np.complex128 if want.dtype.kind == "c" else np.float64
    )
    assert np.array_equal(np.isnan(g), np.isnan(w)), f"{what}: NaNs differ"
    finite = np.isfinite(w)
    assert np.array_equal(g[~finite & ~np.isnan(w)], w[~finite & ~np.isnan(w)]), f"{what}: infinities differ"
    err = np.abs(g[finite] - w[finite])
    bound = atol + rtol * np.abs(w[finite])
    assert np.all(err <= bound), f"{what}: worst excess {np.max(err - bound)}"
