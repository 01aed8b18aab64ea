"""Judges for notebook 11 (ONNX custom operators); see helpers.exercises.

The truth comes from ONNX Runtime: `helpers.onnx_custom.matching_resize_attrs` and
`interpolate_matches` run ONNX `Resize` against `F.interpolate`, and the composite asinh graph
(section 3's `AsinhFunctionModel`, exported with the TorchScript exporter) is run on the inputs
the exercises ask about. CPU only.
"""

from __future__ import annotations

import functools
import math
from typing import Any

import numpy as np
import torch

from helpers.exercises import Hint, choice_set, exercise, tr

#: The inputs exercise 11.3 asks about.
PROBES = (-1e4, -1e3, -10.0, 1e4)

_DEFAULTS = {"coordinate_transformation_mode": "half_pixel", "nearest_mode": "round_prefer_floor"}


def _image() -> torch.Tensor:
    return torch.arange(25.0).reshape(1, 1, 5, 5)  # (1, 1, 5, 5), as in the notebook


def _ort_refusal(attrs: dict[str, Any], torch_mode: str, align_corners: bool | None) -> str:
    """'' if ONNX Runtime runs Resize with `attrs`, else its first error line."""
    from helpers.onnx_custom import interpolate_matches

    try:
        interpolate_matches(_image(), 8, torch_mode, align_corners, **attrs)
    except Exception as err:  # ORT rejects an unknown attribute value: that is the hint
        return (str(err).strip().splitlines() or [type(err).__name__])[0][:200]
    return ""


@exercise("11.1", "Resize attributes for torch's nearest")
def resize_nearest(answer: Any) -> str:
    """`answer` is a dict of Resize attributes that must reproduce F.interpolate "nearest"."""
    from helpers.onnx_custom import matching_resize_attrs

    if not isinstance(answer, dict):
        raise Hint(tr("give a dict of Resize attributes, e.g. {{'mode': 'nearest', ...}}"))
    if answer.get("mode") != "nearest":
        raise Hint(
            tr(
                (
                    "PyTorch's 'nearest' is ONNX's mode 'nearest' (not {answer_get_mode!r}); the "
                    "two other attributes are where the rules differ"
                ),
                answer_get_mode=answer.get("mode"),
            )
        )
    keys = {"coordinate_transformation_mode", "nearest_mode"}
    missing = sorted(keys - set(answer))
    if missing:
        raise Hint(
            tr(
                "give {missing} too: a runtime that is not told uses ONNX's defaults",
                missing=missing,
            )
        )
    refusal = _ort_refusal(answer, "nearest", None)
    if refusal:
        raise Hint(tr("ONNX Runtime refused these attributes: {refusal}", refusal=refusal))
    truth = matching_resize_attrs("nearest")
    if answer in truth:
        sets = " or ".join(str(t) for t in truth)
        return tr(
            (
                "ONNX Runtime's Resize now equals F.interpolate(mode='nearest'); of 16 "
                "combinations only {sets} does: the coordinate i * in / out (no half-pixel "
                "shift), rounded down"
            ),
            sets=sets,
        )
    if {k: answer[k] for k in keys} == _DEFAULTS:
        raise Hint(
            tr("these are ONNX's defaults, which the cell above shows do not reproduce 'nearest'")
        )
    ctm, nearest = answer["coordinate_transformation_mode"], answer["nearest_mode"]
    if any(t["coordinate_transformation_mode"] == ctm for t in truth):
        raise Hint(
            tr(
                (
                    "the coordinate rule {ctm!r} is right; now the rounding: which nearest_mode "
                    "turns PyTorch's coordinate into its pixel index (section 1 of notebook 12 "
                    "shows the indices)?"
                ),
                ctm=ctm,
            )
        )
    if any(t["nearest_mode"] == nearest for t in truth):
        raise Hint(
            tr(
                (
                    "the rounding {nearest!r} is right; now the coordinate: PyTorch computes i * "
                    "in / out, with no half-pixel shift and no corner alignment"
                ),
                nearest=nearest,
            )
        )
    raise Hint(
        tr(
            "neither attribute matches PyTorch's rule floor(i * in / out): which "
            "coordinate_transformation_mode gives the coordinate i * in / out, and which "
            "nearest_mode rounds it down?"
        )
    )


@functools.cache
def _composite_model():
    """Section 3's graph: asinh spelled log(x + sqrt(x*x + 1)) in float32 ONNX ops."""
    from helpers.onnx_custom import AsinhFunctionModel, legacy_export, sample_input

    return legacy_export(AsinhFunctionModel(), (sample_input(),))


def _composite(values: tuple[float, ...]) -> list[float]:
    """What ONNX Runtime gives for the composite graph at `values` (padded to its (3, 4))."""
    from helpers.onnx_tools import run_ort

    row = torch.tensor([*values, *[0.0] * (4 - len(values))])
    return run_ort(_composite_model(), row.repeat(3, 1))[0][0, : len(values)].tolist()


def _as_float(answer: Any) -> float:
    try:
        return float(answer)
    except (TypeError, ValueError):
        raise Hint(
            tr("give one number (a float; float('-inf') and float('nan') are numbers)")
        ) from None


@exercise("11.2", "the composite at x = -1e4")
def composite_at_minus_1e4(answer: Any) -> str:
    """`answer` is what the composite graph returns at x = -1e4, per ONNX Runtime."""
    value = _as_float(answer)
    truth = _composite((-1e4,))[0]
    exact = math.asinh(-1e4)
    if value == truth or (math.isfinite(truth) and abs(value - truth) < 1e-3):
        square = float(np.float32(-1e4) * np.float32(-1e4))
        return tr(
            (
                "ONNX Runtime gives {truth}: in float32 x*x + 1 = {square:.0f} + 1 rounds to "
                "{float_np_float32_square_np_flo:.0f}, its sqrt is exactly 1e4, x + 1e4 is 0 "
                "and log(0) is -inf. The standard Asinh gives {exact:.4f}"
            ),
            truth=truth,
            square=square,
            float_np_float32_square_np_flo=float(np.float32(square) + np.float32(1)),
            exact=exact,
        )
    if abs(value - exact) < 1e-2:
        raise Hint(
            tr(
                "that is the exact asinh, what the standard Asinh returns; the composite "
                "computes x*x + 1 in float32 first: is 1e8 + 1 representable?"
            )
        )
    if math.isnan(value):
        raise Hint(tr("no NaN appears: sqrt gets a positive number; what is log of exactly 0?"))
    if value == 0.0 or not math.isfinite(value):
        raise Hint(tr("compute it step by step in float32: x*x + 1, its sqrt, x + that, then log"))
    raise Hint(
        tr(
            (
                "ONNX Runtime gives something else for -1e4; run run_ort(m_fn, ...) and "
                "compare with torch.asinh (exact: {exact:.4f})"
            ),
            exact=exact,
        )
    )


@exercise("11.3", "where the composite loses digits")
def composite_wrong_inputs(answer: Any) -> str:
    """`answer` is the set of PROBES where the composite is off by more than 1e-3."""
    chosen = choice_set(answer, PROBES, tr("the inputs"), "{-10.0}", float)
    got = dict(zip(PROBES, _composite(PROBES), strict=True))
    truth = {x for x, v in got.items() if not abs(v - math.asinh(x)) <= 1e-3}
    if chosen == truth:
        detail = ", ".join(f"{x:g}: {got[x]:.4f} vs {math.asinh(x):.4f}" for x in sorted(truth))
        return tr(
            (
                "{detail}: for negative x, x + sqrt(x*x + 1) subtracts two nearly equal "
                "numbers and the float32 rounding of sqrt dominates the small difference; "
                "for positive x the sum has no cancellation"
            ),
            detail=detail,
        )
    if any(x > 0 for x in chosen - truth):
        raise Hint(
            tr(
                "for positive x, x + sqrt(x*x + 1) adds two positive numbers: no "
                "cancellation, and the log of a large number is accurate"
            )
        )
    if chosen - truth:
        raise Hint(
            tr(
                (
                    "{sorted_chosen_truth} is within 1e-3 of torch.asinh: the cancellation costs "
                    "few digits while sqrt(x*x + 1) is not very close to |x|"
                ),
                sorted_chosen_truth=sorted(chosen - truth),
            )
        )
    raise Hint(
        tr(
            (
                "{len_truth_chosen} more input(s) are off by more than 1e-3 although the "
                "result is finite: print the composite's values next to torch.asinh"
            ),
            len_truth_chosen=len(truth - chosen),
        )
    )


@exercise("11.4", "bilinear: align_corners as a coordinate mode")
def bilinear_modes(answer: Any) -> str:
    """`answer` maps align_corners (True/False) to a coordinate_transformation_mode."""
    from helpers.onnx_custom import matching_resize_attrs

    if not isinstance(answer, dict) or set(answer) != {True, False}:
        raise Hint(tr("give a dict {{True: '<mode>', False: '<mode>'}} keyed by align_corners"))
    truth = {
        ac: {t["coordinate_transformation_mode"] for t in matching_resize_attrs("bilinear", ac)}
        for ac in (True, False)
    }
    wrong = [ac for ac in (True, False) if answer[ac] not in truth[ac]]
    if not wrong:
        return tr(
            (
                "align_corners=True is {sorted_truth_true}: first and last pixels line up; "
                "align_corners=False matches {sorted_truth_false}: pixel centres at i + 0.5 "
                "(the two agree except for an output of size 1)"
            ),
            sorted_truth_true=sorted(truth[True]),
            sorted_truth_false=sorted(truth[False]),
        )
    if answer[True] in truth[False] and answer[False] in truth[True]:
        raise Hint(tr("the two are swapped: align_corners=True lines up the corner pixels"))
    if False in wrong:
        raise Hint(
            tr(
                (
                    "{answer_false!r} does not reproduce align_corners=False: PyTorch then "
                    "treats pixels as squares with centres at i + 0.5 (a half-pixel shift both "
                    "ways)"
                ),
                answer_false=answer[False],
            )
        )
    raise Hint(
        tr(
            (
                "{answer_true!r} does not reproduce align_corners=True, where input and "
                "output corner pixels line up: one mode among the four is named after it"
            ),
            answer_true=answer[True],
        )
    )
