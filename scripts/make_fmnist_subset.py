"""Cut the Fashion-MNIST subset that the "cifar" task ships as its offline default data.

Source: the four idx files of Fashion-MNIST (Zalando Research, MIT licence,
https://github.com/zalandoresearch/fashion-mnist) as installed by Debian's package
``dataset-fashion-mnist`` (``apt-get install dataset-fashion-mnist`` puts them in
``/usr/share/datasets/fashion-mnist``; ``dpkg -L dataset-fashion-mnist`` lists them).

The cut is stratified and deterministic (NumPy ``default_rng(0)``): 500 training and 100 test images of
each of the 10 classes, kept in their original order, 28×28 uint8, written with ``np.savez_compressed``
under the keys ``x_train``, ``y_train``, ``x_test``, ``y_test``, ``class_names``.

Usage::

    python scripts/make_fmnist_subset.py [IDX_FOLDER] [--out tasks/cifar/data/fashion_mnist_subset.npz]
"""

from __future__ import annotations

import argparse
import hashlib
from pathlib import Path

import numpy as np

from tasks.cifar.datasets import DEBIAN_FMNIST, EMBEDDED, FMNIST_CLASSES, FMNIST_FILES, find_idx, read_idx

PER_CLASS = {"train": 500, "test": 100}
SEED = 0


def stratified_subset(labels: np.ndarray, per_class: int, rng: np.random.Generator) -> np.ndarray:
    """``per_class`` indices of every class, drawn without replacement, returned in ascending order."""
    chosen = [rng.choice(np.flatnonzero(labels == k), per_class, replace=False) for k in range(len(FMNIST_CLASSES))]
    return np.sort(np.concatenate(chosen))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("source", nargs="?", default=str(DEBIAN_FMNIST), help="folder of the four idx(.gz) files")
    parser.add_argument("--out", default=str(EMBEDDED), help="the .npz to write")
    args = parser.parse_args(argv)

    rng = np.random.default_rng(SEED)
    arrays: dict[str, np.ndarray] = {}
    for split, (images_name, labels_name) in FMNIST_FILES.items():
        folder = Path(args.source)
        images, labels = read_idx(find_idx(folder, images_name)), read_idx(find_idx(folder, labels_name))
        keep = stratified_subset(labels, PER_CLASS[split], rng)
        arrays[f"x_{split}"], arrays[f"y_{split}"] = images[keep], labels[keep].astype(np.uint8)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(out, **arrays, class_names=np.array(FMNIST_CLASSES))
    digest = hashlib.sha256(out.read_bytes()).hexdigest()[:16]
    sizes = ", ".join(f"{k} {v.shape}" for k, v in arrays.items())
    print(f"wrote {out} ({out.stat().st_size / 1e6:.2f} MB, sha256 {digest}…): {sizes}")


if __name__ == "__main__":
    main()
