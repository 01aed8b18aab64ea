"""Extract the 8x8 handwritten digits that scikit-learn bundles into data/digits.npz (run once).

Used by: helpers.train_ddp (the default --data) and notebook 09. The shipped .npz loads with
numpy alone; this script is only needed to rebuild it, in any environment with scikit-learn:

    python3 -m venv /tmp/skvenv && /tmp/skvenv/bin/pip install scikit-learn numpy
    /tmp/skvenv/bin/python data/make_digits.py

Arrays written (uint8, pixel values 0..16, labels 0..9):
    x_train (N_train, 8, 8), y_train (N_train,), x_test (N_test, 8, 8), y_test (N_test,)
The split is stratified (20 % of each class to test) with a fixed seed, so a rebuild gives
the same arrays (the zip container's timestamps differ).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import sklearn
from sklearn.datasets import load_digits

TEST_FRACTION = 0.2
SEED = 0


def main() -> None:
    digits = load_digits()
    images = digits.images.astype(np.uint8)  # (1797, 8, 8), values 0..16
    labels = digits.target.astype(np.uint8)  # (1797,)
    assert images.max() <= 16 and (images == digits.images).all()
    rng = np.random.default_rng(SEED)
    test_idx = []
    for c in range(10):  # stratified: the same share of every class goes to test
        idx = np.flatnonzero(labels == c)
        n_test = round(len(idx) * TEST_FRACTION)
        test_idx.extend(rng.permutation(idx)[:n_test].tolist())
    test_mask = np.zeros(len(labels), dtype=bool)
    test_mask[test_idx] = True
    out = Path(__file__).resolve().parent / "digits.npz"
    np.savez_compressed(
        out,
        x_train=images[~test_mask],
        y_train=labels[~test_mask],
        x_test=images[test_mask],
        y_test=labels[test_mask],
    )
    print(
        f"wrote {out.name}: train {int((~test_mask).sum())}, test {int(test_mask.sum())}, "
        f"{out.stat().st_size} bytes (scikit-learn {sklearn.__version__})"
    )


if __name__ == "__main__":
    main()
