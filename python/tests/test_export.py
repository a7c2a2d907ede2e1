"""tessera.export: a JAX function compiled ahead of time, linked into a C program with gcc, run
on the same inputs as jax.jit."""

import os
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

jax = pytest.importorskip("jax")

import tessera  # noqa: E402
from conftest import REPO  # noqa: E402

# A driver for any exported entry NAME: reads every argument's bytes from argv[1], runs, and
# writes every result's bytes to argv[2], all through the header's sizes.
DRIVER = r"""
#include <stdio.h>
#include <stdlib.h>
#include "NAME.h"

int main(int argc, char** argv) {
  if (argc != 3) return 2;
  FILE* in = fopen(argv[1], "rb");
  FILE* out = fopen(argv[2], "wb");
  if (!in || !out) return 3;
  const void* args[NAME_NUM_ARGS > 0 ? NAME_NUM_ARGS : 1];
  void* results[NAME_NUM_RESULTS];
  for (int i = 0; i < NAME_NUM_ARGS; i++) {
    void* p = aligned_alloc(NAME_ALIGNMENT, (NAME_ARG_BYTES[i] + NAME_ALIGNMENT) / NAME_ALIGNMENT * NAME_ALIGNMENT);
    if (fread(p, 1, NAME_ARG_BYTES[i], in) != NAME_ARG_BYTES[i]) return 4;
    args[i] = p;
  }
  for (int i = 0; i < NAME_NUM_RESULTS; i++)
    results[i] = aligned_alloc(NAME_ALIGNMENT, (NAME_RESULT_BYTES[i] + NAME_ALIGNMENT) / NAME_ALIGNMENT * NAME_ALIGNMENT);
  void* temp = NAME_TEMP_BYTES ? aligned_alloc(NAME_ALIGNMENT, (NAME_TEMP_BYTES + NAME_ALIGNMENT) / NAME_ALIGNMENT * NAME_ALIGNMENT) : NULL;
  int32_t code = NAME(args, results, temp);
  if (code != 0) return 10 + code;
  for (int i = 0; i < NAME_NUM_RESULTS; i++) fwrite(results[i], 1, NAME_RESULT_BYTES[i], out);
  fclose(out);
  return 0;
}
"""


def runtime_library() -> Path | None:
    """libtessera_rt.a, which objects calling GEMM routines link against."""
    if "TESSERA_RT_LIB" in os.environ:
        return Path(os.environ["TESSERA_RT_LIB"])
    target = Path(os.environ.get("CARGO_TARGET_DIR", REPO / "target"))
    for profile in ["ci", "release", "debug"]:
        lib = target / profile / "libtessera_rt.a"
        if lib.is_file():
            return lib
    return None


def run_exported(tmp_path: Path, fn, args: list, name: str) -> list:
    obj, header = tessera.export(fn, *args, name=name, directory=tmp_path)
    assert Path(obj).is_file() and Path(header).is_file()
    (tmp_path / "main.c").write_text(DRIVER.replace("NAME", name))
    command = ["gcc", "-O1", "-o", str(tmp_path / "main"), str(tmp_path / "main.c"), obj, "-I", str(tmp_path)]
    if "calls nothing in libtessera_rt.a" not in Path(header).read_text():
        lib = runtime_library()
        assert lib is not None, "the object needs libtessera_rt.a: cargo build -p tessera-rt"
        command += [str(lib), "-lpthread", "-ldl"]
    subprocess.run(command + ["-lm"], check=True)
    (tmp_path / "in.bin").write_bytes(b"".join(np.ascontiguousarray(a).tobytes() for a in args))
    subprocess.run([str(tmp_path / "main"), str(tmp_path / "in.bin"), str(tmp_path / "out.bin")], check=True)
    data = (tmp_path / "out.bin").read_bytes()
    want = jax.tree_util.tree_leaves(jax.jit(fn)(*args))
    got, offset = [], 0
    for w in want:
        w = np.asarray(w)
        got.append(np.frombuffer(data, w.dtype, w.size, offset).reshape(w.shape))
        offset += w.nbytes
    assert offset == len(data)
    return list(zip(got, want))


@pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc")
@pytest.mark.parametrize("backend", ["llvm", "cranelift"])
def test_an_exported_mlp_links_and_runs(tmp_path, backend):
    rng = np.random.default_rng(5)
    x = rng.standard_normal((64, 256)).astype(np.float32)
    w1 = rng.standard_normal((256, 256)).astype(np.float32) / 16
    w2 = rng.standard_normal((256, 10)).astype(np.float32) / 16

    def mlp(x, w1, w2):
        h = jax.nn.relu(x @ w1)
        return jax.nn.softmax(h @ w2, axis=-1), h.sum()

    tmp_path = tmp_path / backend
    tmp_path.mkdir()
    obj, _ = tessera.export(mlp, x, w1, w2, name="mlp", directory=tmp_path, backend=backend)
    for got, want in run_exported(tmp_path, mlp, [x, w1, w2], "mlp"):
        np.testing.assert_allclose(got, np.asarray(want), rtol=1e-4, atol=1e-4)


def test_export_refuses_bad_names_and_backends(tmp_path):
    with pytest.raises(ValueError, match="C identifier"):
        tessera.export(lambda x: x, np.ones(2, np.float32), name="not a name", directory=tmp_path)
    with pytest.raises(ValueError, match="llvm or cranelift"):
        tessera.export(lambda x: x, np.ones(2, np.float32), name="f", directory=tmp_path, backend="interp")
