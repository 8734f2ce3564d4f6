"""``zoo predict`` for image runs: image files or folders of them -> a CSV of classes and top-5 probabilities.

Each image is converted exactly as the training images were (see :func:`load_image`): to the run's channels
(grayscale ``L`` for 1-channel runs, ``RGB`` for 3), resized to the dataset's native size (28×28 for
Fashion-MNIST, 32×32 for CIFAR), centred on the 32×32 zero canvas as :func:`~tasks.cifar.datasets.pad_to`
does, as uint8, then normalised with the training images' mean and std (``CifarTask.inputs``).

The CSV has one row per image, in input order (a folder's images sorted by path):
``path,class,probability,top5`` with ``top5`` like ``Coat:0.6100;Shirt:0.2000;...``.
"""

from __future__ import annotations

import csv
from collections import Counter
from pathlib import Path

import numpy as np
import torch

from tasks.cifar.datasets import IMAGE_SIZE, pad_to
from tasks.cifar.report import attention_heatmaps, plot_attention
from tasks.engine.progress import progress_bar
from tasks.runs.run import Run

DEFAULT_OUT = "predictions.csv"
HIGH_DEPTH_MODES = ("I;16", "I;16L", "I;16B", "I;16N", "I", "F")  # PIL's convert("L") clips these at 255


def image_extensions() -> set[str]:
    """The file suffixes PIL can read (``.png``, ``.jpg``, ``.bmp``, ``.tif``, ``.webp``...)."""
    from PIL import Image

    Image.init()
    return {ext for ext, fmt in Image.registered_extensions().items() if fmt in Image.OPEN}


def image_files(inputs: list[str]) -> list[Path]:
    """The image files ``inputs`` name, in order; a folder gives its image files (recursively) sorted by path."""
    if not inputs:
        raise ValueError("no inputs: give image files or folders of them, e.g. `zoo predict RUN photo.png images/`")
    extensions = image_extensions()
    files: list[Path] = []
    for name in inputs:
        path = Path(name)
        if not path.exists():
            raise FileNotFoundError(f"{path} does not exist; give image files or folders of them")
        if path.is_dir():
            found = sorted(p for p in path.rglob("*") if p.is_file() and p.suffix.lower() in extensions)
            if not found:
                raise ValueError(f"folder {path} holds no image files (.png, .jpg, .bmp, .tif, ...); give a folder "
                                 "of images or the image files themselves")
            files += found
        else:
            files.append(path)
    return files


def load_image(path: Path, channels: int, native_size: tuple[int, int]) -> np.ndarray:
    """One image file as the run's training images were stored: uint8 (C, 32, 32).

    Transparent pixels are composited onto black, the training canvas's colour; 16-bit and float images are
    scaled to 8 bits (floats are read on the [0, 1] scale, as torchvision does; PIL's own conversion would clip
    them at 255); EXIF orientation is applied. Other sizes are resized straight to the native size (bilinear,
    antialiased; the aspect ratio is not kept), so an image already at that size is used pixel for pixel.
    """
    from PIL import Image, ImageOps, UnidentifiedImageError
    from torchvision.transforms.v2 import functional as F

    try:
        with Image.open(path) as opened:
            image = ImageOps.exif_transpose(opened)  # a copy, loaded: the file can close
        if image.mode in HIGH_DEPTH_MODES:
            values = F.pil_to_tensor(image)  # (1, H, W) uint16, int32 or float32
            if values.is_floating_point():
                values = values.clamp(0, 1)
            elif values.dtype == torch.int32:  # mode I: 16-bit data in 32-bit pixels
                values = values.clamp(0, 65535).to(torch.uint16)
            image = F.to_pil_image(F.to_dtype(values, torch.uint8, scale=True))  # mode L
        if image.mode in ("RGBA", "LA", "PA", "RGBa", "La") or "transparency" in image.info:
            rgba = image.convert("RGBA")
            image = Image.alpha_composite(Image.new("RGBA", rgba.size, (0, 0, 0, 255)), rgba)
        image = image.convert("L" if channels == 1 else "RGB")
    except UnidentifiedImageError:
        raise ValueError(f"{path} is not an image file (PIL does not recognise its format); give PNG, JPEG, BMP, "
                         "TIFF... files") from None
    except (OSError, ValueError, SyntaxError, Image.DecompressionBombError) as error:  # damaged, odd mode, huge
        raise ValueError(f"{path} could not be read as an image ({error}); give PNG, JPEG, BMP, TIFF... "
                         "files") from None
    height, width = native_size
    if image.size != (width, height):
        image = F.resize(image, [height, width], antialias=True)  # bilinear, as PIL resizes
    pixels = F.pil_to_tensor(image).numpy()  # (C, h, w) uint8
    return pad_to(pixels[None], IMAGE_SIZE)[0]  # (C, 32, 32)


def predict(run: Run, inputs: list[str], out: str | None = None, progress: bool = True,
            batch_size: int | None = None, attention: str | None = None) -> str:
    """Classify the images ``inputs`` names and write the CSV ``out`` (default ``predictions.csv``).

    Args:
        run: a loaded cifar run (:func:`tasks.runs.run.load_run`).
        inputs: image files or folders of them.
        out: the CSV to write.
        progress: show a progress bar when there is more than one batch.
        batch_size: images per forward pass (default: the run's ``eval_batch_size``).
        attention: a folder to write each image's attention map into (``NNNN_<name>.png``; ViT, Swin).

    Returns:
        The one-line summary ``zoo predict`` prints.
    """
    task, model = run.task, run.model
    if batch_size is not None and (isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1):
        raise ValueError(f"--batch-size must be a positive integer, got {batch_size!r}")
    size = batch_size or task.config.eval_batch_size
    out_path = Path(out if out is not None else DEFAULT_OUT)
    if out_path.is_dir():
        raise ValueError(f"--out {out_path} is a folder; give the path of the CSV to write, e.g. "
                         f"{out_path / DEFAULT_OUT}")
    files = image_files(inputs)
    maps = None if attention is None else _attention_folder(run, Path(attention))

    rows = []
    bar = progress_bar(total=len(files), desc="predict", unit="image", disable=not progress or len(files) <= size,
                       leave=False, dynamic_ncols=True)
    for start in range(0, len(files), size):
        chunk = files[start : start + size]
        images = torch.from_numpy(np.stack([load_image(f, task.in_channels, task.native_size) for f in chunk]))
        with run.context():  # the precision the run trained in
            probs = task.logits(model, images, size).float().softmax(-1)  # (b, K)
        top_p, top_k = probs.topk(min(5, probs.shape[-1]), dim=-1)  # (b, 5)
        for file, ks, ps in zip(chunk, top_k.tolist(), top_p.tolist()):
            rows.append([str(file), task.class_names[ks[0]], f"{ps[0]:.4f}",
                         ";".join(f"{task.class_names[k]}:{p:.4f}" for k, p in zip(ks, ps))])
        if maps is not None:
            _write_attention(task, model, images, rows[start:], start, maps)
        bar.update(len(chunk))
    bar.close()

    out_path.parent.mkdir(parents=True, exist_ok=True)
    with out_path.open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["path", "class", "probability", "top5"])
        writer.writerows(rows)
    counts = ", ".join(f"{name} {n}" for name, n in Counter(r[1] for r in rows).most_common(3))
    where = f"; attention maps in {maps}/" if maps is not None else ""
    return (f"classified {len(rows)} image(s) with {run.variant} ({task.dataset_name}, {task.num_classes} classes) "
            f"-> {out_path}; most predicted: {counts}{where}")


def _attention_folder(run: Run, folder: Path) -> Path:
    """``folder``, created, once the model is known to have attention maps (a one-line error otherwise)."""
    task = run.task
    blank = torch.zeros(1, task.in_channels, IMAGE_SIZE, IMAGE_SIZE, dtype=torch.uint8, device=run.device)
    if attention_heatmaps(run.model, task.inputs(blank)) is None:
        raise ValueError(f"--attention: the {run.variant} model records no attention over a square grid of patches "
                         "(ViT and Swin models do); drop --attention")
    if folder.exists() and not folder.is_dir():
        raise ValueError(f"--attention {folder} is a file; give a folder for the attention maps")
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def _write_attention(task, model, images: torch.Tensor, rows: list[list[str]], start: int, folder: Path) -> None:
    heat = attention_heatmaps(model, task.inputs(images.to(task.device)))  # (b, G, G)
    for j, row in enumerate(rows):
        name = Path(row[0])
        plot_attention(images[j : j + 1].numpy(), heat[j : j + 1], [f"{name.name} → {row[1]} ({row[2]})"],
                       folder / f"{start + j:04d}_{name.stem}.png")
