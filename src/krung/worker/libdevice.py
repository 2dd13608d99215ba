"""libdevice under Triton's interpreter: the math a GPU kernel calls, done in numpy.

On a GPU, `triton.language.extra.libdevice` is a module of stubs that the compiler swaps for
the backend's (`triton.language.extra.cuda.libdevice`), whose functions call
`core.extern_elementwise` with a `__nv_*` symbol. Triton's interpreter (3.6 and 3.9) does
neither: a stub returns None (a TypeError further on), and `extern_elementwise` raises
NotImplementedError. krung patches the two narrowest points: while a kernel that refers to
libdevice runs, the stubs are the CUDA module's functions (as the compiler does), and the
interpreter's builder computes each `__nv_*` symbol in numpy (torch for the special
functions), in the argument's own precision. The directed roundings (`_rd`, `_ru`, `_rz`) of
the arithmetic ones round to nearest: at most one ulp apart. A symbol with no numpy
counterpart raises NotImplementedError naming it, with what to use instead.
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Callable
from typing import Any

_PATCHED = False
NO_COUNTERPART = "libdevice's {symbol} has no numpy counterpart in krung's interpreter patch"


def fix_libdevice() -> None:
    """Patch the interpreter once, in the process that runs the kernels."""
    global _PATCHED
    if _PATCHED:
        return
    from triton.language.extra import libdevice as stubs
    from triton.language.extra.cuda import libdevice as cuda
    from triton.runtime import interpreter

    interpreter.InterpreterBuilder.create_extern_elementwise = create_extern_elementwise
    original = interpreter._patch_lang
    refers: dict[int, bool] = {}  # per kernel function: whether it reaches libdevice at all

    @functools.wraps(original)
    def patch_lang(fn):  # type: ignore[no-untyped-def]
        scope = original(fn)
        if refers.setdefault(id(fn), _refers_to_libdevice(fn, (stubs, cuda))):
            interpreter._patch_builtin(cuda, interpreter.interpreter_builder, scope)
            for name in dir(stubs):
                if not name.startswith("_") and callable(getattr(cuda, name, None)):
                    scope.set_attr(stubs, name, getattr(cuda, name))
            names = _Globals(fn.__globals__)
            for name, value in list(fn.__globals__.items()):  # `from ...libdevice import tanh`
                if getattr(value, "__module__", None) in (stubs.__name__, cuda.__name__):
                    scope.set_attr(names, name, getattr(cuda, value.__name__))
        return scope

    interpreter._patch_lang = patch_lang
    _PATCHED = True


def _refers_to_libdevice(fn: Any, modules: tuple) -> bool:
    names = {m.__name__ for m in modules}
    return any(value in modules or getattr(value, "__module__", None) in names
               or getattr(value, "__name__", None) == "triton.language.extra"
               for value in fn.__globals__.values())


class _Globals:
    """A module's globals dict seen as attributes, so the interpreter's patch scope can set
    and restore a name there."""

    def __init__(self, names: dict[str, Any]) -> None:
        object.__setattr__(self, "names", names)

    def __getattr__(self, name: str) -> Any:
        try:
            return self.names[name]
        except KeyError:
            raise AttributeError(name) from None

    def __setattr__(self, name: str, value: Any) -> None:
        self.names[name] = value

    def __delattr__(self, name: str) -> None:
        del self.names[name]


def create_extern_elementwise(self, lib_name, lib_path, symbol, args, ret_type, is_pure):  # type: ignore[no-untyped-def]
    """The interpreter builder's extern call: `symbol` on the argument handles' arrays."""
    import numpy as np
    from triton.runtime import interpreter

    compute = function_for(symbol)
    if compute is None:
        raise NotImplementedError(NO_COUNTERPART.format(symbol=symbol))  # explain.py: the hint
    arrays = [np.asarray(a.data) for a in args]
    result = np.asarray(compute(*arrays))
    dtype = interpreter._get_np_dtype(ret_type)
    if result.dtype != dtype:
        result = result.astype(dtype)
    return interpreter.TensorHandle(result, ret_type.scalar)


@functools.cache
def function_for(symbol: str) -> Callable[..., Any] | None:
    """The numpy function for a `__nv_*` symbol, or None."""
    name = symbol.removeprefix("__nv_").removeprefix("fast_")
    if name in _EXACT:
        return _EXACT[name]
    convert = re.fullmatch(r"(float|double|int|uint|ll|ull)2(float|double|int|uint|ll|ull)"
                           r"_(rn|rd|ru|rz)", name)
    if convert:  # the result is cast to the return type after
        to_float = convert.group(2) in ("float", "double")
        return (lambda x: x) if to_float else _ROUND[convert.group(3)]
    arithmetic = re.fullmatch(r"[fd](add|sub|mul|div|rcp|sqrt|rsqrt|ma)_(rn|rd|ru|rz)", name)
    if arithmetic:
        return _EXACT["fma" if arithmetic.group(1) == "ma" else arithmetic.group(1)]
    fma = re.fullmatch(r"fmaf?(_(rn|rd|ru|rz))?", name)
    if fma:
        return _EXACT["fma"]
    for base in (name, name[:-1] if name.endswith("f") else None):  # expf -> exp
        if base in _FLOAT:
            return _FLOAT[base]
    return None


def _torch(name: str) -> Callable[..., Any]:
    """A torch.special function on numpy arrays, in their own dtype."""
    def call(x):  # type: ignore[no-untyped-def]
        import torch

        found = getattr(torch.special, name, None) or getattr(torch, name)
        return found(torch.from_numpy(np_array(x))).numpy()
    return call


def np_array(x: Any) -> Any:
    import numpy as np

    return np.ascontiguousarray(x)


def _np(name: str) -> Callable[..., Any]:
    def call(*xs):  # type: ignore[no-untyped-def]
        import numpy as np

        return getattr(np, name)(*xs)
    return call


def _same_dtype(compute: Callable[..., Any]) -> Callable[..., Any]:
    """`compute` in float64, the result in the first argument's dtype."""
    def call(*xs):  # type: ignore[no-untyped-def]
        import numpy as np

        return np.asarray(compute(*(np.asarray(x, dtype=np.float64) for x in xs))
                          ).astype(xs[0].dtype)
    return call


def _vectorised(scalar: Callable[[float], float]) -> Callable[..., Any]:
    def call(x):  # type: ignore[no-untyped-def]
        import numpy as np

        return np.vectorize(scalar, otypes=[x.dtype])(x)
    return call


def _round_half_away(x: Any) -> Any:
    import numpy as np

    return np.copysign(np.floor(np.abs(x) + 0.5), x)


def _remainder(x: Any, y: Any) -> Any:  # IEEE remainder: the quotient rounded to even
    import numpy as np

    return x - np.rint(x / y) * y


def _ilogb(x: Any) -> Any:
    import numpy as np

    return (np.frexp(x)[1] - 1).astype(np.int32)


def _predicate(name: str) -> Callable[..., Any]:
    def call(x):  # type: ignore[no-untyped-def]
        import numpy as np

        return getattr(np, name)(x).astype(np.int32)
    return call


def _view(dtype: str) -> Callable[..., Any]:
    def call(x):  # type: ignore[no-untyped-def]
        return np_array(x).view(dtype)
    return call


def _mulhi(bits: int) -> Callable[..., Any]:
    def call(a, b):  # type: ignore[no-untyped-def]
        import numpy as np

        high = np.vectorize(lambda p, q: (int(p) * int(q)) >> bits, otypes=[object])(a, b)
        return high.astype(a.dtype)
    return call


def _bits(scalar: Callable[[int, int], int]) -> Callable[..., Any]:
    """An integer bit function, lane by lane over the argument's bits (unsigned; the result is
    cast to the symbol's return type after)."""
    def call(x):  # type: ignore[no-untyped-def]
        import numpy as np

        width = x.dtype.itemsize * 8
        unsigned = x.view(f"uint{width}")
        return np.vectorize(lambda v: scalar(int(v), width), otypes=[np.uint64])(unsigned)
    return call


# Functions of floating-point arguments, called as `name` (double) or `namef` (float).
_FLOAT: dict[str, Callable[..., Any]] = {
    **{n: _np(n) for n in ("sin", "cos", "tan", "sinh", "cosh", "tanh", "exp", "exp2",
                           "expm1", "log", "log2", "log10", "log1p", "sqrt", "cbrt", "floor",
                           "ceil", "trunc", "rint", "hypot", "copysign", "fmod", "nextafter",
                           "ldexp")},
    "asin": _np("arcsin"), "acos": _np("arccos"), "atan": _np("arctan"),
    "asinh": _np("arcsinh"), "acosh": _np("arccosh"), "atanh": _np("arctanh"),
    "atan2": _np("arctan2"), "fabs": _np("abs"), "nearbyint": _np("rint"),
    "pow": _np("power"), "powi": _same_dtype(lambda x, n: x ** n), "scalbn": _np("ldexp"),
    "exp10": lambda x: x.dtype.type(10) ** x, "rsqrt": lambda x: 1 / _np("sqrt")(x),
    "rcbrt": lambda x: 1 / _np("cbrt")(x), "rhypot": lambda x, y: 1 / _np("hypot")(x, y),
    "round": _round_half_away, "remainder": _remainder, "logb": lambda x: _ilogb(x).astype(
        x.dtype), "ilogb": _ilogb, "fdim": lambda x, y: _np("maximum")(x - y, 0),
    "saturate": lambda x: _np("clip")(x, 0, 1),
    "sinpi": _same_dtype(lambda x: _np("sin")(math.pi * x)),
    "cospi": _same_dtype(lambda x: _np("cos")(math.pi * x)),
    "norm3d": _same_dtype(lambda a, b, c: _np("sqrt")(a * a + b * b + c * c)),
    "norm4d": _same_dtype(lambda a, b, c, d: _np("sqrt")(a * a + b * b + c * c + d * d)),
    "rnorm3d": _same_dtype(lambda a, b, c: 1 / _np("sqrt")(a * a + b * b + c * c)),
    "rnorm4d": _same_dtype(lambda a, b, c, d: 1 / _np("sqrt")(a * a + b * b + c * c + d * d)),
    "erf": _torch("erf"), "erfc": _torch("erfc"), "erfinv": _torch("erfinv"),
    "erfcinv": lambda x: _torch("erfinv")(1 - x), "erfcx": _torch("erfcx"),
    "lgamma": _torch("lgamma"), "tgamma": _vectorised(math.gamma),
    "normcdf": _torch("ndtr"), "normcdfinv": _torch("ndtri"),
    "cyl_bessel_i0": _torch("i0"), "cyl_bessel_i1": _torch("i1"),
    "j0": _torch("bessel_j0"), "j1": _torch("bessel_j1"),
    "y0": _torch("bessel_y0"), "y1": _torch("bessel_y1"),
    "isnan": _predicate("isnan"), "isinf": _predicate("isinf"),
    "isfinite": _predicate("isfinite"), "finite": _predicate("isfinite"),
    "signbit": _predicate("signbit"), "isnand": _predicate("isnan"),
    "isinfd": _predicate("isinf"), "isfinited": _predicate("isfinite"),
    "signbitd": _predicate("signbit"), "llrint": _np("rint"), "llround": _round_half_away,
}

# Names taken whole: arithmetic, bit casts, integers.
_EXACT: dict[str, Callable[..., Any]] = {
    "add": lambda x, y: x + y, "sub": lambda x, y: x - y, "mul": lambda x, y: x * y,
    "div": lambda x, y: x / y, "fdividef": lambda x, y: x / y, "rcp": lambda x: 1 / x,
    "sqrt": _np("sqrt"), "rsqrt": lambda x: 1 / _np("sqrt")(x),
    "fma": _same_dtype(lambda x, y, z: x * y + z),
    "float_as_int": _view("int32"), "float_as_uint": _view("uint32"),
    "int_as_float": _view("float32"), "uint_as_float": _view("float32"),
    "double_as_longlong": _view("int64"), "longlong_as_double": _view("float64"),
    "abs": _np("abs"), "llabs": _np("abs"),
    "mulhi": _mulhi(32), "umulhi": _mulhi(32), "mul64hi": _mulhi(64), "umul64hi": _mulhi(64),
    "hadd": lambda x, y: (x.astype("int64") + y) >> 1,
    "rhadd": lambda x, y: (x.astype("int64") + y + 1) >> 1,
    "uhadd": lambda x, y: (x.astype("uint64") + y) >> 1,
    "urhadd": lambda x, y: (x.astype("uint64") + y + 1) >> 1,
    **dict.fromkeys(("popc", "popcll"), _bits(lambda v, width: v.bit_count())),
    **dict.fromkeys(("clz", "clzll"), _bits(lambda v, width: width - v.bit_length())),
    **dict.fromkeys(("ffs", "ffsll"), _bits(lambda v, width: (v & -v).bit_length())),
    **dict.fromkeys(("brev", "brevll"), _bits(lambda v, width: int(f"{v:0{width}b}"[::-1], 2))),
    "sad": lambda x, y, z: _np("abs")(x.astype("int64") - y) + z,
    "usad": lambda x, y, z: _np("abs")(x.astype("int64") - y) + z,
}

_ROUND: dict[str, Callable[..., Any]] = {"rn": _np("rint"), "rd": _np("floor"),
                                         "ru": _np("ceil"), "rz": _np("trunc")}
