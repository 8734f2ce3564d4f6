"""The medseg data layer: the generated phantom and the Synapse / ACDC loaders, on tiny folders in tmp_path."""

from __future__ import annotations

import functools
import json
import os
from pathlib import Path

import h5py
import numpy as np
import pytest

from tasks.medseg.reading import phantom as phantom_module
from tasks.medseg.reading.data import (
    ACDC_CLASSES,
    SYNAPSE_CLASSES,
    SYNAPSE_TEST_CASES,
    SYNAPSE_TRAIN_CASES,
    Volume,
    load_medseg,
)
from tasks.medseg.reading.phantom import default_phantom_dir, phantom_case, write_phantom

TINY = {"slices": 6, "size": (48, 56), "train_cases": ("case0005", "case0006"), "test_cases": ("case0001",)}
"""A phantom small enough to write in a fraction of a second."""


def save_npz(path: Path, **arrays: np.ndarray) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    np.savez(path, **arrays)
    return path


def save_h5(path: Path, attrs: dict | None = None, **arrays: np.ndarray) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with h5py.File(path, "w") as f:
        for key, array in arrays.items():
            f.create_dataset(key, data=array)
        f.attrs.update(attrs or {})
    return path


def pair(shape: tuple[int, ...], value: float = 0.0, classes: int = 4) -> tuple[np.ndarray, np.ndarray]:
    """An image filled with ``value`` (so tests can tell slices apart) and a label using every class."""
    image = np.full(shape, value, dtype=np.float32)
    label = (np.arange(int(np.prod(shape))) % classes).reshape(shape).astype(np.uint8)
    return image, label


def synapse_folder(root: Path, lists: bool = True) -> Path:
    """Two training cases of 3 slices (8 x 8), one test volume of another size (3 x 10 x 12)."""
    names = []
    for case in ("case0005", "case0006"):
        for z in range(3):
            image, label = pair((8, 8), value=z, classes=9)
            save_npz(root / "train_npz" / f"{case}_slice{z:03d}.npz", image=image, label=label)
            names.append(f"{case}_slice{z:03d}")
    image, label = pair((3, 10, 12), classes=9)
    save_h5(root / "test_vol_h5" / "case0001.npy.h5", image=image, label=label)
    if lists:
        write_lists(root / "lists" / "lists_Synapse", {"train.txt": names, "test_vol.txt": ["case0001"]})
    return root


def write_lists(folder: Path, lists: dict[str, list[str]]) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for name, lines in lists.items():
        (folder / name).write_text("".join(f"{line}\n" for line in lines))


@pytest.fixture(scope="module")
def tiny_phantom(tmp_path_factory) -> Path:
    return write_phantom(tmp_path_factory.mktemp("phantom") / "tiny", seed=0, **TINY)


# ---- the phantom -------------------------------------------------------------------------------------------


def test_phantom_case_is_deterministic_per_seed_and_case():
    a = phantom_case(0, "case0001", slices=6, size=(48, 48))
    b = phantom_case(0, "case0001", slices=6, size=(48, 48))
    for x, y in zip(a[:2], b[:2]):
        np.testing.assert_array_equal(x, y)
    assert a[2] == b[2]
    for other in (phantom_case(1, "case0001", slices=6, size=(48, 48)), phantom_case(0, 2, slices=6, size=(48, 48))):
        assert other[0].shape != a[0].shape or not np.array_equal(other[0], a[0])


def test_phantom_case_sizes_dtypes_and_ranges():
    image, label, spacing = phantom_case(0, "case0003")
    D, H, W = image.shape
    assert 22 <= D <= 26 and 96 <= H <= 128 and 96 <= W <= 128
    assert image.dtype == np.float32 and label.dtype == np.uint8 and label.shape == image.shape
    # Synapse preprocessing: clip, then scale to [0, 1] per volume.
    assert image.min() == 0.0 and image.max() == 1.0
    assert label.max() < len(SYNAPSE_CLASSES)
    assert len(spacing) == 3 and all(s > 0 for s in spacing)


@pytest.mark.parametrize("case", ["case0001", "case0022", "case0038", "case0005", "case0040"])
def test_every_organ_is_in_every_patient_and_the_aorta_in_every_slice(case):
    _, label, _ = phantom_case(0, case)
    assert set(np.unique(label)) == set(range(len(SYNAPSE_CLASSES)))
    assert (label == SYNAPSE_CLASSES.index("aorta")).any(axis=(1, 2)).all()
    slices_with = [(label == k).any(axis=(1, 2)).sum() for k in range(1, 9)]
    assert min(slices_with) < label.shape[0], "some organs must appear and disappear over the slices"


def test_kidneys_share_one_intensity_distribution_and_intensity_alone_does_not_separate_organs():
    values: dict[str, list[np.ndarray]] = {name: [] for name in SYNAPSE_CLASSES}
    for case in SYNAPSE_TEST_CASES[:4]:
        image, label, _ = phantom_case(0, case)
        for k, name in enumerate(SYNAPSE_CLASSES):
            values[name].append(image[label == k])
    pooled = {name: np.concatenate(v) for name, v in values.items()}
    left, right = pooled["left_kidney"], pooled["right_kidney"]
    assert abs(left.mean() - right.mean()) < 0.02
    assert 0.8 < left.std() / right.std() < 1.25

    def interval(name: str) -> tuple[float, float]:
        return tuple(np.percentile(pooled[name], [10, 90]))

    # Overlapping central 80 % ranges: no threshold on intensity separates these pairs.
    for a, b in [("liver", "spleen"), ("spleen", "pancreas"), ("aorta", "left_kidney"), ("stomach", "gallbladder")]:
        (lo_a, hi_a), (lo_b, hi_b) = interval(a), interval(b)
        assert lo_a < hi_b and lo_b < hi_a, (a, b, interval(a), interval(b))


def test_write_phantom_writes_the_exact_synapse_layout(tiny_phantom):
    root = tiny_phantom
    assert sorted(p.name for p in root.iterdir()) == ["lists", "phantom.json", "test_vol_h5", "train_npz"]
    lists = root / "lists" / "lists_Synapse"
    assert sorted(p.name for p in lists.iterdir()) == ["test_vol.txt", "train.txt"]
    assert (lists / "test_vol.txt").read_text() == "case0001\n"
    train_names = (lists / "train.txt").read_text().splitlines()
    assert sorted(p.name for p in (root / "train_npz").iterdir()) == sorted(f"{n}.npz" for n in train_names)
    assert sorted(p.name for p in (root / "test_vol_h5").iterdir()) == ["case0001.npy.h5"]

    for case in TINY["train_cases"]:
        image, label, _ = phantom_case(0, case, slices=TINY["slices"], size=TINY["size"])
        names = [n for n in train_names if n.startswith(case)]
        assert names == [f"{case}_slice{z:03d}" for z in range(image.shape[0])]
        for z, name in enumerate(names):
            with np.load(root / "train_npz" / f"{name}.npz") as f:
                assert sorted(f.files) == ["image", "label"]
                assert f["image"].dtype == np.float32 and f["label"].dtype == np.uint8
                np.testing.assert_array_equal(f["image"], image[z])
                np.testing.assert_array_equal(f["label"], label[z])
    image, label, spacing = phantom_case(0, "case0001", slices=TINY["slices"], size=TINY["size"])
    with h5py.File(root / "test_vol_h5" / "case0001.npy.h5", "r") as f:
        assert sorted(f.keys()) == ["image", "label"]
        assert f["image"].dtype == np.float32 and f["label"].dtype == np.uint8
        np.testing.assert_array_equal(f["image"][()], image)
        np.testing.assert_array_equal(f["label"][()], label)
        assert tuple(f.attrs["spacing"]) == spacing


def test_write_phantom_reuses_a_complete_folder_and_rebuilds_a_stale_one(tmp_path):
    root = write_phantom(tmp_path / "p", seed=3, **TINY)
    stamp = (root / "phantom.json").stat().st_mtime_ns
    assert write_phantom(root, seed=3, **TINY) == root
    assert (root / "phantom.json").stat().st_mtime_ns == stamp  # reused, not rewritten
    twin = load_medseg(write_phantom(tmp_path / "twin", seed=3, **TINY))
    np.testing.assert_array_equal(load_medseg(root).test[0].image, twin.test[0].image)
    # A missing file makes it incomplete; another generator or seed makes it stale: all are rebuilt in place.
    (root / "train_npz" / "case0005_slice000.npz").unlink()
    write_phantom(root, seed=3, **TINY)
    assert (root / "train_npz" / "case0005_slice000.npz").is_file()
    manifest = json.loads((root / "phantom.json").read_text())
    (root / "phantom.json").write_text(json.dumps({**manifest, "generator": "older code"}))
    write_phantom(root, seed=3, **TINY)
    assert json.loads((root / "phantom.json").read_text()) == manifest
    write_phantom(root, seed=4, **TINY)
    assert not np.array_equal(load_medseg(root).test[0].image, twin.test[0].image)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["p", "twin"]  # no temporary folders left behind


def test_write_phantom_never_replaces_a_folder_it_did_not_write(tmp_path):
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("precious")
    with pytest.raises(FileExistsError, match="mine"):
        write_phantom(tmp_path / "mine", **TINY)
    assert (tmp_path / "mine" / "notes.txt").read_text() == "precious"


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"case_id": "patient1"}, "case_id must be a name like 'case0001'"),
        ({"size": (16, 24)}, "32 <= low <= high"),
        ({"slices": 2}, "slices must be >= 3"),
    ],
)
def test_phantom_case_rejects_bad_arguments(kwargs, message):
    with pytest.raises(ValueError, match=message):
        phantom_case(0, **{"case_id": "case0001", **kwargs})


def test_write_phantom_rejects_a_case_in_both_splits(tmp_path):
    with pytest.raises(ValueError, match=r"\['case0001'\] are in both"):
        write_phantom(tmp_path / "p", train_cases=("case0001",), test_cases=("case0001",))


def test_default_phantom_dir_follows_zoo_cache(monkeypatch, tmp_path):
    monkeypatch.setenv("ZOO_CACHE", str(tmp_path))
    assert default_phantom_dir(7) == tmp_path / "medseg-phantom-v1-seed7"
    monkeypatch.delenv("ZOO_CACHE")
    assert default_phantom_dir() == Path("~/.cache/transformer-zoo/medseg-phantom-v1-seed0").expanduser()


def test_load_medseg_without_data_writes_and_reads_the_phantom(monkeypatch, tmp_path):
    monkeypatch.setenv("ZOO_CACHE", str(tmp_path))
    # The full phantom takes seconds to write; the same code path with a tiny one.
    monkeypatch.setattr(phantom_module, "write_phantom", functools.partial(write_phantom, **TINY))
    seg = load_medseg(None, seed=2)
    assert seg.name == "phantom" and seg.source == str(tmp_path / "medseg-phantom-v1-seed2")
    assert [v.case for v in seg.test] == ["case0001"] and [v.case for v in seg.train] == ["case0005", "case0006"]
    with pytest.raises(ValueError, match="Synapse layout"):
        load_medseg(None, dataset="acdc")


def test_the_synapse_case_ids():
    assert len(SYNAPSE_TEST_CASES) == 12 and len(SYNAPSE_TRAIN_CASES) == 18
    assert not set(SYNAPSE_TEST_CASES) & set(SYNAPSE_TRAIN_CASES)
    assert SYNAPSE_TEST_CASES[:5] == ("case0001", "case0002", "case0003", "case0004", "case0008")


# ---- Synapse loader ----------------------------------------------------------------------------------------


def test_synapse_loader_round_trips_the_phantom(tiny_phantom):
    seg = load_medseg(tiny_phantom)
    assert seg.name == "synapse" and seg.source == str(tiny_phantom)
    assert seg.class_names == SYNAPSE_CLASSES and seg.num_classes == 9 and seg.valid == []
    for volume, case in zip(seg.train + seg.test, TINY["train_cases"] + TINY["test_cases"]):
        image, label, spacing = phantom_case(0, case, slices=TINY["slices"], size=TINY["size"])
        assert volume.case == case
        np.testing.assert_array_equal(volume.image, image)
        np.testing.assert_array_equal(volume.label, label)
        assert volume.spacing == (spacing if case in TINY["test_cases"] else None)


def test_synapse_slices_are_grouped_by_case_in_numeric_slice_order(tmp_path):
    for z in (10, 2, 1):  # file order and lexicographic order both differ from slice order
        save_npz(tmp_path / "train_npz" / f"case0009_slice{z}.npz", **dict(zip(("image", "label"), pair((4, 4), z))))
    image, label = pair((2, 6, 5))
    save_h5(tmp_path / "test_vol_h5" / "case0002.npy.h5", image=image, label=label)
    seg = load_medseg(tmp_path)
    (volume,) = seg.train
    assert volume.case == "case0009" and volume.shape == (3, 4, 4)
    assert volume.image[:, 0, 0].tolist() == [1, 2, 10]
    assert seg.test[0].shape == (2, 6, 5) and seg.test[0].spacing is None  # no size is assumed


def test_synapse_without_lists_reads_every_file_and_lists_may_sit_at_the_root(tmp_path):
    with_lists = load_medseg(synapse_folder(tmp_path / "a"))
    without = load_medseg(synapse_folder(tmp_path / "b", lists=False))
    assert [v.case for v in with_lists.train] == [v.case for v in without.train] == ["case0005", "case0006"]
    root = synapse_folder(tmp_path / "c", lists=False)
    write_lists(root / "lists_Synapse", {"train.txt": ["case0006_slice001", "case0006_slice002"],
                                         "test_vol.txt": ["case0001"]})
    (volume,) = load_medseg(root).train  # only what the list names
    assert volume.case == "case0006" and volume.image[:, 0, 0].tolist() == [1, 2]


def test_dataset_is_detected_and_can_be_forced(tmp_path):
    root = synapse_folder(tmp_path)
    assert load_medseg(root, dataset="synapse").name == "synapse"
    with pytest.raises(FileNotFoundError, match="ACDC"):
        load_medseg(root, dataset="acdc")
    with pytest.raises(ValueError, match="Did you mean 'synapse'"):
        load_medseg(root, dataset="synapes")


# ---- ACDC loaders ------------------------------------------------------------------------------------------


def test_acdc_npz_layout_of_mt_unet(tmp_path):
    names = {"train": [], "valid": [], "test": []}
    for split, case in (("train", "case_001"), ("valid", "case_019")):
        for frame in ("ED", "ES"):
            for z in range(3):
                name = f"{case}_slice{frame}_{z}.npz"
                save_npz(tmp_path / split / name, **dict(zip(("img", "label"), pair((6, 7), z))))
                names[split].append(name)
    for frame in ("ED", "ES"):
        image, label = pair((4, 9, 8))
        save_npz(tmp_path / "test" / f"case_002_volume_{frame}.npz", img=image, label=label)
        names["test"].append(f"case_002_volume_{frame}.npz")
    seg = load_medseg(tmp_path)  # globbed
    write_lists(tmp_path / "lists_ACDC", {f"{split}.txt": n for split, n in names.items()})
    listed = load_medseg(tmp_path)
    for s in (seg, listed):
        assert s.name == "acdc" and s.class_names == ACDC_CLASSES and s.num_classes == 4
        assert [v.case for v in s.train] == ["case_001_ED", "case_001_ES"]
        assert [v.case for v in s.valid] == ["case_019_ED", "case_019_ES"]
        assert [v.case for v in s.test] == ["case_002_ED", "case_002_ES"]
        assert s.train[0].shape == (3, 6, 7) and s.train[0].image[:, 0, 0].tolist() == [0, 1, 2]
        assert s.test[0].shape == (4, 9, 8)


def acdc_h5_folder(root: Path, slices: str = "ACDC_training_slices", volumes: str = "ACDC_training_volumes") -> Path:
    """Patients 001 (test by the fixed split), 021 (validation) and 031, 032 (training), 2 frames each."""
    for patient in (1, 21, 31, 32):
        for frame in (1, 2):
            case = f"patient{patient:03d}_frame{frame:02d}"
            image, label = pair((3, 6, 5), value=patient)
            save_h5(root / volumes / f"{case}.h5", image=image, label=label)
            for z in range(3):
                save_h5(root / slices / f"{case}_slice_{z}.h5", image=image[z] + z, label=label[z],
                        scribble=label[z])
    return root


def test_acdc_h5_layout_without_lists_uses_the_fixed_patient_split(tmp_path):
    seg = load_medseg(acdc_h5_folder(tmp_path))
    assert seg.name == "acdc"
    assert [v.case for v in seg.train] == [f"patient{p}_frame0{f}" for p in ("031", "032") for f in (1, 2)]
    assert [v.case for v in seg.valid] == ["patient021_frame01", "patient021_frame02"]
    assert [v.case for v in seg.test] == ["patient001_frame01", "patient001_frame02"]
    assert seg.train[0].image[:, 0, 0].tolist() == [31, 32, 33]  # slices, stacked in order
    assert seg.test[0].shape == (3, 6, 5)


def test_acdc_h5_layout_with_ssl4mis_lists_and_folder_names(tmp_path):
    root = acdc_h5_folder(tmp_path, slices="data/slices", volumes="data")
    write_lists(root, {
        "train_slices.list": ["patient001_frame01_slice_2", "patient001_frame01_slice_0"],
        "val.list": ["patient031_frame02"], "test.list": ["patient021_frame01", "patient032_frame01"],
    })
    seg = load_medseg(root)
    assert [v.case for v in seg.train] == ["patient001_frame01"]
    assert seg.train[0].image[:, 0, 0].tolist() == [1, 3]  # slices 0 and 2
    assert [v.case for v in seg.valid] == ["patient031_frame02"]
    assert [v.case for v in seg.test] == ["patient021_frame01", "patient032_frame01"]
    (root / "train_slices.list").unlink()
    write_lists(root, {"train.list": ["patient021_frame02"]})  # whole cases, read from their slices
    assert load_medseg(root).train[0].image[:, 0, 0].tolist() == [21, 22, 23]


# ---- errors ------------------------------------------------------------------------------------------------


def test_missing_folder_file_instead_of_folder_and_empty_folder(tmp_path):
    with pytest.raises(FileNotFoundError, match="nowhere"):
        load_medseg(tmp_path / "nowhere")
    (tmp_path / "file.npz").write_bytes(b"")
    with pytest.raises(NotADirectoryError, match="file.npz"):
        load_medseg(tmp_path / "file.npz")
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match="no known medseg layout.*train_npz.*ACDC_training_slices"):
        load_medseg(tmp_path / "empty")


def test_synapse_split_folders_must_exist_and_hold_files(tmp_path):
    root = synapse_folder(tmp_path, lists=False)
    for path in (root / "test_vol_h5").iterdir():
        path.unlink()
    with pytest.raises(FileNotFoundError, match="no .npy.h5 volumes in .*test_vol_h5"):
        load_medseg(root)
    (root / "test_vol_h5").rmdir()
    with pytest.raises(FileNotFoundError, match="test_vol_h5 not found"):
        load_medseg(root)


def test_a_listed_name_without_its_file(tmp_path):
    root = synapse_folder(tmp_path)
    (root / "train_npz" / "case0006_slice001.npz").unlink()
    with pytest.raises(FileNotFoundError, match=r"train.txt lists 'case0006_slice001' .*case0006_slice001.npz"):
        load_medseg(root)


def test_a_name_listed_twice(tmp_path):
    root = synapse_folder(tmp_path)
    write_lists(root / "lists" / "lists_Synapse", {"test_vol.txt": ["case0001", "case0001"]})
    with pytest.raises(ValueError, match="test_vol.txt: 'case0001' is listed twice"):
        load_medseg(root)


def corrupt(root: Path, name: str, **arrays: np.ndarray) -> Path:
    """Replace one file of a tiny Synapse folder: a slice of case0005 (npz) or the test volume (h5)."""
    if name.endswith(".h5"):
        return save_h5(root / "test_vol_h5" / name, **arrays)
    return save_npz(root / "train_npz" / name, **arrays)


GOOD_SLICE, GOOD_VOLUME = pair((8, 8), classes=9), pair((3, 10, 12), classes=9)


@pytest.mark.parametrize(
    ("name", "arrays", "message"),
    [
        ("case0005_slice001.npz", {"image": GOOD_SLICE[0]}, r"no key 'label'; keys found: \['image'\]"),
        ("case0001.npy.h5", {"img": GOOD_VOLUME[0], "label": GOOD_VOLUME[1]}, r"no key 'image'; keys found"),
        ("case0005_slice001.npz", {"image": np.full((8, 8), "x"), "label": GOOD_SLICE[1]}, "dtype <U1"),
        ("case0005_slice001.npz", {"image": GOOD_SLICE[0], "label": GOOD_SLICE[1] + 0.5}, "non-integral"),
        ("case0005_slice001.npz", {"image": np.full((8, 8), np.nan, np.float32), "label": GOOD_SLICE[1]}, "NaN"),
        ("case0005_slice001.npz", {"image": GOOD_VOLUME[0], "label": GOOD_VOLUME[1]}, r"expected a 2D slice"),
        ("case0001.npy.h5", {"image": GOOD_SLICE[0], "label": GOOD_SLICE[1]}, r"expected a 3D volume"),
        ("case0005_slice001.npz", {"image": GOOD_SLICE[0], "label": GOOD_SLICE[1][:4]}, "they must match"),
        ("case0005_slice001.npz", {"image": GOOD_SLICE[0], "label": GOOD_SLICE[1] + 5}, r"values \[9, 10, .*, 13\]"),
        ("case0001.npy.h5", {"image": GOOD_VOLUME[0], "label": GOOD_VOLUME[1].astype(int) - 1}, r"values \[-1\]"),
        ("case0005_slice001.npz", pair((9, 8), classes=9), "must have the same shape"),
    ],
    ids=["npz-key", "h5-key", "dtype", "float-labels", "nan", "slice-3d", "volume-2d", "shapes", "labels>8",
         "labels<0", "slice-shapes"],
)
def test_bad_file_contents_name_the_file(tmp_path, name, arrays, message):
    if isinstance(arrays, tuple):
        arrays = dict(zip(("image", "label"), arrays))
    root = synapse_folder(tmp_path)
    path = corrupt(root, name, **arrays)
    with pytest.raises(ValueError, match=message) as info:
        load_medseg(root)
    assert str(path) in str(info.value)


@pytest.mark.parametrize("name", ["case0005_slice002.npz", "case0001.npy.h5"])
@pytest.mark.parametrize("content", [b"", b"not an archive at all"])
def test_unreadable_files_name_the_file(tmp_path, name, content):
    root = synapse_folder(tmp_path)
    path = root / ("test_vol_h5" if name.endswith(".h5") else "train_npz") / name
    path.write_bytes(content)
    with pytest.raises(ValueError, match="cannot read it as an") as info:
        load_medseg(root)
    assert str(path) in str(info.value)


def test_a_truncated_npz_names_the_file(tmp_path):
    root = synapse_folder(tmp_path)
    path = root / "train_npz" / "case0006_slice000.npz"
    path.write_bytes(path.read_bytes()[:200])
    with pytest.raises(ValueError, match="case0006_slice000.npz"):
        load_medseg(root)


def test_a_bad_spacing_attribute_names_the_file(tmp_path):
    root = synapse_folder(tmp_path)
    path = save_h5(root / "test_vol_h5" / "case0001.npy.h5", attrs={"spacing": [1.0, -2.0]},
                   image=GOOD_VOLUME[0], label=GOOD_VOLUME[1])
    with pytest.raises(ValueError, match="'spacing'") as info:
        load_medseg(root)
    assert str(path) in str(info.value)


def test_acdc_labels_are_checked_against_four_classes(tmp_path):
    root = acdc_h5_folder(tmp_path)
    path = save_h5(root / "ACDC_training_volumes" / "patient001_frame02.h5", image=GOOD_VOLUME[0],
                   label=np.full((3, 10, 12), 4, np.uint8))
    with pytest.raises(ValueError, match=r"values \[4\] outside the 4 classes") as info:
        load_medseg(root)
    assert str(path) in str(info.value)


def test_acdc_npz_errors_name_the_file(tmp_path):
    image, label = pair((6, 7))
    path = save_npz(tmp_path / "train" / "case_001_sliceED_0.npz", image_data=image, label=label)
    save_npz(tmp_path / "test" / "case_002_volume_ED.npz", img=image[None], label=label[None])
    with pytest.raises(ValueError, match=r"no key 'img' or 'image'; keys found: \['image_data', 'label'\]") as info:
        load_medseg(tmp_path)
    assert str(path) in str(info.value)
    write_lists(tmp_path / "lists_ACDC", {"train.txt": ["case_001_sliceED_1.npz"]})
    with pytest.raises(FileNotFoundError, match=r"train.txt lists 'case_001_sliceED_1.npz'"):
        load_medseg(tmp_path)


def test_acdc_h5_without_lists_needs_patient_names(tmp_path):
    image, label = pair((3, 6, 5))
    save_h5(tmp_path / "ACDC_training_volumes" / "heart01.h5", image=image, label=label)
    with pytest.raises(ValueError, match="heart01.*train_slices.list"):
        load_medseg(tmp_path)


def test_volume_checks_its_arrays():
    image, label = pair((2, 3, 4))
    with pytest.raises(ValueError, match="case x"):
        Volume("x", image, label[:1])
    with pytest.raises(ValueError, match="float32 image and uint8 label"):
        Volume("x", image.astype(np.float64), label)


def test_no_temporary_files_from_a_failed_phantom_write(tmp_path, monkeypatch):
    def explode(*args, **kwargs):
        raise RuntimeError("disk full")

    monkeypatch.setattr(phantom_module, "_write_layout", explode)
    with pytest.raises(RuntimeError, match="disk full"):
        write_phantom(tmp_path / "p", **TINY)
    assert os.listdir(tmp_path) == []
