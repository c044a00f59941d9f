"""Generic QFunctions: ``Identity`` (copy) and ``Scale`` (multiply by ``ctx["scale"]``)."""

from hofem.constants import EVAL_INTERP, EvalMode
from hofem.qfunction_registry import register_gallery


def identity_apply(ctx, input, output):
    for i in range(ctx["size"]):
        output[i] = input[i]


def scale_apply(ctx, input, output):
    for i in range(ctx["size"]):
        output[i] = ctx["scale"] * input[i]


def _check(size, *modes):
    if isinstance(size, bool) or not isinstance(size, int) or size < 1:
        raise ValueError(f"size must be an integer >= 1, got {size!r}")
    for mode in modes:
        if not isinstance(mode, EvalMode) or mode.name == "WEIGHT":
            raise ValueError(f"eval modes must be hf.EVAL_NONE/INTERP/GRAD, got {mode!r}")


@register_gallery("Identity")
def _identity(size=1, in_mode=EVAL_INTERP, out_mode=EVAL_INTERP):
    _check(size, in_mode, out_mode)
    return identity_apply, [("input", size, in_mode)], [("output", size, out_mode)], {"size": size}


@register_gallery("Scale")
def _scale(size=1, scale=1.0):
    _check(size)
    context = {"size": size, "scale": float(scale)}
    return scale_apply, [("input", size, EVAL_INTERP)], [("output", size, EVAL_INTERP)], context
