"""ViT (Dosovitskiy et al. 2021) as a patch on the classic Transformer."""
