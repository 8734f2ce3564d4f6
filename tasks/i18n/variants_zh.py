"""The variant pages in Chinese: every registered variant's summary and every declared change's story (the classic
choice, the variant's choice, the flaw it addresses; the scope word), and the travelling changes of ``zoo changes``.

The text is written for this package, not word for word from the English: a Chinese engineer reads the same claims,
numbers and formulas in their own idiom, with the glossary's one term for each concept (:mod:`tasks.i18n.glossary`).
Entries are keyed by *names* (variant, change, travelling change), never by the English text, so an edit of the
English wording keeps its translation; a new variant or change without an entry, or an entry whose name no longer
exists, fails ``tests/tasks/i18n/test_variants_zh.py``. Formulas and code names are the same bytes in both languages.

A name registered for several tasks has one entry when its registrations tell the same story (``rope`` on
translation and on lm); a registration whose English summary differs from the name's first one (the classic
language model beside the classic encoder–decoder) has an entry of its own in :data:`TASK_SUMMARIES`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from plumbing.errors import unknown_name
from tasks.i18n import check_lang

if TYPE_CHECKING:
    from zoo.changes import TravellingChange
    from zoo.registry import Change, Variant

SCOPES: dict[str, str] = {"general": "通用", "task-specific": "特定于任务"}

# The parts of core.parts.PARTS, as a Chinese page names them.
PARTS: dict[str, str] = {
    "embedding": "嵌入", "position": "位置", "attention": "注意力", "ffn": "前馈网络", "norm": "归一化",
    "stacking": "堆叠结构", "head": "输出头", "decoding": "解码", "objective": "训练目标",
}

# Sentences several variants share (the same English in several registrations), written once.
_POST_LN = "Post-LN（残差相加之后再归一化）：x = LN(x + Sublayer(x))"
_PRE_LN = "Pre-LN（在残差分支内部先归一化）：x = x + Sublayer(LN(x))"
_POST_LN_FLAW = "Post-LN 在初始化时靠近输出处的梯度很大"
_SINUSOIDS = "固定的正余弦位置编码加到嵌入上"
_ABSOLUTE = "绝对的正余弦位置编码加到嵌入上"
_DISTANCE_FLAW = "绝对位置让注意力取决于一对 token 在哪里，而不是相隔多远"
_RELU = "两层线性层之间用 ReLU"
_RELU_FORMULA = f"{_RELU}：W₂·ReLU(W₁x + b₁) + b₂"
_GELU = "两层线性层之间用 GELU"
_VOCABULARY = "每个 token 都是在词表中查到的一个符号"
_PATCH_VOCABULARY = f"{_VOCABULARY}（把一个图像块量化成 256 个符号之一）"
_NOT_SYMBOLS = "体数据并不是由符号组成的"
_ISOTROPIC = "单一分辨率上的各向同性层堆叠，没有解码器"
_DENSE = "密集预测需要同时兼顾精细的细节和粗粒度的上下文"
_UNET = "多个分辨率的编码器，加上一个 CNN U-Net 解码器，从每个分辨率接跳跃连接，输出逐体素 logits"
_SOFTMAX = "token 之间的 softmax 注意力"
_CNN_BASELINE = "3D CNN 基线：Transformer 分割模型必须超过的对手"
_GLOBAL_3D = "对所有 token 做全局 softmax 注意力，O(N²)"


def _glu(label: str, gate: str) -> tuple[str, str, str]:
    """The ``ffn`` change of a gated FFN (:func:`zoo.norm_ffn.glu_change`): GeGLU, ReGLU, SwiGLU."""
    return (_RELU_FORMULA,
            f"{label}：({gate}(xW) ⊙ xV)·W₂，三个无偏置矩阵，d_ff 不变（前馈网络的权重变为 1.5×；"
            "参数量相等时 d_ff 取 2/3）",
            "逐元素激活只凭隐藏单元自己的预激活值决定它通过多少；乘性门控让另一个投影来决定通过多少，"
            "在参数量相等时能降低困惑度")


_PRE_LN_CHANGE = (_POST_LN, f"{_PRE_LN}，每个堆叠末尾再加一个 LN", f"{_POST_LN_FLAW}，因此需要谨慎的预热")
_LEARNED_POS = (_SINUSOIDS, "可学习的绝对位置嵌入加到嵌入上",
                "固定的频率无法适应数据（代价是超过 max_len 就无法外推）")
_ROPE = (_ABSOLUTE, "在每个自注意力中对 q 和 k 做旋转位置编码", _DISTANCE_FLAW)
_ALIBI = (_ABSOLUTE, "在每个自注意力分数上加 -m_h·|i - j|", "正余弦位置编码的模型很难外推到比训练时更长的序列")
_LINEAR = ("softmax(QKᵀ/√d)V，每个头 O(N²·d) 时间、O(N²) 内存", "φ(Q)(φ(K)ᵀV)，其中 φ = elu+1，O(N·d²)",
           "代价随序列长度呈平方增长")
_MOE = ("每层一个稠密的前馈网络：每个 token 用到全部参数",
        "每隔一层换成 8 个专家前馈网络（每个与稠密前馈网络一样宽）的 top-2 专家路由混合；训练时每个专家在每条序列中"
        "最多接收其均衡份额的 1.25×，位置靠前的 token 优先，填充 token 从不路由；评估时不丢弃 token",
        "计算量与参数量绑定：有 E 个专家、每个 token 选 k 个时，一层的参数增长 E 倍，而每个 token 的计算只增长 k 倍")
_RMSNORM = ("层归一化：(x − mean(x)) / sqrt(var(x) + eps) · g + b，2·D 个参数",
            "RMSNorm：x / sqrt(mean(x²) + eps) · g（torch.nn.RMSNorm），D 个参数，所有归一化都换掉",
            "层归一化的重新居中和偏置要花时间和参数；稳定性只来自重新缩放的不变性，所以 RMSNorm 去掉了它们"
            "（论文中在同等质量下快 7–64 %）")
_GELU_CHANGE = (_RELU, _GELU, "ReLU 的硬零点丢掉了一半预激活值的梯度；GELU 是平滑的")

# ViT's five changes, which DeiT (ViT trained data-efficiently) keeps and adds two to.
_VIT: dict[str, tuple[str, str, str]] = {
    "embedding": (_PATCH_VOCABULARY, "每个 P×P 图像块线性投影到 D 维（一个带步长的卷积）",
                  "离散词表无法表示连续的像素：把图像块量化就丢掉了它的内容"),
    "position": (_SINUSOIDS,
                 "在图像块网格（+ [CLS]）上的一张可学习绝对位置表；换图像尺寸时用双三次插值重采样它的网格"
                 "（与 timm 相同），因为可学习的表无法外推",
                 "固定的 1-D 频率对 2-D 图像块网格一无所知；可学习的表能从数据中适应它"),
    "norm": (_POST_LN, f"{_PRE_LN}，末尾一个 LN（eps 1e-6）",
             "Post-LN 需要谨慎的预热，且难以训练深层堆叠；Pre-LN 让残差通路保持干净"),
    "ffn": (_RELU, _GELU, "ReLU 的硬零点丢掉了一半预激活值的梯度；GELU 是平滑的（与 BERT 相同）"),
    "stacking": ("编码器–解码器：由解码器生成输出序列（这里把标签当作解码出的一个 token）",
                 "只用编码器；类别从一个可学习的 [CLS] token 读出，它被放在图像块之前（N + 1 个 token）",
                 "分类只需要一个输出，不需要生成序列：解码器白白多花了层数"),
}

# MISSFormer on images and on volumes: the same changes but the embedding's kernel.
_MISSFORMER: dict[str, tuple[str, str, str]] = {
    "attention": ("全局 softmax 注意力：键和值来自每个 token，O(N²)",
                  "高效自注意力：键和值来自一张每边缩小 R× 的特征图（带步长的卷积加层归一化；各阶段 R = 8、4、2、1），"
                  "O(N²/R²)",
                  "代价随 token 数呈平方增长：在 224×224 图像的 1/4 分辨率上，每个头有 3136² 个分数"),
    "ffn": ("逐位置的 ReLU 前馈网络：每个 token 各算各的",
            "ReMix-FFN：一个 GELU 前馈网络，其隐藏层 token 经过一个 3×3 深度卷积（带跳跃连接和层归一化）",
            "逐位置的前馈网络看不到邻居：没有局部上下文，在没有位置编码时也就没有位置信息"),
    "hierarchy": ("单一分辨率和宽度上的各向同性堆叠（这里：1/4 分辨率上的一个阶段，没有解码器）",
                  "四个阶段，分辨率从 1/4 到 1/32，阶段之间用步长 2 的重叠图像块嵌入相连，再加一个 U 形解码器："
                  "图像块扩展、跳跃连接拼接、每个尺度上的 Transformer 块",
                  "单一尺度：密集预测需要同时兼顾精细的细节和粗粒度的上下文，而每一层都用全分辨率代价很高"),
    "bridge": ("每个尺度各自通过自己的跳跃连接到达解码器（或者根本没有解码器）",
               "上下文桥：把所有阶段的 token 融合成一条序列联合做注意力（键按阶段缩减），再在每个阶段接一个 ReMix-FFN",
               "各自独立的跳跃连接无法把跨尺度的全局上下文带进解码器"),
    "position": (_SINUSOIDS, "不用位置编码：ReMix-FFN 里补零的深度卷积本身就带出了位置信息",
                 "为某个 token 数设计的位置编码，在测试分辨率不同时必须插值"),
    "norm": (_POST_LN, f"{_PRE_LN}，并在每个编码器阶段末尾加一个层归一化",
             f"{_POST_LN_FLAW}，因此深层堆叠需要谨慎的预热"),
}


def _missformer_embedding(kernel: str) -> tuple[str, str, str]:
    return (f"{_VOCABULARY}（把一个 4×4 图像块量化成 256 个符号之一）",
            f"重叠图像块嵌入：步长 4 的 {kernel} 卷积（相邻图像块共享像素），再接层归一化",
            "词表丢掉了像素的细节，而不重叠的图像块会在边界处把结构切开")


# MONAI's 3D SwinUNETR, which swinunetr-v2 keeps and adds a change to.
_SWINUNETR: dict[str, tuple[str, str, str]] = {
    "attention": (_GLOBAL_3D,
                  "移位窗口注意力：7×7×7 体素的窗口，每隔一个块移位半个窗口，"
                  "每种窗口内偏移对应一个可学习的相对位置偏置",
                  "在一个体数据的所有 token 上做全局注意力，代价为 O(N²)："
                  "64³ 图像块在第 1 阶段有 32×32×32 = 32,768 个 token"),
    "embedding": (_VOCABULARY, "2×2×2 体素的图像块，经带步长的 3D 卷积投影", _NOT_SYMBOLS),
    "stacking": (_ISOTROPIC, _UNET, _DENSE),
}

# variant name -> its summary (the English of zoo.registry.Variant.summary, in Chinese).
SUMMARIES: dict[str, str] = {
    "classic": "论文原版的编码器–解码器：Post-LN，正余弦位置编码。",
    "pre-ln": "把层归一化移进残差分支内部，并在最后再加一个归一化。",
    "learned-pos": "每个绝对位置学一个向量，取代固定的正余弦编码。",
    "rope": "在自注意力内部，按位置旋转查询和键。",
    "alibi": "每个头在注意力分数上加一个随距离线性增长的惩罚；嵌入中不含位置。",
    "vit": "在线性嵌入的图像块上运行 Transformer 编码器，由 [CLS] token 给出分类。",
    "deit": "以数据高效的方式训练的 ViT：[CLS] token 学习标签的同时，"
            "一个蒸馏 token 及其输出头学习（CNN）教师模型的预测。",
    "t5-bias": "每个注意力分数上加一个可学习的标量，按头和对数间隔的距离桶区分（T5）。",
    "nope": "完全不用位置方案：仅凭因果注意力，token 就能知道自己在哪里。",
    "gelu": "前馈网络的两层线性层之间用 GELU 取代 ReLU（GPT、BERT）。",
    "linear": "用 φ = elu + 1 的线性注意力取代 softmax 注意力。每个头的代价模型（FLOPs = 2·MACs）："
              "softmax 约为 QKᵀ 的 2N²d 加上权重乘 V 的 2N²d，内存 N²；"
              "线性注意力约为 φ(K)ᵀV 的 2Nd² 加上 φ(Q)·S 的 2Nd²，内存随 N 线性增长；"
              "N = d 时 FLOPs 相等，N 更大时线性注意力更省。实测与融合 softmax 的墙钟时间交叉点"
              "（CPU，前向 + 反向，d_head 64）：N* ≈ 250 个 token（因果：≈ 400）；见 benchmarks/bench_linear.py。",
    "missformer": "四阶段编码器中使用空间缩减注意力和 ReMix-FFN，一个跨尺度的上下文桥，"
                  "以及输出逐像素 logits 的 U 形解码器。",
    "missformer3d": "MISSFormer 的各个部件用在体数据上：3D 重叠图像块嵌入；高效注意力，其键来自每边缩小 R× 的特征图"
                    "（键少 R³ 倍）；3×3×3 的 ReMix-FFN；覆盖所有阶段 3D token 的上下文桥；"
                    "以及带 2×2×2 图像块扩展的 U 形解码器。",
    "moe": "每隔一层的前馈网络变成 8 个专家；路由器把每个 token 送往得分最高的 2 个专家"
           "（训练时按序列设容量、位置靠前的 token 优先；评估时不丢弃 token）。",
    "swinunetr3d": "MONAI 的 3D SwinUNETR（CPU 上特征数 12，论文中 48）：在 3D 图像块上的四个 Swin 阶段，"
                   "阶段间做图像块合并，再由残差 CNN 解码器输出逐体素 logits。",
    "unetr": "MONAI 的 UNETR：在 16³ 体素图像块上的 12 层 ViT（CPU 上宽度 192，论文中 768），其第 3、6、9、"
             "12 层送入一个 CNN 解码器。",
    "dynunet": "3D CNN 基线：MONAI 的 DynUNet，采用 nnU-Net 的 3d_fullres 几何结构，根据数据的体素间距和图像块大小规划"
               "（沿较粗的轴先用大小为 1 的卷积核，直到其他轴赶上；只要一边仍 ≥ 4 就用步长 2）。",
    "swinunetr-v2": "MONAI 的 SwinUNETR 开启 use_v2：在 swinunetr3d 的基础上，每个 Swin 阶段开头加一个残差卷积块"
                    "（zoo ablate swinunetr-v2 --task medseg 会把它还原）。",
    "resenc": "nnU-Net ResEnc 的残差编码器 U-Net（dynamic-network-architectures，即 nnunet 扩展），"
              "与 dynunet 一样根据数据的体素间距和图像块规划，每个阶段的块数取 ResEnc M 的设置。",
    "segresnet": "按 Auto3DSeg 的训练方式配置的 MONAI SegResNetDS（实例归一化；CPU 上 16 个滤波器，"
                 "Auto3DSeg 中 32 个）。",
    "mednext": "MONAI 的 MedNeXt：由 ConvNeXt 块组成的 U-Net，规模取论文的 S、B、M、L（同名预设；"
               "CPU 上 S 规模用 8 个滤波器）。",
    "rmsnorm": "所有层归一化都换成 RMSNorm：不减均值、没有偏置，只有增益。",
    "geglu": "给前馈网络的隐藏层加门控：(GELU(xW) ⊙ xV)·W₂，无偏置（GeGLU）。",
    "reglu": "给前馈网络的隐藏层加门控：(ReLU(xW) ⊙ xV)·W₂，无偏置（ReGLU）。",
    "swin": "带相对位置偏置的移位窗口注意力，分阶段堆叠，阶段之间做图像块合并。",
}

# (variant name, task) -> the summary of a registration whose English differs from the name's first registration's.
TASK_SUMMARIES: dict[tuple[str, str], str] = {
    ("classic", "lm"): "论文原版的解码器，去掉交叉注意力：因果自注意力、Post-LN、正余弦位置编码、ReLU、"
                       "输入与输出共享嵌入。",
}

# variant name -> change name -> (classic choice, the variant's choice, the flaw it addresses).
CHANGES: dict[str, dict[str, tuple[str, str, str]]] = {
    "classic": {},
    "pre-ln": {"norm": _PRE_LN_CHANGE},
    "learned-pos": {"position": _LEARNED_POS},
    "rope": {"position": _ROPE},
    "alibi": {"position": _ALIBI},
    "vit": _VIT,
    "deit": {
        **_VIT,
        "head": ("从一个位置（[CLS]）读出一个输出，接一个线性分类器",
                 "在 [CLS] 旁再加一个可学习的 token（蒸馏 token），有自己的线性输出头；测试时把两个输出头的 softmax "
                 "输出取平均（后期融合）",
                 "单个 [CLS] 输出头必须同时服务于标签和教师；单独的 token 让教师的信号通过注意力到达每一层，"
                 "又不与标签争抢（§4）"),
        "objective": ("对真实标签的交叉熵",
                      "硬蒸馏（论文中更好的选择）：½·CE(类别输出头, 标签) + ½·CE(蒸馏输出头, 教师的 arg-max 预测)；"
                      "本身没有参数和 FLOPs",
                      "没有卷积的局部性先验，ViT 在小数据上会过拟合；CNN 教师把这一先验以预测的形式"
                      "（在同样增强过的图像上）传递过来，这是标签本身给不了的"),
    },
    "t5-bias": {"position": (_ABSOLUTE,
                             "按头和 j - i 的距离桶学习一个偏置（32 个桶，往前 15 以内精确，对数间隔到 128，"
                             "再远的归入一个桶），加到每个自注意力分数上，所有层共享",
                             f"{_DISTANCE_FLAW}，而固定的曲线无法学会哪些距离重要")},
    "nope": {"position": (_ABSOLUTE, "什么都不加：token 只看得到自己的前缀，这足以推断顺序",
                          "显式的位置方案把模型绑定在训练时见过的位置上，超出后外推很差")},
    "gelu": {"ffn": _GELU_CHANGE},
    "linear": {"attention": _LINEAR},
    "missformer": {**_MISSFORMER, "embedding": _missformer_embedding("7×7")},
    "missformer3d": {**_MISSFORMER, "embedding": _missformer_embedding("7×7×7")},
    "moe": {"ffn": _MOE},
    "swinunetr3d": _SWINUNETR,
    "unetr": {
        "embedding": (_VOCABULARY, "16×16×16 体素的图像块，经带步长的 3D 卷积投影，再加一张可学习的位置表",
                      _NOT_SYMBOLS),
        "position": (_SINUSOIDS, "每个图像块位置一个向量的可学习位置表（由 MONAI 的图像块嵌入模块持有，因此计入嵌入）",
                     "拟合数据的位置表可能学到解剖结构的布局"),
        "norm": (_POST_LN, f"{_PRE_LN}，末尾一个层归一化", _POST_LN_FLAW),
        "stacking": (_ISOTROPIC,
                     "保留各向同性的 12 层 ViT，另加一个 CNN 解码器，取它的第 3、6、9、12 层并上采样到体积的 1/8、"
                     "1/4 和 1/2",
                     "单独的 ViT 只看到 16 体素的图像块：对密集标注来说太粗了"),
    },
    "dynunet": {"attention": (_SOFTMAX, "不用注意力：3D 卷积，每个体素看到它的邻居", _CNN_BASELINE),
                "stacking": (_ISOTROPIC, _UNET, _DENSE)},
    "swinunetr-v2": {
        **_SWINUNETR,
        "stagewise convolutions": ("每个 Swin 阶段的块直接作用于合并后的图像块",
                                   "每个 Swin 阶段之前加一个残差卷积块（3×3×3 卷积，实例归一化）",
                                   "窗口注意力只在（移位的）窗口内混合体素；每个阶段加一个卷积，补上论文发现对小规模"
                                   "医学数据集有帮助的局部归纳偏置"),
    },
    "resenc": {
        "attention": (_SOFTMAX, "不用注意力：残差块中的 3D 卷积", _CNN_BASELINE),
        "stacking": (_ISOTROPIC,
                     "nnU-Net 的规划（阶段、卷积核、步长、宽度翻倍到 320），残差编码器每个阶段用 ResEnc M 的 "
                     "(1, 3, 4, 6, 6, 6, ...) 个基本块，U-Net 解码器每个阶段一个卷积",
                     f"{_DENSE}；nnU-Net Revisited 发现，更深的残差编码器能胜过已发表的 Transformer 模型"),
    },
    "segresnet": {
        "attention": (_SOFTMAX, "不用注意力：预激活残差块中的 3D 卷积", _CNN_BASELINE),
        "stacking": (_ISOTROPIC,
                     "残差 CNN 编码器每个阶段减半，轻量解码器每个阶段一个块（MONAI 的 SegResNetDS，"
                     "不含论文的变分自编码器分支），深度监督时每个解码器阶段都有一个输出头",
                     _DENSE),
    },
    "mednext": {
        "attention": (_SOFTMAX, "不用注意力：深度可分离的 k×k×k 卷积（ConvNeXt 块）", _CNN_BASELINE),
        "ffn": ("逐位置的前馈网络：Linear 到 4·d、ReLU、Linear 回来，逐 token 计算",
                "每个 ConvNeXt 块中的 1×1×1 卷积：扩展 2 到 8 倍（按规模和阶段）、GELU、再压缩（在 MedNeXt 的块内部，"
                "因此计入堆叠结构）",
                "保留了 Transformer 的通道混合，放进一个靠宽度和深度而不是注意力来扩展的 CNN"),
        "stacking": (_ISOTROPIC, "由 ConvNeXt 块组成的 U-Net，带残差的 ConvNeXt 下采样和上采样块，共减半四次", _DENSE),
    },
    "rmsnorm": {"norm": _RMSNORM},
    "geglu": {"ffn": _glu("GeGLU", "GELU")},
    "reglu": {"ffn": _glu("ReGLU", "ReLU")},
    "swin": {
        "attention": ("对所有 token 做全局 softmax 注意力",
                      "在 W×W 窗口内做 softmax 注意力，每隔一个块移位 ⌊W/2⌋（W-MSA / SW-MSA）："
                      "代价随 token 数线性而非平方增长",
                      "代价随 token 数呈平方增长，在密集视觉任务的 token 数下难以承受"),
        "position": ("绝对的正余弦位置编码在开头加到嵌入上一次",
                     "窗口内每个相对偏移一个可学习的偏置，在每个块中加到分数上",
                     "绝对位置不具备平移不变性；图像中重要的是相对布局"),
        "stacking": ("单一分辨率和宽度上的各向同性堆叠，标签由编码器–解码器读出",
                     "分阶段的层级结构，分辨率为图像的 1/P、1/2P、1/4P、…（Swin-T：4 个阶段，1/4 … 1/32），"
                     "阶段之间做图像块合并，最后全局平均池化",
                     "单一尺度：没有供密集预测使用的多尺度特征图，而且每一层都要付出全分辨率的代价"),
        "embedding": (_VOCABULARY, "每个 P×P 图像块线性投影，再接层归一化",
                      "由图像块符号组成的离散词表丢掉了像素的细节"),
        "norm": (_POST_LN, f"{_PRE_LN}，末尾一个 LN", f"{_POST_LN_FLAW}，因此深层堆叠需要谨慎的预热"),
        "ffn": ("ReLU", "GELU", "ReLU 的硬零点丢掉了负输入及其梯度"),
    },
}

# The travelling changes no registered variant declares (zoo.changes.STATIC), by catalogue name; the others take
# the text of the registration that declares them (:func:`travelling_text`).
TRAVELLING: dict[str, tuple[str, str, str]] = {
    "swiglu": _glu("SwiGLU", "Swish"),
    "no-embedding-scale": ("token 嵌入乘以 √d_model（§3.4）", "token 嵌入保持原样（GPT-2）",
                           "这个缩放只是为了让嵌入与固定的正余弦位置编码相平衡，还会放大嵌入的梯度"),
    "untied-output": ("softmax 之前的投影就是目标语言嵌入的矩阵（§3.4）", "softmax 之前用一个独立的投影",
                      "同一个矩阵必须既充当每个 token 的输入表示，又充当它的输出表示"),
    "unshared-embeddings": ("源语言和目标语言共用一张嵌入表", "每种语言一张表", "共用的表强迫两种语言使用同一个词表"),
}


_STAGE_WIDTH = "第 i 阶段的{}宽 {}"
# variant name -> change name -> part -> how the change reaches that part (Change.resizes and Change.also_in).
REACH: dict[str, dict[str, dict[str, str]]] = {
    "vit": {"stacking": {"position": "可学习的位置表多一行，留给 [CLS] token"}},
    "deit": {"stacking": {"position": "可学习的位置表多一行，留给 [CLS] token"},
             "head": {"position": "可学习的位置表多一行，留给蒸馏 token"}},
    "swin": {
        "attention": {"position": "相对位置表覆盖窗口内的 (2W−1)² 种偏移，而不是整张特征图的偏移"},
        "stacking": {"attention": _STAGE_WIDTH.format("投影", "2^(i−1)·D"),
                     "ffn": _STAGE_WIDTH.format("前馈网络", "2^(i−1)·D") + "，隐藏层是它的 4×",
                     "norm": _STAGE_WIDTH.format("归一化", "2^(i−1)·D"),
                     "position": "第 i 阶段的相对位置表为该阶段的每个头各存一个偏置",
                     "head": "分类器读取最后一个阶段，宽 2^(S−1)·D"},
    },
    **{name: {"attention": {"stacking": "上下文桥和解码器中的注意力（属于堆叠结构部分的模块）也缩减其键和值"},
              "ffn": {"stacking": "上下文桥和解码器各块中的前馈网络（属于堆叠结构部分的模块）也是 ReMix-FFN"},
              "hierarchy": {"attention": _STAGE_WIDTH.format("投影", "widths[i]") + "，并有自己的键/值缩减",
                            "ffn": _STAGE_WIDTH.format("前馈网络", "widths[i]"),
                            "norm": _STAGE_WIDTH.format("归一化", "widths[i]")}}
       for name in ("missformer", "missformer3d")},
}

_NO_SWITCH = "MONAI 的网络没有对应的开关"
_NNUNET_NO_SWITCH = "nnU-Net 的网络（dynamic-network-architectures）没有对应的开关"
_GLOBAL_WINDOW = ("让窗口覆盖每个阶段的整张特征图就等于全局注意力，但 MONAI 会为此构建一个 N² 项的相对位置索引"
                  "（64×96×96 时达 43 GB）")
# variant name -> change name -> why it cannot be reverted (Change.no_revert).
NO_REVERT: dict[str, dict[str, str]] = {
    "missformer3d": {"embedding": "图像块和词表两种 token 化器都只有 2D 版本"},
    "swinunetr3d": {"attention": _GLOBAL_WINDOW, "embedding": _NO_SWITCH, "stacking": _NO_SWITCH},
    "swinunetr-v2": {"attention": _GLOBAL_WINDOW, "embedding": _NO_SWITCH, "stacking": _NO_SWITCH},
    "unetr": {"embedding": _NO_SWITCH, "position": "MONAI 的 UNETR 构建的 ViT 只支持可学习的位置", "norm": _NO_SWITCH,
              "stacking": _NO_SWITCH},
    "dynunet": {"attention": _NO_SWITCH, "stacking": _NO_SWITCH},
    "resenc": {"attention": _NNUNET_NO_SWITCH, "stacking": _NNUNET_NO_SWITCH},
    "segresnet": {"attention": _NO_SWITCH, "stacking": _NO_SWITCH},
    "mednext": {"attention": _NO_SWITCH, "ffn": _NO_SWITCH, "stacking": _NO_SWITCH},
}


# Why a travelling change cannot apply to a model (zoo.changes: TravellingChange.why_not; ``zoo changes``' model
# columns, a study's "Not applied"). These reasons have no names of their own, so they are keyed by their English;
# stale() lists an entry no catalogue entry gives any more, and untranslated() a reason without one.
WHY_NOT: dict[str, str] = {
    "Swin's blocks build the two-matrix core PositionwiseFFN directly, which has no third matrix for a gate":
        "Swin 的块直接构建两矩阵的核心 PositionwiseFFN，没有给门控用的第三个矩阵",
    "Swin's blocks build the two-matrix core PositionwiseFFN directly (no ffn field), so no other FFN type can be "
    "swapped in": "Swin 的块直接构建两矩阵的核心 PositionwiseFFN（没有 ffn 字段），换不进其他前馈网络类型",
    "its tokens are linear projections of patches, not rows of an embedding table, and it has no √d_model scale to "
    "remove": "它的 token 是图像块的线性投影，而不是嵌入表中的行，也没有可以去掉的 √d_model 缩放",
    "an image classifier has no output vocabulary: its head maps to classes, and its tokens are projected patches, "
    "not rows of an embedding table it could share":
        "图像分类器没有输出词表：它的输出头映射到类别，它的 token 是投影后的图像块，而不是一张可以共享的嵌入表中的行",
    "a decoder-only model has one vocabulary and one embedding table: there is no second one to share":
        "只有解码器的模型只有一个词表和一张嵌入表：没有第二张可以共享",
    "Swin's positions are its relative bias table inside each window, or sinusoids (SwinConfig.position: relative, "
    "sinusoidal); the core's 1-D schemes are not wired into its window attention":
        "Swin 的位置信息是每个窗口内的相对偏置表，或正余弦位置编码（SwinConfig.position: relative, sinusoidal）；"
        "核心的 1-D 方案没有接入它的窗口注意力",
    "ViT adds absolute positions over the patch grid and [CLS] (ViTConfig.position: learned or sinusoidal); the "
    "core's relative schemes and 'none' are 1-D distances along a sequence, which its encoder does not wire in for a "
    "2-D grid": "ViT 在图像块网格和 [CLS] 上加绝对位置（ViTConfig.position: learned 或 sinusoidal）；核心的相对方案和 "
                "'none' 是沿序列的 1-D 距离，它的编码器没有为 2-D 网格接入它们",
    "Swin's window attention hands each window to a softmax kernel with the relative position bias added to the "
    "scores; a kernel without scores cannot take that bias":
        "Swin 的窗口注意力把每个窗口交给一个 softmax 核，并把相对位置偏置加到分数上；不计算分数的核接收不了这个偏置",
    "Swin's blocks and patch merging build their LayerNorms themselves (timm's layout), with no choice of norm":
        "Swin 的块和图像块合并自己构建层归一化（timm 的布局），无法选择归一化方式",
}


def _registration(variant: str | Variant, task: str | None) -> Variant:
    """``variant`` itself when it is a registration, else the registration of that name for ``task``."""
    from zoo.registry import Variant, get_variant

    if isinstance(variant, Variant):
        return variant
    return get_variant(variant, task)


def scope_text(scope: str, lang: str) -> str:
    """The scope word (``"general"`` or ``"task-specific"``) in ``lang``."""
    if scope not in SCOPES:
        raise unknown_name("scope", scope, SCOPES)
    return SCOPES[scope] if check_lang(lang) == "zh" else scope


def part_text(part: str, lang: str) -> str:
    """A part's name (:data:`core.parts.PARTS`) in ``lang``."""
    if part not in PARTS:
        raise unknown_name("part", part, PARTS)
    return PARTS[part] if check_lang(lang) == "zh" else part


def variant_text(variant: str | Variant, lang: str, task: str | None = None) -> str:
    """The summary of ``variant`` (a registered name, or a registration) in ``lang``.

    ``task`` picks the registration of a name registered for several tasks (default: its first), as
    :func:`zoo.registry.get_variant` does; a :class:`zoo.registry.Variant` is its own registration.
    """
    registration = _registration(variant, task)
    if check_lang(lang) == "en":
        return registration.summary
    for own_task in registration.tasks:
        if (registration.name, own_task) in TASK_SUMMARIES:
            return TASK_SUMMARIES[(registration.name, own_task)]
    if registration.name not in SUMMARIES:
        raise KeyError(f"variant {registration.name!r} has no Chinese summary; add one to "
                       "tasks/i18n/variants_zh.py SUMMARIES")
    return SUMMARIES[registration.name]


def change_text(variant: str | Variant, change: str, lang: str, task: str | None = None) -> tuple[str, str, str]:
    """(classic choice, the variant's choice, the flaw) of the declared change named ``change`` in ``lang``.

    ``variant`` and ``task`` as :func:`variant_text`; an unknown change name gets a "did you mean" error.
    """
    registration = _registration(variant, task)
    declared = registration.change(change)  # the name's "did you mean" error when it is not declared
    if check_lang(lang) == "en":
        return declared.classic, declared.variant, declared.flaw
    own = CHANGES.get(registration.name, {})
    if change not in own:
        raise KeyError(f"change {change!r} of variant {registration.name!r} has no Chinese text; add it to "
                       "tasks/i18n/variants_zh.py CHANGES")
    return own[change]


def reach_text(variant: str | Variant, change: str, part: str, lang: str, task: str | None = None) -> str:
    """How the declared change ``change`` reaches another ``part`` (its ``resizes`` or ``also_in``) in ``lang``."""
    registration = _registration(variant, task)
    declared = registration.change(change)
    reach = {**declared.resizes, **declared.also_in}
    if part not in reach:
        raise unknown_name(f"part that change {change!r} reaches", part, reach)
    if check_lang(lang) == "en":
        return reach[part]
    own = REACH.get(registration.name, {}).get(change, {})
    if part not in own:
        raise KeyError(f"change {change!r} of variant {registration.name!r} has no Chinese text for how it reaches "
                       f"{part!r}; add it to tasks/i18n/variants_zh.py REACH")
    return own[part]


def no_revert_text(variant: str | Variant, change: str, lang: str, task: str | None = None) -> str:
    """Why the declared change ``change`` cannot be reverted (its ``no_revert``) in ``lang``; "" when it can."""
    registration = _registration(variant, task)
    declared = registration.change(change)
    if check_lang(lang) == "en" or not declared.no_revert:
        return declared.no_revert
    why = NO_REVERT.get(registration.name, {}).get(change)
    if why is None:
        raise KeyError(f"change {change!r} of variant {registration.name!r} has no Chinese text for why it cannot be "
                       "reverted; add it to tasks/i18n/variants_zh.py NO_REVERT")
    return why


def change_markdown(variant: str | Variant, change: str, lang: str, heading: str = "#", task: str | None = None
                    ) -> str:
    """One declared change as a Markdown section in ``lang``: the text ``zoo diff`` shows
    (:func:`zoo.registry.change_markdown`, which "en" returns as it is), line for line, so that a report can swap
    each English line for its Chinese one."""
    from zoo.registry import change_markdown as english

    registration = _registration(variant, task)
    declared = registration.change(change)
    if check_lang(lang) == "en":
        return english(declared, heading)
    classic, new, flaw = change_text(registration, change, lang)
    title = declared.part if declared.name == declared.part else f"{declared.part}: {declared.name}"
    lines = [f"{heading}# {title}（{scope_text(declared.scope, lang)}）", "",
             f"经典做法：{classic}；本变体：{new}。原因：{flaw}。", ""]

    def how(parts: dict[str, str]) -> str:
        return "；".join(f"{part}（{reach_text(registration, change, part, lang)}）" for part in parts)

    if declared.resizes:
        lines += [f"它还决定了这些部分的尺寸：{how(declared.resizes)}。这些尺寸由它而来、随它一起还原，"
                  "所以不算独立的改动：它们作为这个改动的行来测量，其他改动则在这些尺寸下测量。", ""]
    if declared.also_in:
        lines += [f"同一改动也出现在其他部分：{how(declared.also_in)}。", ""]
    if declared.no_revert:
        lines += [f"无法还原，因此下面既不测量也不做消融：{no_revert_text(registration, change, lang)}。", ""]
    return "\n".join(lines)


def _same_story(a: Change, b: Change) -> bool:
    return (a.part, a.classic, a.variant, a.flaw) == (b.part, b.classic, b.variant, b.flaw)


def travelling_text(entry: str | TravellingChange, lang: str) -> tuple[str, str, str]:
    """(classic choice, new choice, flaw) of a travelling change (``zoo changes``; a catalogue name or entry) in
    ``lang``: its own text for a change no variant declares, else that of the first registration declaring it."""
    from zoo.changes import TravellingChange, get_change

    found = entry if isinstance(entry, TravellingChange) else get_change(entry)
    story = found.change
    if check_lang(lang) == "en":
        return story.classic, story.variant, story.flaw
    if found.name in TRAVELLING:
        return TRAVELLING[found.name]
    for name, task in found.registered:
        registration = _registration(name, task)
        for declared in registration.changes:
            if _same_story(declared, story):
                return change_text(registration, declared.name, lang)
    raise KeyError(f"travelling change {found.name!r} has no Chinese text: no registration declares its story and "
                   "tasks/i18n/variants_zh.py TRAVELLING has no entry for it")


def _reasons() -> set[str]:
    """Every reason the catalogue's travelling changes give for a model of zoo.changes.MODELS they cannot apply to."""
    from zoo.changes import MODELS, catalogue
    from zoo.registry import get_variant

    classes = [get_variant(*where).config_class for where in MODELS.values()]
    return {reason for entry in catalogue().values() for cls in classes if (reason := entry.why_not(cls))}


def why_not_text(reason: str, lang: str) -> str:
    """Why a travelling change cannot apply to a model (:meth:`zoo.changes.TravellingChange.why_not`) in ``lang``."""
    if check_lang(lang) == "en":
        return reason
    if reason not in WHY_NOT:
        raise KeyError(f"no Chinese text for the reason {reason!r}; add it to tasks/i18n/variants_zh.py WHY_NOT")
    return WHY_NOT[reason]


def untranslated() -> list[str]:
    """What has no Chinese text yet: each registered variant without a summary, each declared change without its story
    (or how it reaches other parts, or why it is not reverted), each travelling change without one, and each reason
    a travelling change gives for a model it cannot apply to (``"variant (tasks)"``, ``"variant: change"``,
    ``"travelling change: name"``, ``"why not: reason"``)."""
    from zoo.changes import catalogue
    from zoo.registry import list_variants, registrations

    missing = []
    for name in list_variants():
        for registration in registrations(name):
            first = registrations(name)[0]
            own = any((name, task) in TASK_SUMMARIES for task in registration.tasks)
            if (registration.summary != first.summary and not own) or name not in SUMMARIES:
                missing.append(f"{name} ({', '.join(registration.tasks)})")
            changes = {c.name: c for c in first.changes}
            for change in registration.changes:
                if change.name not in CHANGES.get(name, {}):
                    missing.append(f"{name}: {change.name}")
                    continue
                try:
                    change_markdown(registration, change.name, "zh")
                except KeyError:
                    missing.append(f"{name}: {change.name} (how it reaches other parts, or why it is not reverted)")
                if not _same_story(change, changes.get(change.name, change)):
                    missing.append(f"{name}: {change.name} ({', '.join(registration.tasks)}: another story than "
                                   f"the {', '.join(first.tasks)} registration's, which one translation cannot cover)")
    for entry in catalogue().values():
        try:
            travelling_text(entry, "zh")
        except KeyError:
            missing.append(f"travelling change: {entry.name}")
    missing += [f"why not: {reason}" for reason in sorted(_reasons() - set(WHY_NOT))]
    return list(dict.fromkeys(missing))


def stale() -> list[str]:
    """The entries whose name no longer exists: a variant, a (variant, task) registration, a change of a variant,
    a travelling change that a registration now declares (its text comes from there) or that is gone."""
    from zoo.changes import catalogue
    from zoo.registry import list_variants, registrations

    names = set(list_variants())
    found = [f"SUMMARIES[{n!r}]" for n in SUMMARIES if n not in names]
    found += [f"CHANGES[{n!r}]" for n in CHANGES if n not in names]
    for (name, task), _ in TASK_SUMMARIES.items():
        if name not in names or not any(task in r.tasks for r in registrations(name)):
            found.append(f"TASK_SUMMARIES[{(name, task)!r}]")
    for name, changes in CHANGES.items():
        declared = {c.name for r in registrations(name) for c in r.changes} if name in names else set()
        found += [f"CHANGES[{name!r}][{c!r}]" for c in changes if name in names and c not in declared]
    for table, label in ((REACH, "REACH"), (NO_REVERT, "NO_REVERT")):
        for name, changes in table.items():
            declared = {c.name: c for r in registrations(name) for c in r.changes} if name in names else {}
            for change, text in changes.items():
                own = declared.get(change)
                if own is None:
                    found.append(f"{label}[{name!r}][{change!r}]")
                elif label == "REACH":
                    found += [f"REACH[{name!r}][{change!r}][{p!r}]" for p in text if p not in own.parts[1:]]
                elif not own.no_revert:
                    found.append(f"NO_REVERT[{name!r}][{change!r}]")
    entries = catalogue()
    found += [f"TRAVELLING[{n!r}]" for n in TRAVELLING if n not in entries or entries[n].registered]
    found += [f"WHY_NOT[{reason!r}]" for reason in WHY_NOT if reason not in _reasons()]
    return found
