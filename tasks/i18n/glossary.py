"""The package's Chinese terms: one Chinese word for each concept, and the other translations it never uses.

A reader who meets 掩码 in a lesson and 遮罩 on a variant page wonders whether they are two things; the glossary
fixes the one term (the one Chinese textbooks and the article use) and lists the near-synonyms that must not
appear, so :func:`check_terms` can scan any Chinese text for them. The site, the lessons, the notebooks and the
variant pages all run their Chinese text through it in their tests.

Terms the package keeps in English in Chinese text too (token, softmax, Pre-LN, dropout) are entries as well: their
Chinese renderings are the ones to avoid.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Term:
    """One concept's Chinese term.

    Args:
        zh: the one form this package writes.
        avoid: other translations of the same concept that the package must never write (each specific enough not
            to occur inside ordinary sentences: 遮罩 for mask, not 屏蔽).
    """

    zh: str
    avoid: tuple[str, ...] = ()


GLOSSARY: dict[str, Term] = {
    # attention (§2)
    "attention": Term("注意力", ("注意机制", "关注机制")),
    "self-attention": Term("自注意力", ("自我注意力", "自注意机制", "自关注")),
    "multi-head attention": Term("多头注意力", ("多头关注", "多首注意力")),
    "cross-attention": Term("交叉注意力", ("互注意力", "跨注意力", "交互注意力")),
    "scaled dot-product attention": Term("缩放点积注意力", ("比例点积注意力", "尺度化点积")),
    "dot product": Term("点积", ("点乘积", "数量积")),
    "query": Term("查询", ("询问向量", "问询")),
    "key": Term("键", ("钥匙", "键码")),
    "value": Term("值", ("价值向量",)),
    "softmax": Term("softmax", ("软最大值", "柔性最大值", "软最大化")),
    "mask": Term("掩码", ("遮罩", "屏蔽码", "遮掩码", "遮盖码")),
    "causal mask": Term("因果掩码", ("因果屏蔽", "因果遮盖")),
    "token": Term("token", ("词元", "令牌", "标记符")),
    "window attention": Term("窗口注意力", ("视窗注意力", "窗注意力")),
    "shifted window": Term("移位窗口", ("偏移窗口", "移动窗口")),
    "linear attention": Term("线性注意力", ("线性关注",)),
    # positions (§3)
    "positional encoding": Term("位置编码", ("位置嵌入编码", "定位编码", "位置编译")),
    "sinusoidal": Term("正余弦", ("三角函数式", "正弦余弦式")),
    "relative position bias": Term("相对位置偏置", ("相对位置偏差", "相对位置偏移量")),
    "extrapolation": Term("外推", ("外插",)),
    "embedding": Term("嵌入", ("埋入", "嵌进")),
    # the layer (§4)
    "encoder": Term("编码器", ("编码机", "编码部件")),
    "decoder": Term("解码器", ("译码器", "解码机")),
    "residual": Term("残差", ("剩余连接", "残留连接", "残余连接")),
    "skip connection": Term("跳跃连接", ("跳过连接", "跨越连接")),
    "LayerNorm": Term("层归一化", ("层标准化", "层规范化", "层正则化", "层次归一化")),
    "normalization": Term("归一化", ("规范化", "正规化")),
    "feed-forward network": Term("前馈网络", ("前向网络", "前向反馈网络", "前馈神经层")),
    "teacher forcing": Term("教师强制", ("老师强制", "导师驱动", "教师驱动")),
    "greedy decoding": Term("贪心解码", ("贪婪解码",)),
    "beam search": Term("束搜索", ("集束搜索", "波束搜索")),
    "weight tying": Term("权重共享", ("权值绑定", "权重绑定", "权重捆绑")),
    "initialisation": Term("初始化", ("初始设定", "起始化")),
    "saturation": Term("饱和", ("过饱",)),
    "gradient": Term("梯度", ("坡度",)),
    "vanishing gradient": Term("梯度消失", ("梯度弥散",)),
    # variants (§6)
    "variant": Term("变体", ("变种",)),
    "image patch": Term("图像块", ("图像补丁", "图片块", "斑块")),  # a code patch is 补丁: only the image one differs
    "distillation": Term("蒸馏", ("萃取",)),
    "expert routing": Term("专家路由", ("专家路径选择", "专家派发")),
    "mixture of experts": Term("混合专家", ("专家混合", "多专家混合")),
    "router": Term("路由器", ("路由网络", "分派器")),
    "segmentation": Term("分割", ("切割",)),
    "receptive field": Term("感受野", ("接受域", "感知野")),
    # training (§5, §7)
    "learning rate": Term("学习率", ("学习速率", "学习速度")),
    "warm-up": Term("预热", ("热身",)),
    "loss": Term("损失", ("损耗",)),
    "perplexity": Term("困惑度", ("混乱度", "迷惑度")),
    "temperature": Term("温度", ("热度",)),
    "hyperparameter": Term("超参数", ("超级参数",)),
    "overfitting": Term("过拟合", ("过度拟合",)),
    "label smoothing": Term("标签平滑", ("标签光滑",)),
    "ablation": Term("消融", ("切除实验",)),
    "inference": Term("推理", ("推论阶段",)),
    "dropout": Term("dropout", ("丢弃法", "随机失活")),
}


def check_terms(text: str) -> list[str]:
    """Each avoided translation of :data:`GLOSSARY` that occurs in ``text``, in glossary order (empty: the text
    uses the package's terms). A form found once is listed once, even when several concepts avoid it."""
    found: list[str] = []
    for term in GLOSSARY.values():
        found += [form for form in term.avoid if form in text and form not in found]
    return found
