"""Tessera from Python: compile XLA HLO (or a JAX function) to native code and run it on numpy
arrays, or export it ahead of time as an object file and a C header.

    import numpy as np, tessera
    exe = tessera.compile(open("module.hlo").read())        # HLO text, or a path to a .hlo file
    out = exe(np.ones((2, 3), np.float32))

    import jax.numpy as jnp
    f = tessera.jit(lambda x, w: jnp.tanh(x @ w))             # compiled per argument signature
    y = f(np.ones((4, 8), np.float32), np.ones((8, 2), np.float32))

    tessera.export(lambda x: x * 2, np.ones(4, np.float32), name="twice")   # twice.o, twice.h

Arrays cross as logical values in C order; Tessera relays them when the module declares other
layouts. numpy is the only requirement; JAX is needed by `jit` and `export` only, and
`ml_dtypes` (which JAX brings) for bfloat16 and float8 arrays.
"""

from __future__ import annotations

import os
from typing import Any, Callable, Sequence

import numpy as np

from . import _tessera
from ._tessera import CompileError, RunError, TesseraError

__all__ = ["compile", "jit", "export", "empty", "Executable", "TesseraError", "CompileError", "RunError"]

_NUMPY_DTYPES = {
    "pred": np.bool_,
    "s8": np.int8,
    "s16": np.int16,
    "s32": np.int32,
    "s64": np.int64,
    "u8": np.uint8,
    "u16": np.uint16,
    "u32": np.uint32,
    "u64": np.uint64,
    "f16": np.float16,
    "f32": np.float32,
    "f64": np.float64,
    "c64": np.complex64,
    "c128": np.complex128,
}

# Tessera's name -> ml_dtypes' name, for the types numpy lacks (one byte or two per element).
_ML_DTYPES = {
    "bf16": "bfloat16",
    "f8e3m4": "float8_e3m4",
    "f8e4m3": "float8_e4m3",
    "f8e4m3fn": "float8_e4m3fn",
    "f8e4m3b11fnuz": "float8_e4m3b11fnuz",
    "f8e4m3fnuz": "float8_e4m3fnuz",
    "f8e5m2": "float8_e5m2",
    "f8e5m2fnuz": "float8_e5m2fnuz",
    "f8e8m0fnu": "float8_e8m0fnu",
}


def _dtype(name: str) -> np.dtype:
    """The numpy dtype of Tessera's element type `name`."""
    if name in _NUMPY_DTYPES:
        return np.dtype(_NUMPY_DTYPES[name])
    if name in _ML_DTYPES:
        try:
            import ml_dtypes
        except ImportError as e:  # pragma: no cover - ml_dtypes comes with JAX
            raise TesseraError(f"element type {name} needs the ml_dtypes package (pip install ml_dtypes)") from e
        return np.dtype(getattr(ml_dtypes, _ML_DTYPES[name]))
    raise TesseraError(f"element type {name} has no numpy dtype in Tessera's Python API")


class Executable:
    """A compiled module. Call it with one array per parameter (tuple parameters flattened
    depth-first); it returns an array, or a tuple of arrays for a tuple result."""

    def __init__(self, native: Any):
        self._native = native
        self._parameters = [(tuple(dims), _dtype(dtype)) for dims, dtype in native.parameters]
        self._results = [(tuple(dims), _dtype(dtype)) for dims, dtype in native.results]

    @property
    def parameters(self) -> list[tuple[tuple[int, ...], np.dtype]]:
        """(shape, dtype) of each parameter, in order."""
        return list(self._parameters)

    @property
    def results(self) -> list[tuple[tuple[int, ...], np.dtype]]:
        """(shape, dtype) of each result leaf, in order."""
        return list(self._results)

    @property
    def compile_seconds(self) -> float:
        """Wall time of the compile, from HLO text to runnable code (a cached compile included)."""
        return self._native.compile_seconds

    @property
    def backend(self) -> str:
        return self._native.backend

    @property
    def cache(self) -> str:
        """What the persistent compile cache did: 'hit', 'miss', 'rejected' or 'off'."""
        return self._native.cache

    def _argument(self, i: int, value: Any) -> np.ndarray:
        shape, dtype = self._parameters[i]
        array = np.asarray(value)
        if array.dtype != dtype:
            raise ValueError(f"parameter {i}: expected dtype {dtype}, got {array.dtype}")
        if array.shape != shape:
            raise ValueError(f"parameter {i}: expected shape {shape}, got {array.shape}")
        # A C-contiguous array is read where it is; anything else is copied once.
        return np.ascontiguousarray(array)

    @property
    def donated_results(self) -> list[tuple[int, int]]:
        """The (result, parameter) pairs the program can write into one array (the module's
        `input_output_alias`, as `jax.jit(..., donate_argnums=...)` writes it, where the
        program honors it); empty on the interpreter."""
        return list(self._native.donated_results)

    def __call__(self, *arrays: Any, donate: Sequence[int] = ()) -> np.ndarray | tuple[np.ndarray, ...]:
        leaves = self.call_flat(arrays, donate)
        return tuple(leaves) if self._native.result_is_tuple else leaves[0]

    def call_flat(self, arrays: Sequence[Any], donate: Sequence[int] = ()) -> list[np.ndarray]:
        """Runs on one array per parameter and returns every result leaf, as a list. The
        arrays at the positions `donate` names are given up, as JAX's `donate_argnums`: a
        result the program pairs with one (`donated_results`) comes back as that very array,
        updated in place; its old values are gone."""
        if len(arrays) != len(self._parameters):
            raise ValueError(f"the executable takes {len(self._parameters)} arguments, got {len(arrays)}")
        inputs = [self._argument(i, a) for i, a in enumerate(arrays)]
        outputs: list[np.ndarray | None] = [None] * len(self._results)
        for r, p in self._native.donated_results:
            # Only a writable array given as it is can hold its result (a copy would be lost).
            if p in donate and inputs[p] is arrays[p] and inputs[p].flags.writeable and outputs[r] is None:
                outputs[r] = inputs[p]
        results = [o if o is not None else empty(s, d) for o, (s, d) in zip(outputs, self._results)]
        self._native.run([_bytes(a) for a in inputs], [_bytes(o) for o in results])
        return results

    def __repr__(self) -> str:
        params = ", ".join(f"{d}{list(s)}" for s, d in self._parameters)
        results = ", ".join(f"{d}{list(s)}" for s, d in self._results)
        return f"<tessera.Executable ({params}) -> ({results}) on {self.backend}>"


def empty(shape: Sequence[int], dtype: Any) -> np.ndarray:
    """An uninitialized C-order array whose data starts on a 64-byte boundary. Tessera's
    kernels read and write such memory where it is; other memory (numpy's large arrays start
    16 bytes past one) is copied through aligned scratch on the way in and out. Results come
    back in such arrays, so feeding them to the next call costs no copy, and a donated one
    can take its result in place."""
    dtype = np.dtype(dtype)
    count = int(np.prod(shape, dtype=np.int64))
    raw = np.empty(count * dtype.itemsize + 64, np.uint8)
    start = -raw.ctypes.data % 64
    return raw[start : start + count * dtype.itemsize].view(dtype).reshape(shape)


def _bytes(array: np.ndarray) -> memoryview:
    """The bytes of a C-contiguous array, without a copy (ml_dtypes arrays have no buffer
    format numpy can export, so they are viewed as bytes first)."""
    return memoryview(array.reshape(-1).view(np.uint8))


def compile(hlo: str | os.PathLike, backend: str = "llvm", threads: int | None = None) -> Executable:
    """Compiles an HLO module: `hlo` is its text (a string containing `HloModule`) or the path
    of a `.hlo` file. `backend` is 'llvm', 'cranelift', 'interp' or 'tiered'; `threads` the
    threads kernels run on (default: all cores). A module this machine compiled before loads
    from Tessera's compile cache (`TESSERA_CACHE=off` turns it off)."""
    text = hlo if isinstance(hlo, str) and "HloModule" in hlo else None
    if text is None:
        with open(os.fspath(hlo), encoding="utf-8") as f:
            text = f.read()
    return Executable(_tessera.compile(text, backend, threads))


def _lower(fn: Callable, args: Sequence[Any], static_argnums: Sequence[int], donate_argnums: Sequence[int] = ()):
    """(HLO text, input tree, output tree, dynamic leaves) of `fn` traced by JAX on `args`."""
    import jax

    jitted = jax.jit(fn, static_argnums=tuple(static_argnums), donate_argnums=tuple(donate_argnums), keep_unused=True)
    lowered = jitted.lower(*args)
    dynamic = [a for i, a in enumerate(args) if i not in static_argnums]
    leaves, tree = jax.tree_util.tree_flatten(dynamic)
    return lowered.as_text(dialect="hlo"), tree, lowered.out_tree, leaves


def _leaf_array(leaf: Any) -> np.ndarray:
    """A leaf as the array JAX would pass: Python scalars and 64-bit arrays take JAX's
    canonical dtypes (float32 and int32 unless x64 is enabled)."""
    import jax

    array = np.asarray(leaf)
    return array.astype(jax.dtypes.canonicalize_dtype(array.dtype), copy=False)


def jit(
    fn: Callable,
    backend: str = "llvm",
    static_argnums: int | Sequence[int] = (),
    threads: int | None = None,
    donate_argnums: int | Sequence[int] = (),
):
    """Compiles a JAX-traceable function with Tessera, once per signature of argument shapes,
    dtypes and static arguments, as `jax.jit` does. Calls take what `jax.jit(fn)` takes
    (pytrees of arrays, static Python values at `static_argnums`) and return what it returns,
    as numpy arrays. The arrays of the arguments at `donate_argnums` are given up: an output
    JAX pairs with one (same shape and dtype) may come back as that very numpy array, updated
    in place (an optimizer step then writes its new weights over the old ones)."""
    import jax

    if isinstance(static_argnums, int):
        static_argnums = (static_argnums,)
    static_argnums = tuple(static_argnums)
    if isinstance(donate_argnums, int):
        donate_argnums = (donate_argnums,)
    donate_argnums = tuple(donate_argnums)
    compiled: dict[Any, tuple[Executable, Any]] = {}

    def call(*args: Any):
        positions = [i for i in range(len(args)) if i not in static_argnums]
        leaves, tree = jax.tree_util.tree_flatten([args[i] for i in positions])
        # The leaves of each donated argument, by their index among all leaves.
        donated, start = [], 0
        for i in positions:
            count = len(jax.tree_util.tree_leaves(args[i]))
            if i in donate_argnums:
                donated.extend(range(start, start + count))
            start += count
        # A leaf that is already an array of JAX's dtype is passed as it is, so a donated one's
        # result can come back in it.
        arrays = [_leaf_array(leaf) for leaf in leaves]
        static = tuple(args[i] for i in static_argnums if i < len(args))
        key = (tree, tuple((a.shape, a.dtype) for a in arrays), static)
        if key not in compiled:
            text, _, out_tree, _ = _lower(fn, args, static_argnums, donate_argnums)
            compiled[key] = (compile(text, backend, threads), out_tree)
        exe, out_tree = compiled[key]
        return jax.tree_util.tree_unflatten(out_tree, exe.call_flat(arrays, donated))

    call.__wrapped__ = fn  # type: ignore[attr-defined]
    call.__doc__ = fn.__doc__
    return call


def export(
    fn: Callable,
    *example_args: Any,
    name: str,
    directory: str | os.PathLike = ".",
    backend: str = "llvm",
    target: str | None = None,
    cpu: str | None = None,
) -> tuple[str, str]:
    """Compiles `fn` ahead of time for the shapes and dtypes of `example_args` into
    `directory/name.o` and `directory/name.h` (as `tessera compile` does: the entry function
    `name`, the C header describing every argument and result); returns their paths. `target`
    is a target triple (default: the host), `cpu` a CPU name (default: the host's)."""
    text, _, _, _ = _lower(fn, example_args, ())
    os.makedirs(directory, exist_ok=True)
    return _tessera.export(text, name, os.fspath(directory), backend, target, cpu)
