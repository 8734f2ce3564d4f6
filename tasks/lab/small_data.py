"""Lesson ``small-data``: does a ViT lose to a CNN on small data, and does DeiT's distillation relieve that?

The article's claim: without a convolution's locality prior, a ViT needs much more data than a ResNet to
match it, and DeiT (Touvron et al. 2021) largely closes the gap by distilling a CNN teacher through an
extra token, with strong augmentation. The lesson measures it on the embedded Fashion-MNIST at 10 %, 30 % and
100 % of its 5,000 training images (stratified, nested subsets), every run with the same number of
optimizer steps and images per step, and a fair CNN:

* **ViT**: our ViT at 2 layers of width 64 (patch 4: 65 tokens), a fifth of the ``cpu`` preset's cost per
  step, so that a CPU can give every row enough steps;
* **CNN**: ResNet-18 with the small-image stem at the width whose training FLOPs per image are nearest the
  ViT's (measured with the package's counter, :func:`tasks.cifar.reference.matched_width`; within ±20 %), so
  "same steps" is also "same compute";
* **DeiT**: the same ViT with the distillation token and head, trained by hard distillation from that CNN
  (trained at the same fraction: the teacher saw no more data than the student), with TrivialAugment;
* full run only: **DeiT without augmentation** (the teacher alone), and **ResNet-18** itself at the smallest
  fraction (its steps cost about 14× as many FLOPs as the ViT's at 32×32, 100× at this ViT's size).

``--quick`` gives every run 200 steps: far too few for a ViT to fit even 500 images, so it shows the CNN's head
start and the pipeline, not the end state; the full run gives 1,000 (64 epochs of the smallest subset).

Every image's augmentation is a function of (seed, step, image) (:func:`tasks.cifar.augment.augment_seed`),
and the loss is the cifar runner's (:func:`tasks.cifar.distill.objective_loss`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor, nn

from plumbing.tables import markdown_table
from tasks.cifar.augment import apply_policy, augment_seed, policy_transform
from tasks.cifar.datasets import channel_stats, load_embedded
from tasks.cifar.distill import objective_loss
from tasks.cifar.reference import matched_width, resnet18_small, training_flops
from tasks.cifar.task import warmup_cosine
from tasks.lab.lesson import LabSettings, LessonResult
from tasks.lab.toolkit import figure, save, translated
from zoo.registry import create

FRACTIONS = (0.1, 0.3, 1.0)
LESSON_VIT = dict(d_model=64, depth=2, heads=2, patch_size=4, mlp_ratio=2.0)  # ~32 MFLOPs per training image
# The cifar runner's recipe (AdamW, warm-up + cosine, label smoothing, weight decay) for every row; at 200-2,000
# steps of 32 images a peak rate of 2e-3 trains ViT and CNN alike faster than the runner's 1e-3 at 128 images.
LR, WEIGHT_DECAY, SMOOTHING, BATCH = 2e-3, 0.05, 0.1, 32
RELIEF = 0.5  # "largely relieves": DeiT closes at least half of the CNN's lead over ViT at the smallest fraction


@dataclass
class Images:
    """The embedded training and test images on the CPU. Shape: ``x`` (N, 1, 32, 32) uint8, ``y`` (N,) long."""

    train_x: Tensor
    train_y: Tensor
    test_x: Tensor
    test_y: Tensor


def load() -> Images:
    data = load_embedded()
    return Images(torch.from_numpy(data.train_x), torch.from_numpy(data.train_y),
                  torch.from_numpy(data.test_x), torch.from_numpy(data.test_y))


def nested_subsets(labels: Tensor, fractions: tuple[float, ...], seed: int = 0) -> dict[float, Tensor]:
    """Indices of ``fraction`` of each class, nested (the 10 % images are among the 30 %), drawn from ``seed``."""
    rng = np.random.default_rng(seed)
    orders = [rng.permutation(np.flatnonzero(labels.numpy() == k)) for k in np.unique(labels.numpy())]
    return {f: torch.from_numpy(np.sort(np.concatenate([o[: max(1, round(f * len(o)))] for o in orders])))
            for f in fractions}


class Normalize(nn.Module):
    """The training subset's mean and std, as the cifar runner fits them. Shape: uint8 or [0, 1] float -> float."""

    def __init__(self, mean: list[float], std: list[float]) -> None:
        super().__init__()
        self.register_buffer("mean", torch.tensor(mean).view(1, -1, 1, 1))
        self.register_buffer("std", torch.tensor(std).view(1, -1, 1, 1))

    def forward(self, x: Tensor) -> Tensor:
        x = x.float() / 255.0 if x.dtype == torch.uint8 else x
        return (x - self.mean) / self.std


def build(kind: str, vit: dict, width: int, seed: int) -> nn.Module:
    """A model of the lesson: ``vit``, ``deit`` (its config ``vit``), ``cnn`` (ResNet-18 at ``width``), ``resnet18``."""
    torch.manual_seed(seed)
    if kind in ("vit", "deit"):
        return create(kind, task="cifar", preset="cpu", in_channels=1, num_classes=10, **vit)
    return resnet18_small(1, 10, width if kind == "cnn" else 64)


def per_image_flops(kind: str, vit: dict, width: int) -> int:
    """Training FLOPs (forward + backward) per 32×32 image, by the package's counter."""
    with torch.random.fork_rng():
        return training_flops(build(kind, vit, width, 0), torch.zeros(1, 1, 32, 32))


def train(model: nn.Module, images: Images, index: Tensor, steps: int, normalize: Normalize, seed: int,
          teacher: nn.Module | None = None, augment: bool = False, progress: bool = True, desc: str = "",
          batch: int = BATCH, lr: float = LR) -> list[float]:
    """AdamW with warm-up and cosine decay for ``steps`` steps of ``batch`` images drawn from ``index``; the loss of
    each step. ``teacher``: hard targets for a distilling model; ``augment``: TrivialAugment per image."""
    from tasks.engine.progress import progress_bar

    decay = [p for p in model.parameters() if p.ndim > 1]
    rest = [p for p in model.parameters() if p.ndim <= 1]
    optimizer = torch.optim.AdamW([{"params": decay, "weight_decay": WEIGHT_DECAY},
                                   {"params": rest, "weight_decay": 0.0}], lr=lr)
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, warmup_cosine(max(1, steps // 10), steps))
    policy = policy_transform("trivialaugment") if augment else None
    gen = torch.Generator().manual_seed(seed)
    order: list[int] = []
    losses = []
    model.train()
    for step in progress_bar(range(steps), desc=desc, disable=not progress, leave=False):
        if len(order) < batch:  # epochs of the subset, reshuffled; a batch never repeats an image
            order += index[torch.randperm(len(index), generator=gen)].tolist()
        rows, order = order[:batch], order[batch:]
        x, y = images.train_x[rows], images.train_y[rows]
        if policy is not None:
            x = apply_policy(x, [augment_seed(seed, step, i) for i in rows], policy)
        output = model(normalize(x))
        with torch.no_grad():
            hard = teacher(normalize(x)).argmax(-1) if teacher is not None else None
        loss = objective_loss(model, output, y, hard, SMOOTHING) / len(rows)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        schedule.step()
        losses.append(float(loss.detach()))
    model.eval()
    return losses


@torch.no_grad()
def accuracy(model: nn.Module, images: Images, normalize: Normalize) -> float:
    """Top-1 on the 1,000 test images."""
    model.eval()
    x = images.test_x
    preds = torch.cat([model(normalize(x[j : j + 500])).argmax(-1) for j in range(0, len(x), 500)])  # (N,)
    return float((preds == images.test_y).float().mean())


# --- the experiment ----------------------------------------------------------------------------------------
def run(settings: LabSettings) -> LessonResult:
    images = load()
    steps = settings.steps(1000, 200)
    vit = dict(LESSON_VIT)
    width, cnn_flops = matched_width(per_image_flops("vit", vit, 0))
    # row -> (model, TrivialAugment, fractions); the CNN first: it is DeiT's teacher at each fraction
    plan = {"CNN": ("cnn", False, FRACTIONS), "ViT": ("vit", False, FRACTIONS), "DeiT": ("deit", True, FRACTIONS)}
    if not settings.quick:
        plan["DeiT without augmentation"] = ("deit", False, FRACTIONS)
        plan["ResNet-18"] = ("resnet18", False, FRACTIONS[:1])
    flops = {name: cnn_flops if kind == "cnn" else per_image_flops(kind, vit, width)
             for name, (kind, _, _) in plan.items()}
    subsets = nested_subsets(images.train_y, FRACTIONS, settings.seed)
    accuracies: dict[str, dict[float, float]] = {name: {} for name in plan}
    curves: dict[str, dict[float, list[float]]] = {name: {} for name in plan}
    for fraction, index in subsets.items():
        normalize = Normalize(*channel_stats(images.train_x[index].numpy()))  # fitted on the subset, as zoo train
        teacher = None
        for name, (kind, augment, fractions) in plan.items():
            if fraction not in fractions:
                continue
            model = build(kind, vit, width, settings.seed)
            curves[name][fraction] = train(model, images, index, steps, normalize, settings.seed,
                                           teacher if kind == "deit" else None, augment, settings.progress,
                                           f"{name} {fraction:.0%}")
            accuracies[name][fraction] = accuracy(model, images, normalize)
            teacher = model if kind == "cnn" else teacher
    findings = _findings(accuracies, flops, width, steps, subsets, curves)
    return LessonResult(_verdict(findings), findings["holds"], findings, _body(findings), [_plot(settings, findings)],
                        _verdict(findings, "zh"), _body(findings, "zh"))


def _findings(accuracies: dict, flops: dict, width: int, steps: int, subsets: dict, curves: dict) -> dict:
    vit, cnn, deit = accuracies["ViT"], accuracies["CNN"], accuracies["DeiT"]
    gap = {f: cnn[f] - vit[f] for f in FRACTIONS}  # the CNN's lead over ViT
    deit_gap = {f: cnn[f] - deit[f] for f in FRACTIONS}
    small = FRACTIONS[0]
    checks = {
        "ViT loses to the CNN on the smallest data": gap[small] > 0,
        "the CNN's lead shrinks as data grows": gap[FRACTIONS[-1]] < gap[small],
        f"DeiT closes at least {RELIEF:.0%} of that lead on the smallest data":
            gap[small] > 0 and deit_gap[small] <= (1 - RELIEF) * gap[small],
    }
    claim = ("ViT loses to the CNN on the smallest data", f"DeiT closes at least {RELIEF:.0%} of that lead on the "
             "smallest data")
    return {
        "fractions": list(FRACTIONS), "images": {f: len(subsets[f]) for f in FRACTIONS}, "steps": steps,
        "batch": BATCH, "lr": LR, "epochs": {f: steps * BATCH / len(subsets[f]) for f in FRACTIONS},
        "cnn_width": width, "flops_per_image": flops, "cnn_to_vit_flops": flops["CNN"] / flops["ViT"],
        "accuracy": accuracies, "cnn_lead": gap, "cnn_lead_over_deit": deit_gap,
        "final_loss": {name: {f: float(np.mean(c[-10:])) for f, c in by.items()} for name, by in curves.items()},
        "curves": curves, "checks": checks, "holds": all(checks[c] for c in claim),
    }


def _pts(x: float) -> str:
    return f"{100 * x:+.1f}"


def _verdict(f: dict, lang: str = "en") -> tuple[str, str]:
    """Two lines from the findings' numbers (their wording follows the measured direction), in ``lang``."""
    small, big = FRACTIONS[0], FRACTIONS[-1]
    lead, deit = f["cnn_lead"], f["cnn_lead_over_deit"]
    acc = f["accuracy"]
    relieved = lead[small] > 0 and deit[small] <= (1 - RELIEF) * lead[small]
    share = 1 - deit[small] / lead[small] if lead[small] > 0 else float("nan")
    if lang == "zh":
        return (
            f"在小数据上，ViT {'输给了' if lead[small] > 0 else '没有输给'} FLOPs 相同的 CNN：{f['images'][small]} "
            "张图像时 "
            f"{100 * acc['ViT'][small]:.1f} % 对 {100 * acc['CNN'][small]:.1f} %（CNN 领先 {_pts(lead[small])} "
            "个百分点），"
            f"用全部 {f['images'][big]} 张时领先 {_pts(lead[big])} 个百分点：数据增加到十倍，领先"
            f"{'缩小' if lead[big] < lead[small] else '扩大'}了 {100 * abs(lead[small] - lead[big]):.1f} 个百分点。",
            f"DeiT（以这个 CNN 为教师 + TrivialAugment）{'基本弥补了' if relieved else '没能基本弥补'}这个差距："
            f"{small:.0%} 数据时 {100 * acc['DeiT'][small]:.1f} %（相对 "
            f"ViT {_pts(acc['DeiT'][small] - acc['ViT'][small])}，"
            f"补上了差距的 {share:.0%}），{big:.0%} 数据时 {100 * acc['DeiT'][big]:.1f} %；文章的说法在这里"
            f"{'成立' if f['holds'] else '不成立'}。",
        )
    first = (f"ViT {'loses to' if lead[small] > 0 else 'does not lose to'} a CNN of the same FLOPs on small data: "
             f"{100 * acc['ViT'][small]:.1f} % vs {100 * acc['CNN'][small]:.1f} % with {f['images'][small]} images "
             f"(CNN lead {_pts(lead[small])} points), {_pts(lead[big])} points with all {f['images'][big]}: the lead "
             f"{'shrinks' if lead[big] < lead[small] else 'grows'} by {100 * abs(lead[small] - lead[big]):.1f} "
             "points as the data grows tenfold.")
    second = (f"DeiT (that CNN as teacher + TrivialAugment) "
              f"{'largely relieves' if relieved else 'does not largely relieve'} it: {100 * acc['DeiT'][small]:.1f} % "
              f"at {small:.0%} ({_pts(acc['DeiT'][small] - acc['ViT'][small])} "
              f"over ViT, {share:.0%} of the gap closed), {100 * acc['DeiT'][big]:.1f} % at {big:.0%}; the article's "
              f"claim {'held' if f['holds'] else 'did not hold'} here.")
    return first, second


def _words_zh(f: dict) -> dict[str, str]:
    """The Chinese of the tables' headings and the checks' sentences (some name the data's sizes)."""
    return {"model": "模型", "MFLOPs / training image": "每张训练图像 MFLOPs", "fraction": "数据比例",
            "epochs": "轮数", "CNN − ViT (points)": "CNN − ViT（百分点）", "CNN − DeiT (points)": "CNN − "
            "DeiT（百分点）",
            "direction": "方向", "seen": "观察到",
            **{f"top-1 at {fr:.0%} ({f['images'][fr]})": f"{fr:.0%} 数据（{f['images'][fr]} 张）top-1"
               for fr in f["fractions"]},
            "ViT loses to the CNN on the smallest data": "最小数据上 ViT 输给 CNN",
            "the CNN's lead shrinks as data grows": "数据变多时 CNN 的领先缩小",
            f"DeiT closes at least {RELIEF:.0%} of that lead on the smallest data":
                f"最小数据上 DeiT 至少补上这段领先的 {RELIEF:.0%}"}


def _body(f: dict, lang: str = "en") -> str:
    """The markdown between the verdict and the plot, in ``lang`` ("en" or "zh"): tables built once, relabelled."""
    names = list(f["accuracy"])
    table = [{"model": n, "MFLOPs / training image": f["flops_per_image"][n] / 1e6,
              **{f"top-1 at {fr:.0%} ({f['images'][fr]})": f["accuracy"][n].get(fr, "–") for fr in f["fractions"]}}
             for n in names]
    gaps = [{"fraction": f"{fr:.0%}", "epochs": f["epochs"][fr], "CNN − ViT (points)": 100 * f["cnn_lead"][fr],
             "CNN − DeiT (points)": 100 * f["cnn_lead_over_deit"][fr]} for fr in f["fractions"]]
    checks = [{"direction": k, "seen": "✓" if v else "✗"} for k, v in f["checks"].items()]
    if lang == "zh":
        table, gaps, checks = (translated(rows, _words_zh(f)) for rows in (table, gaps, checks))
        return "\n\n".join([
            "## 步数相同，每步的图像数相同",
            f"每次运行：{f['steps']} 步 AdamW，每步 {f['batch']} 张图像（峰值学习率 {f['lr']:g}，先预热再余弦衰减，"
            "标签平滑 0.1，"
            f"权重衰减 0.05），在 1,000 张测试图像上评分。CNN 是宽度 {f['cnn_width']} 的 ResNet-18"
            f"（各阶段 {f['cnn_width']}、{2 * f['cnn_width']}、{4 * f['cnn_width']}、{8 * f['cnn_width']}）："
            f"每张图像的训练 FLOPs 是 ViT 的 {f['cnn_to_vit_flops']:.2f}×（torch.utils.flop_counter，FLOPs = "
            "2·MACs，前向 + 反向）。",
            markdown_table(table),
            "## CNN 的领先随数据量的变化",
            markdown_table(gaps),
            "步数固定，意味着数据越多、遍历的轮数越少：最小的子集被反复看了很多遍，"
            "没有局部性先验的模型正是在这里过拟合。",
            "## 方向", markdown_table(checks),
        ])
    return "\n\n".join([
        "## Same steps, same images per step",
        f"Every run: {f['steps']} AdamW steps of {f['batch']} images (peak rate {f['lr']:g}, warm-up then cosine, "
        "label smoothing 0.1, "
        f"weight decay 0.05), scored on the 1,000 test images. The CNN is ResNet-18 at width {f['cnn_width']} "
        f"(stages {f['cnn_width']}, {2 * f['cnn_width']}, {4 * f['cnn_width']}, {8 * f['cnn_width']}): "
        f"{f['cnn_to_vit_flops']:.2f}× the ViT's training FLOPs per image (torch.utils.flop_counter, FLOPs = "
        "2·MACs, forward + backward).",
        markdown_table(table),
        "## The CNN's lead, by data",
        markdown_table(gaps),
        "A fixed budget of steps means fewer passes over more data: the smallest subset is seen many times over, "
        "which is where a model without a locality prior overfits.",
        "## Directions", markdown_table(checks),
    ])


def _plot(settings: LabSettings, f: dict) -> str:
    fig, axes = figure(1, 2, width=5.2, height=3.8)
    left, right = axes[0]
    for name, by in f["accuracy"].items():
        left.plot([f["images"][fr] for fr in by], [100 * v for v in by.values()], marker="o", label=name)
    left.set_xscale("log")
    counts = [f["images"][fr] for fr in f["fractions"]]
    left.set_xticks(counts, [str(n) for n in counts], minor=False)
    left.minorticks_off()
    left.set(xlabel="training images (log)", ylabel="test top-1 (%)", title="same steps, CNN at the ViT's FLOPs")
    left.legend(fontsize=8)
    xs = np.arange(len(f["fractions"]))
    right.bar(xs - 0.2, [100 * f["cnn_lead"][fr] for fr in f["fractions"]], 0.4, label="CNN − ViT")
    right.bar(xs + 0.2, [100 * f["cnn_lead_over_deit"][fr] for fr in f["fractions"]], 0.4, label="CNN − DeiT")
    right.axhline(0, color="grey", linewidth=1)
    right.set_xticks(xs, [f"{fr:.0%}" for fr in f["fractions"]])
    right.set(xlabel="share of the training set", ylabel="points", title="the CNN's lead")
    right.legend(fontsize=8)
    return save(fig, settings.out / "small_data.png")
