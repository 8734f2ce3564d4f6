"""The image-classification task ("cifar"): Fashion-MNIST subset shipped in the repo, CIFAR-10/100 as real data."""
