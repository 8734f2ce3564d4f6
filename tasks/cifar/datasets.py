"""Image-classification data: the embedded Fashion-MNIST subset, Fashion-MNIST idx files, CIFAR-10/100.

Every loader returns an :class:`ImageDataset` of uint8 images already at 32×32 (Fashion-MNIST's 28×28
images get 2 px of zeros on each side), so that a model sees the same input size on every dataset.

CIFAR is read from the "python version" layout (``cifar-10-batches-py/data_batch_1..5``, ``test_batch``,
``batches.meta``; ``cifar-100-python/train``, ``test``, ``meta``) by our own reader rather than
torchvision's class: torchvision checks every file against the MD5 of the official archive, which
rejects the small fake batches the tests write, and it calls plain ``pickle.load``. Ours unpickles with
an allow-list of numpy types only, and names the broken file and the fix. torchvision does the downloading
(``--download``), with its MD5 checks.
"""

from __future__ import annotations

import gzip
import pickle
from dataclasses import dataclass
from pathlib import Path

import numpy as np

DATASETS = ("fmnist", "cifar10", "cifar100")
IMAGE_SIZE = 32  # what every model sees, on every dataset
EMBEDDED = Path(__file__).parent / "data" / "fashion_mnist_subset.npz"
DEBIAN_FMNIST = Path("/usr/share/datasets/fashion-mnist")  # `apt-get install dataset-fashion-mnist`
FMNIST_CLASSES = ("T-shirt/top", "Trouser", "Pullover", "Dress", "Coat",
                  "Sandal", "Shirt", "Sneaker", "Bag", "Ankle boot")
FMNIST_FILES = {"train": ("train-images-idx3-ubyte", "train-labels-idx1-ubyte"),
                "test": ("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte")}


@dataclass
class ImageDataset:
    """Train and test images of one dataset, as uint8 arrays in memory.

    Shape:
        ``train_x``: (N, C, 32, 32) uint8; ``train_y``: (N,) int64 in [0, K); likewise ``test_x``, ``test_y``.
    """

    name: str
    train_x: np.ndarray
    train_y: np.ndarray
    test_x: np.ndarray
    test_y: np.ndarray
    class_names: list[str]
    source: str  # where the files came from, for the report
    native_size: tuple[int, int] = (IMAGE_SIZE, IMAGE_SIZE)  # (H, W) before pad_to centred it on 32×32

    @property
    def in_channels(self) -> int:
        return int(self.train_x.shape[1])

    @property
    def num_classes(self) -> int:
        return len(self.class_names)


# --- Fashion-MNIST ------------------------------------------------------------------------------------
def read_idx(path: str | Path) -> np.ndarray:
    """Read an idx file (the MNIST format), gzipped or not, as a uint8 array of its stored shape."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"idx file {path} does not exist")
    try:
        with (gzip.open(path, "rb") if path.suffix == ".gz" else path.open("rb")) as f:
            raw = f.read()
    except (OSError, EOFError) as error:
        raise ValueError(f"{path} could not be read ({error}); the file is damaged, fetch it again") from None
    if len(raw) < 4 or raw[:2] != b"\x00\x00" or raw[2] != 0x08:
        raise ValueError(f"{path} is not an idx file of unsigned bytes (header {raw[:4]!r}, expected 00 00 08 ..)")
    ndim = raw[3]
    dims = tuple(int(d) for d in np.frombuffer(raw, dtype=">u4", count=ndim, offset=4))
    data = np.frombuffer(raw, dtype=np.uint8, offset=4 + 4 * ndim)
    if data.size != int(np.prod(dims)):
        raise ValueError(f"{path} holds {data.size} values but its header says {dims}; the file is truncated")
    return data.reshape(dims)


def find_idx(folder: Path, stem: str) -> Path:
    """The idx file `stem` in `folder`, gzipped or not."""
    for name in (stem, stem + ".gz"):
        if (folder / name).is_file():
            return folder / name
    raise FileNotFoundError(f"{folder} has no {stem}(.gz); a Fashion-MNIST folder holds "
                            f"{', '.join(s for pair in FMNIST_FILES.values() for s in pair)} (optionally .gz)")


def load_fmnist_idx(folder: str | Path = DEBIAN_FMNIST) -> ImageDataset:
    """The full Fashion-MNIST (60,000 train, 10,000 test) from its four idx files, padded to 32×32."""
    folder = Path(folder)
    arrays = {}
    for split, (images, labels) in FMNIST_FILES.items():
        x, y = read_idx(find_idx(folder, images)), read_idx(find_idx(folder, labels))
        if x.ndim != 3 or y.ndim != 1 or len(x) != len(y):
            raise ValueError(f"{folder}: {split} images {x.shape} and labels {y.shape} do not match")
        arrays[split] = (pad_to(x[:, None]), y.astype(np.int64))
    return _checked(ImageDataset("fmnist", *arrays["train"], *arrays["test"], list(FMNIST_CLASSES), str(folder),
                                 tuple(x.shape[-2:])))


def load_embedded(path: str | Path = EMBEDDED) -> ImageDataset:
    """The Fashion-MNIST subset shipped in the repository (5,000 train + 1,000 test, 10 classes)."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"the embedded data {path} is missing; restore it with `git checkout -- {path}` "
                                "or rebuild it with scripts/make_fmnist_subset.py")
    with np.load(path, allow_pickle=False) as npz:
        missing = {"x_train", "y_train", "x_test", "y_test", "class_names"} - set(npz.files)
        if missing:
            raise ValueError(f"{path} lacks {sorted(missing)}; rebuild it with scripts/make_fmnist_subset.py")
        return _checked(ImageDataset("fmnist", pad_to(npz["x_train"][:, None]), npz["y_train"].astype(np.int64),
                                     pad_to(npz["x_test"][:, None]), npz["y_test"].astype(np.int64),
                                     [str(n) for n in npz["class_names"]], f"embedded subset {path.name}",
                                     tuple(npz["x_train"].shape[-2:])))


def pad_to(images: np.ndarray, size: int = IMAGE_SIZE) -> np.ndarray:
    """Centre ``images`` on a zero canvas of ``size``×``size``.

    Shape:
        (N, C, H, W) -> (N, C, size, size), with H, W <= size.
    """
    h, w = images.shape[-2:]
    if h > size or w > size:
        raise ValueError(f"images of {h}×{w} do not fit in {size}×{size}; they would have to be cropped")
    top, left = (size - h) // 2, (size - w) // 2
    return np.pad(images, ((0, 0), (0, 0), (top, size - h - top), (left, size - w - left)))


# --- CIFAR --------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class CifarLayout:
    folder: str
    train: tuple[str, ...]
    test: tuple[str, ...]
    meta: str
    label_key: str
    names_key: str
    archive: str


CIFAR_LAYOUTS = {
    "cifar10": CifarLayout("cifar-10-batches-py", tuple(f"data_batch_{i}" for i in range(1, 6)), ("test_batch",),
                           "batches.meta", "labels", "label_names", "cifar-10-python.tar.gz"),
    "cifar100": CifarLayout("cifar-100-python", ("train",), ("test",), "meta", "fine_labels", "fine_label_names",
                            "cifar-100-python.tar.gz"),
}

# What a CIFAR batch may contain: numpy arrays and nothing else (a pickle can otherwise run any code).
_ALLOWED_GLOBALS = {
    ("numpy", "ndarray"), ("numpy", "dtype"), ("_codecs", "encode"),
    *((f"numpy.{core}.multiarray", name) for core in ("core", "_core") for name in ("_reconstruct", "scalar")),
    *((f"numpy.{core}.numeric", "_frombuffer") for core in ("core", "_core")),
}


class _BatchUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str):
        if (module, name) not in _ALLOWED_GLOBALS:
            raise pickle.UnpicklingError(f"it refers to {module}.{name}, which a CIFAR batch never holds")
        return super().find_class(module, name)


def unpickle_batch(path: Path) -> dict[str, object]:
    """Load one CIFAR python batch (a latin1 pickle of a dict); bytes keys become str keys."""
    if not path.is_file():
        raise FileNotFoundError(f"CIFAR file {path} does not exist; re-extract the archive or pass --download")
    try:
        with path.open("rb") as f:
            entry = _BatchUnpickler(f, encoding="latin1").load()
    except Exception as error:  # pickle raises many types on damaged input; all mean "not a CIFAR batch"
        raise ValueError(f"{path} is not a readable CIFAR python batch ({type(error).__name__}: {error}); "
                         "re-extract the archive or delete the folder and pass --download") from None
    if not isinstance(entry, dict):
        raise ValueError(f"{path} holds a {type(entry).__name__}, not the dict of a CIFAR python batch")
    return {k.decode("latin1") if isinstance(k, bytes) else k: v for k, v in entry.items()}


def read_cifar_batch(path: Path, label_key: str) -> tuple[np.ndarray, np.ndarray]:
    """Images and labels of one CIFAR batch file.

    Shape:
        images (N, 3, 32, 32) uint8 (stored as rows of 3072 = 3 planes of 32×32), labels (N,) int64.
    """
    entry = unpickle_batch(path)
    if "data" not in entry or label_key not in entry:
        raise ValueError(f"{path} lacks the keys 'data' and {label_key!r} (has {sorted(entry)})")
    data, labels = np.asarray(entry["data"]), np.asarray(entry[label_key], dtype=np.int64)
    if data.dtype != np.uint8 or data.ndim != 2 or data.shape[1] != 3 * 32 * 32:
        raise ValueError(f"{path}: 'data' must be uint8 of shape (N, 3072), got {data.dtype} {data.shape}")
    if labels.shape != (len(data),):
        raise ValueError(f"{path}: {len(data)} images but {label_key!r} has shape {labels.shape}")
    return data.reshape(-1, 3, 32, 32), labels


def cifar_folder(root: Path, name: str) -> Path:
    """``root/cifar-10-batches-py`` (or ``cifar-100-python``), or ``root`` itself when it is that folder."""
    layout = CIFAR_LAYOUTS[name]
    for folder in (root / layout.folder, root):
        if (folder / layout.meta).is_file() and (folder / layout.test[0]).is_file():
            return folder
    hint = (f"{root / layout.archive} is not extracted yet: run `tar xzf {root / layout.archive} -C {root}` or "
            f"pass --download (it extracts without downloading)" if (root / layout.archive).is_file() else
            f"download it with --data {root} --dataset {name} --download, or extract {layout.archive} there")
    raise FileNotFoundError(f"no {name} data in {root}: expected {root / layout.folder}/ holding "
                            f"{', '.join(layout.train + layout.test + (layout.meta,))}; {hint}")


def download_cifar(root: Path, name: str) -> None:
    """Download (or extract an already downloaded archive) into ``root`` with torchvision, MD5-checked."""
    from torchvision.datasets import CIFAR10, CIFAR100

    cls, layout = (CIFAR10 if name == "cifar10" else CIFAR100), CIFAR_LAYOUTS[name]
    root.mkdir(parents=True, exist_ok=True)
    try:
        cls(str(root), train=False, download=True)
    except RuntimeError as error:  # torchvision: "Dataset not found or corrupted"
        raise ValueError(f"{name} in {root} is corrupted after download ({error}); delete "
                         f"{root / layout.folder} and {root / layout.archive}, then retry") from None
    except OSError as error:  # no network, proxy, disk full
        raise ConnectionError(f"could not download {name} into {root} ({error}); fetch {cls.url} by hand and "
                              f"extract it into {root}") from None


def load_cifar(root: str | Path, name: str, download: bool = False) -> ImageDataset:
    """CIFAR-10 or CIFAR-100 (fine labels) from the python-version layout under ``root``."""
    if name not in CIFAR_LAYOUTS:
        from plumbing.errors import unknown_name

        raise unknown_name("CIFAR dataset", name, CIFAR_LAYOUTS)
    root, layout = Path(root), CIFAR_LAYOUTS[name]
    if download:
        download_cifar(root, name)
    folder = cifar_folder(root, name)
    splits = {}
    for split, files in (("train", layout.train), ("test", layout.test)):
        parts = [read_cifar_batch(folder / f, layout.label_key) for f in files]
        splits[split] = (np.concatenate([x for x, _ in parts]), np.concatenate([y for _, y in parts]))
    meta = unpickle_batch(folder / layout.meta)
    if layout.names_key not in meta:
        raise ValueError(f"{folder / layout.meta} lacks {layout.names_key!r} (has {sorted(meta)})")
    names = [str(n) for n in meta[layout.names_key]]
    return _checked(ImageDataset(name, *splits["train"], *splits["test"], names, str(folder)))


# --- choosing -----------------------------------------------------------------------------------------
def detect_dataset(root: str | Path) -> str:
    """Which dataset the folder ``root`` holds: ``cifar10``, ``cifar100`` or ``fmnist``."""
    root = Path(root)
    if not root.is_dir():
        raise FileNotFoundError(f"--data folder {root} does not exist; pass a folder holding cifar-10-batches-py/, "
                                "cifar-100-python/ or the Fashion-MNIST idx files (or add --download)")
    for name, layout in CIFAR_LAYOUTS.items():
        if (root / layout.folder).is_dir() or (root / layout.meta).is_file() or (root / layout.archive).is_file():
            return name
    if any((root / (FMNIST_FILES["train"][0] + ext)).is_file() for ext in ("", ".gz")):
        return "fmnist"
    raise FileNotFoundError(f"{root} holds none of cifar-10-batches-py/, cifar-100-python/ or Fashion-MNIST's "
                            f"{FMNIST_FILES['train'][0]}(.gz); point --data at one, or pass --dataset cifar10 "
                            "--download to fetch CIFAR-10 there")


def load_images(dataset: str = "auto", data: str | Path | None = None, download: bool = False) -> ImageDataset:
    """The dataset a run asks for.

    ``data=None`` is the embedded Fashion-MNIST subset; a folder is read as ``dataset`` (``auto``: detected
    from its contents). ``download`` fetches CIFAR-10/100 into the folder first (needs internet).
    """
    if dataset != "auto" and dataset not in DATASETS:
        from plumbing.errors import unknown_name

        raise unknown_name("dataset", dataset, ("auto", *DATASETS))
    if data is None:
        if download or dataset not in ("auto", "fmnist"):
            raise ValueError(f"--dataset {dataset}{' --download' if download else ''} needs --data DIR, the folder "
                             "that holds (or will hold) the files; without --data the embedded Fashion-MNIST is used")
        return load_embedded()
    root = Path(data)
    if dataset == "auto":
        if download and not root.is_dir():
            raise ValueError("--download needs --dataset cifar10 or --dataset cifar100 to say what to fetch")
        dataset = detect_dataset(root)
    if dataset == "fmnist":
        if download:
            raise ValueError("--download fetches CIFAR only; for Fashion-MNIST run `apt-get install "
                             f"dataset-fashion-mnist` and pass --data {DEBIAN_FMNIST}")
        return load_fmnist_idx(root)
    return load_cifar(root, dataset, download)


def _checked(data: ImageDataset) -> ImageDataset:
    for split, y in (("train", data.train_y), ("test", data.test_y)):
        if len(y) and (y.min() < 0 or y.max() >= data.num_classes):
            raise ValueError(f"{data.source}: {split} labels span [{y.min()}, {y.max()}] but there are "
                             f"{data.num_classes} class names")
    return data


def stratified_split(labels: np.ndarray, fraction: float, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Indices (kept, held out): ``fraction`` of each class held out, chosen at random from ``seed``."""
    rng = np.random.default_rng(seed)
    held = [rng.permutation(np.flatnonzero(labels == k))[: round(fraction * int((labels == k).sum()))]
            for k in np.unique(labels)]
    held_out = np.sort(np.concatenate(held)) if held else np.zeros(0, dtype=np.int64)
    kept = np.setdiff1d(np.arange(len(labels)), held_out)
    return kept, held_out


def channel_stats(images: np.ndarray, chunk: int = 4096) -> tuple[list[float], list[float]]:
    """Per-channel mean and standard deviation of uint8 ``images`` (N, C, H, W), on the [0, 1] scale."""
    total = np.zeros(images.shape[1])
    squares = np.zeros(images.shape[1])
    for start in range(0, len(images), chunk):  # chunks keep the float64 copy small on 50,000 images
        block = images[start : start + chunk].astype(np.float64) / 255.0
        total += block.sum(axis=(0, 2, 3))
        squares += (block**2).sum(axis=(0, 2, 3))
    count = images.shape[0] * images.shape[2] * images.shape[3]
    mean = total / count
    std = np.sqrt(np.maximum(squares / count - mean**2, 1e-12))
    return mean.tolist(), std.tolist()
