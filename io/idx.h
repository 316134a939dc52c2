// Reading the IDX format of MNIST and Fashion-MNIST (http://yann.lecun.com/exdb/mnist/), plain or
// gzip-compressed, and a loader for the Fashion-MNIST data set as the Debian package
// `dataset-fashion-mnist` installs it. An IDX file is two zero bytes, an element-type byte, a
// dimension count, the dimensions as big-endian uint32, then the big-endian elements.
#pragma once
#include <string>

#include "engine/tensor.h"

namespace keras::io {

// Reads an IDX file into a CPU tensor: element type 0x08 gives uint8, 0x0C int32, 0x0D float32
// and 0x0E float64. gzip compression is detected from the content, not the file name.
// Throws FileNotFoundError for a missing file and FileFormatError, naming the file, for a bad
// magic number, an unsupported element type, a dimension count outside [1, 8], truncated data,
// trailing bytes or a corrupt gzip stream.
Tensor read_idx(const std::string& path);

// Fashion-MNIST: 60000 training and 10000 test images of 28x28 uint8 pixels, with int64 class
// labels in [0, 10).
struct FashionMnist {
  Tensor x_train;  // uint8, (60000, 28, 28)
  Tensor y_train;  // int64, (60000,)
  Tensor x_test;   // uint8, (10000, 28, 28)
  Tensor y_test;   // int64, (10000,)
};

// Reads train-images-idx3-ubyte.gz, train-labels-idx1-ubyte.gz, t10k-images-idx3-ubyte.gz and
// t10k-labels-idx1-ubyte.gz from `directory`. Throws FileNotFoundError, saying how to install the
// data, when the directory or a file is missing, and FileFormatError when images and labels do
// not match.
FashionMnist load_fashion_mnist(const std::string& directory = "/usr/share/datasets/fashion-mnist");
// uint8 images (N, H, W) -> float32 features (N, H*W) in [0, 1], as the examples train on them.
Tensor image_features(const Tensor& images);

}  // namespace keras::io
