"""Both HD95/Dice conventions from one pass (``case_scores_per_convention``) give exactly ``case_scores``' numbers.

``case_scores`` per convention is the reference path (what the evaluation ran before); the one-pass path shares
masks, Dice and surfaces, and evaluates the distance transforms at the surface voxels only. Both compute the
same float64 operations in the same order, so the results are compared for equality, NaN included
(tests/README.md, rule 5: the same computation).
"""

import math

import numpy as np
import pytest
from scipy import ndimage

from tasks.medseg.evaluation.metrics import CONVENTIONS, _distances_at, case_scores, case_scores_per_convention
from tasks.medseg.reading.phantom import phantom_case

ANISOTROPIC = (4.12, 2.887, 2.887)  # a phantom case's spacing (z, y, x): 3-5 mm slices, ~0.8-4 mm pixels


def assert_same_scores(fast: dict, pred: np.ndarray, gt: np.ndarray, num_classes: int, spacing) -> None:
    assert set(fast) == set(CONVENTIONS)
    for convention in CONVENTIONS:
        reference = case_scores(pred, gt, num_classes, convention, spacing)
        assert list(fast[convention]) == list(reference)
        for k, values in reference.items():
            for ours, theirs in zip(fast[convention][k], values):
                assert ours == theirs or (math.isnan(ours) and math.isnan(theirs)), (convention, k, ours, theirs)


def blobs(rng: np.random.Generator, shape: tuple[int, ...], organs: int) -> np.ndarray:
    """A label volume of smoothed random blobs: organs with irregular surfaces, some touching the border."""
    field = ndimage.gaussian_filter(rng.random((organs, *shape)), sigma=1.5)  # (organs, *shape)
    labels = (field.argmax(0) + 1).astype(np.uint8)
    labels[field.max(0) < np.quantile(field.max(0), 0.4)] = 0  # background
    return labels


@pytest.mark.parametrize("spacing", [None, (1.0, 1.0, 1.0), ANISOTROPIC, (0.5, 3.0, 1.25)])
def test_random_label_volumes_score_the_same(spacing):
    rng = np.random.default_rng(0)
    for _ in range(3):
        gt = blobs(rng, (9, 20, 22), 4)
        pred = np.where(rng.random(gt.shape) < 0.8, gt, blobs(rng, gt.shape, 4))
        pred[pred == 3] = 0  # organ 3 missed
        gt[gt == 4] = 0  # organ 4 a false positive; organ 6 (below) absent from both
        assert_same_scores(case_scores_per_convention(pred, gt, 7, spacing), pred, gt, 7, spacing)


def test_a_phantom_case_scores_the_same():
    _, gt, spacing = phantom_case(0, "case0001", slices=8, size=(48, 56))
    shifted = np.roll(gt, (1, -2), axis=(1, 2))  # a prediction off by a few voxels, every organ present
    assert_same_scores(case_scores_per_convention(shifted, gt, 9, spacing), shifted, gt, 9, spacing)
    assert_same_scores(case_scores_per_convention(gt, gt, 9), gt, gt, 9, None)


def test_two_dimensional_labels_score_the_same():
    rng = np.random.default_rng(1)
    gt = blobs(rng, (30, 34), 3)
    pred = np.roll(gt, 3, axis=0)
    assert_same_scores(case_scores_per_convention(pred, gt, 4, (0.7, 1.3)), pred, gt, 4, (0.7, 1.3))


@pytest.mark.parametrize("sampling", [(1.0, 1.0, 1.0), ANISOTROPIC])
def test_distances_at_the_surface_are_the_distance_transforms_bits(sampling):
    rng = np.random.default_rng(2)
    source, target = rng.random((2, 7, 15, 16)) < 0.1
    whole = ndimage.distance_transform_edt(~target, sampling=sampling)[source]
    assert np.array_equal(_distances_at(source, target, sampling), whole)


def test_bad_inputs_are_refused_as_case_scores_refuses_them():
    labels = np.zeros((3, 4, 4), np.uint8)
    with pytest.raises(ValueError, match="integer label volume"):
        case_scores_per_convention(labels.astype(float), labels, 3)
    with pytest.raises(ValueError, match="outside 0..2"):
        case_scores_per_convention(labels + 7, labels, 3)
    with pytest.raises(ValueError, match="num_classes"):
        case_scores_per_convention(labels, labels, 1)
    with pytest.raises(ValueError, match="one value per axis"):
        case_scores_per_convention(labels, labels, 3, spacing=(1.0, 1.0))
    with pytest.raises(ValueError, match="same shape"):
        case_scores_per_convention(labels, labels[:2], 3)
