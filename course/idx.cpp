// The IDX format (MNIST, Fashion-MNIST): a big-endian header — magic number, then one 32-bit size
// per dimension — followed by the raw uint8 values. Each file is read whole, straight into the
// tensor that keeps it: 60000 images are 47 MB, a fraction of a second even when gzipped.
#include "course/idx.h"

#include <sys/stat.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>

#include "ddp/error.h"

namespace ddpw {

using namespace ddp;  // the library this scaffolding is built on
namespace {

constexpr uint32_t kImagesMagic = 2051;  // 0x00000803: unsigned bytes, 3 dimensions
constexpr uint32_t kLabelsMagic = 2049;  // 0x00000801: unsigned bytes, 1 dimension
constexpr int64_t kSide = 28;
constexpr int64_t kClasses = 10;

// Compute nodes have no internet, so the hint says where the files come from, not just where they go.
const char* const kWhereToGetIt =
    "Fashion-MNIST: `apt-get install dataset-fashion-mnist` installs it in "
    "/usr/share/datasets/fashion-mnist; MNIST: put train-images-idx3-ubyte, train-labels-idx1-ubyte, "
    "t10k-images-idx3-ubyte and t10k-labels-idx1-ubyte (each may be .gz) in the folder given by "
    "--data-dir. Nothing is downloaded at run time and compute nodes have no internet: fetch them once on a "
    "login node, e.g. python3 -c \"from torchvision.datasets import MNIST; MNIST('data', download=True)\", "
    "then use --data-dir data/MNIST/raw or copy its four files where --data-dir points";

// POSIX stat, not std::filesystem: the torch wheels export their own, older copy of
// std::filesystem (pytorch/pytorch#133437), and parts of it crash when called from our code.
int64_t regular_file_size(const std::string& path) {
  struct stat info {};
  if (::stat(path.c_str(), &info) != 0 || !S_ISREG(info.st_mode)) return -1;
  return static_cast<int64_t>(info.st_size);
}

// Plain file first (faster, and what torch's own MNIST reader uses), else the .gz.
std::string find_file(const std::string& dir, const std::string& name) {
  const std::string plain = dir + "/" + name;
  const std::string gz = plain + ".gz";
  if (regular_file_size(plain) >= 0) return plain;
  if (regular_file_size(gz) >= 0) return gz;
  struct stat info {};
  if (::stat(dir.c_str(), &info) != 0 || !S_ISDIR(info.st_mode))
    throw Error("data folder " + dir + " does not exist (looking for " + name + ")", kWhereToGetIt);
  throw Error(plain + " not found (nor " + name + ".gz)", kWhereToGetIt);
}

// gzread also reads uncompressed files (transparently), so one reader serves both.
class IdxReader {
 public:
  explicit IdxReader(std::string path) : path_(std::move(path)), file_(gzopen(path_.c_str(), "rb")) {
    if (file_ == nullptr)
      throw Error(path_ + ": cannot open (" + std::strerror(errno) + ")", "check the file's permissions");
    gzbuffer(file_, 1 << 20);
  }
  ~IdxReader() { gzclose(file_); }
  IdxReader(const IdxReader&) = delete;
  IdxReader& operator=(const IdxReader&) = delete;

  const std::string& path() const { return path_; }

  // Reads exactly `bytes` bytes; `what` names them in the error when the file ends early.
  void read_exact(void* out, int64_t bytes, const std::string& what) {
    auto* dst = static_cast<unsigned char*>(out);
    int64_t done = 0;
    while (done < bytes) {
      const auto chunk = static_cast<unsigned>(std::min<int64_t>(bytes - done, 1 << 30));
      const int got = gzread(file_, dst + done, chunk);
      if (got < 0) {
        int code = 0;
        const char* message = gzerror(file_, &code);
        throw Error(path_ + ": read error while reading " + what + ": " + message,
                    "the file is damaged; replace it. " + std::string(kWhereToGetIt));
      }
      if (got == 0) break;
      done += got;
    }
    if (done < bytes)
      throw Error(path_ + ": truncated: expected " + what + ", the data stops after " + std::to_string(done) + " of " +
                      std::to_string(bytes) + " bytes",
                  "the file is incomplete; replace it. " + std::string(kWhereToGetIt));
  }

  // For an uncompressed file the size is known before reading: a header that promises more data
  // than the file holds is reported here, before allocating for it.
  void expect_available(int64_t header_bytes, int64_t data_bytes, const std::string& what) {
    if (!gzdirect(file_)) return;  // gzipped: the size shows while reading
    const int64_t size = regular_file_size(path_);
    if (size >= 0 && size < header_bytes + data_bytes)
      throw Error(path_ + ": truncated: expected " + what + " (" + std::to_string(header_bytes + data_bytes) +
                      " bytes in all), the file has " + std::to_string(size),
                  "the file is incomplete; replace it. " + std::string(kWhereToGetIt));
  }

  uint32_t read_u32(const std::string& what) {
    unsigned char b[4];
    read_exact(b, 4, what);
    return (uint32_t{b[0]} << 24) | (uint32_t{b[1]} << 16) | (uint32_t{b[2]} << 8) | uint32_t{b[3]};
  }

  void expect_magic(uint32_t expected, const std::string& kind) {
    const uint32_t magic = read_u32("the magic number");
    if (magic == expected) return;
    std::string found = std::to_string(magic);
    if (magic == kImagesMagic) found += " (an images file)";
    if (magic == kLabelsMagic) found += " (a labels file)";
    throw Error(path_ + ": not an IDX " + kind + " file: expected magic number " + std::to_string(expected) +
                    " (big-endian), found " + found,
                std::string("use the original MNIST-format files. ") + kWhereToGetIt);
  }

  // After the data: nothing else may follow (a wrong count in the header, or a foreign file).
  void expect_end() {
    unsigned char extra;
    if (gzread(file_, &extra, 1) == 1)
      throw Error(path_ + ": longer than its header says (extra bytes after the data)",
                  std::string("use the original MNIST-format files. ") + kWhereToGetIt);
  }

 private:
  std::string path_;
  gzFile file_;
};

// A damaged gzipped header can promise terabytes: say which file asked for them.
torch::Tensor allocate(const std::string& path, at::IntArrayRef shape) {
  try {
    return torch::empty(shape, torch::kUInt8);
  } catch (const c10::Error&) {
    throw Error(path + ": its header promises " + std::to_string(c10::multiply_integers(shape)) +
                    " bytes, more than this machine can hold",
                std::string("the file is damaged; replace it. ") + kWhereToGetIt);
  }
}

torch::Tensor read_images(const std::string& path) {
  IdxReader in(path);
  in.expect_magic(kImagesMagic, "images");
  const int64_t count = in.read_u32("the image count");
  const int64_t rows = in.read_u32("the row count");
  const int64_t cols = in.read_u32("the column count");
  if (rows != kSide || cols != kSide)
    throw Error(path + ": expected 28x28 images, found " + std::to_string(rows) + "x" + std::to_string(cols),
                std::string("use MNIST or Fashion-MNIST. ") + kWhereToGetIt);
  if (count == 0) throw Error(path + ": holds no images", kWhereToGetIt);
  const std::string what = std::to_string(count) + " images of 28x28 after the 16-byte header";
  in.expect_available(16, count * kSide * kSide, what);
  auto images = allocate(path, {count, 1, kSide, kSide});
  in.read_exact(images.data_ptr<uint8_t>(), images.numel(), what);
  in.expect_end();
  return images;
}

torch::Tensor read_labels(const std::string& path) {
  IdxReader in(path);
  in.expect_magic(kLabelsMagic, "labels");
  const int64_t count = in.read_u32("the label count");
  const std::string what = std::to_string(count) + " labels after the 8-byte header";
  in.expect_available(8, count, what);
  auto labels = allocate(path, {count});
  in.read_exact(labels.data_ptr<uint8_t>(), count, what);
  in.expect_end();
  if (count > 0) {
    const int64_t largest = labels.max().item<int64_t>();
    if (largest >= kClasses)
      throw Error(path + ": label " + std::to_string(largest) + " found, expected classes 0-9",
                  std::string("use MNIST or Fashion-MNIST. ") + kWhereToGetIt);
  }
  return labels.to(torch::kInt64);
}

}  // namespace

Dataset load_idx_dataset(const std::string& dir, Split split, double mean, double std) {
  const std::string prefix = split == Split::kTrain ? "train" : "t10k";
  const std::string images_path = find_file(dir, prefix + "-images-idx3-ubyte");
  const std::string labels_path = find_file(dir, prefix + "-labels-idx1-ubyte");
  Dataset data;
  data.inputs = read_images(images_path);
  data.targets = read_labels(labels_path);
  if (data.inputs.size(0) != data.targets.size(0))
    throw Error(images_path + " holds " + std::to_string(data.inputs.size(0)) + " images but " + labels_path +
                    " holds " + std::to_string(data.targets.size(0)) + " labels",
                std::string("the two files must come from the same set. ") + kWhereToGetIt);
  data.input_scale = 1.0 / 255.0;
  data.input_shift = mean;
  data.input_divide = std;
  return data;
}

}  // namespace ddpw
