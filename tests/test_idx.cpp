// load_idx_dataset on small IDX files written here (plain and gzipped), on malformed ones (each
// error must name the file), and on the installed Fashion-MNIST when it is there.
#include <ftw.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <torch/torch.h>
#include <unistd.h>
#include <zlib.h>

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "course/idx.h"
#include "ddp/error.h"

namespace {

// POSIX calls instead of std::filesystem: the torch wheels export an older copy of parts of it
// (pytorch/pytorch#133437) whose remove_all crashes when called from a program linked to them.
void remove_tree(const std::string& dir) {
  ::nftw(
      dir.c_str(), [](const char* path, const struct stat*, int, struct FTW*) { return ::remove(path); }, 8,
      FTW_DEPTH | FTW_PHYS);
}

bool exists(const std::string& path) {
  struct stat info {};
  return ::stat(path.c_str(), &info) == 0;
}

using Bytes = std::vector<uint8_t>;

void put_u32(Bytes& out, uint32_t v) {
  for (int shift : {24, 16, 8, 0}) out.push_back(static_cast<uint8_t>(v >> shift));
}

// `count` images whose pixel p of image i is (i * 7 + p) % 256, with a header claiming `header_count`.
Bytes images_file(uint32_t count, uint32_t rows = 28, uint32_t cols = 28, uint32_t magic = 2051,
                  int64_t header_count = -1) {
  Bytes out;
  put_u32(out, magic);
  put_u32(out, header_count >= 0 ? static_cast<uint32_t>(header_count) : count);
  put_u32(out, rows);
  put_u32(out, cols);
  for (uint32_t i = 0; i < count; ++i)
    for (uint32_t p = 0; p < rows * cols; ++p) out.push_back(static_cast<uint8_t>((i * 7 + p) % 256));
  return out;
}

Bytes labels_file(const std::vector<uint8_t>& labels, uint32_t magic = 2049) {
  Bytes out;
  put_u32(out, magic);
  put_u32(out, static_cast<uint32_t>(labels.size()));
  out.insert(out.end(), labels.begin(), labels.end());
  return out;
}

class IdxTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* tmp = std::getenv("TMPDIR");
    std::string pattern = std::string(tmp != nullptr && *tmp != 0 ? tmp : "/tmp") + "/ddpw_idx_XXXXXX";
    ASSERT_NE(::mkdtemp(pattern.data()), nullptr) << "cannot create a temporary folder";
    dir_ = pattern;
  }
  void TearDown() override { remove_tree(dir_); }

  std::string path(const std::string& name) const { return dir_ + "/" + name; }

  void write_plain(const std::string& name, const Bytes& bytes) const {
    std::ofstream out(path(name), std::ios::binary);
    out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
    ASSERT_TRUE(out.good());
  }
  void write_gz(const std::string& name, const Bytes& bytes) const {
    gzFile out = gzopen(path(name).c_str(), "wb");
    ASSERT_NE(out, nullptr);
    ASSERT_EQ(gzwrite(out, bytes.data(), static_cast<unsigned>(bytes.size())), static_cast<int>(bytes.size()));
    ASSERT_EQ(gzclose(out), Z_OK);
  }
  // A valid training pair: 3 images, labels 0, 9, 4.
  void write_train_pair() const {
    write_plain("train-images-idx3-ubyte", images_file(3));
    write_plain("train-labels-idx1-ubyte", labels_file({0, 9, 4}));
  }

  // Loading must fail with a ddp::Error whose message names `file` and contains `expected`.
  void expect_error(ddpw::Split split, const std::string& file, const std::string& expected) const {
    try {
      ddpw::load_idx_dataset(dir_, split, 0.5, 0.25);
      ADD_FAILURE() << "no error; expected one about " << file;
    } catch (const ddp::Error& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find(file), std::string::npos) << "message does not name " << file << ": " << what;
      EXPECT_NE(what.find(expected), std::string::npos) << "message lacks '" << expected << "': " << what;
      EXPECT_EQ(what.find('\n'), std::string::npos) << "message is not one line: " << what;
      EXPECT_NE(e.hint().find("dataset-fashion-mnist"), std::string::npos) << "hint: " << e.hint();
      EXPECT_NE(e.hint().find("--data-dir"), std::string::npos) << "hint: " << e.hint();
      EXPECT_NE(e.hint().find("login node"), std::string::npos) << "hint: " << e.hint();  // no internet there
      EXPECT_EQ(e.hint().find('\n'), std::string::npos) << "hint is not one line: " << e.hint();
    }
  }

  std::string dir_;
};

TEST_F(IdxTest, LoadsPlainFiles) {
  write_train_pair();
  const auto data = ddpw::load_idx_dataset(dir_, ddpw::Split::kTrain, 0.5, 0.25);
  ASSERT_EQ(data.inputs.sizes(), (std::vector<int64_t>{3, 1, 28, 28}));
  EXPECT_EQ(data.inputs.scalar_type(), torch::kUInt8);
  ASSERT_EQ(data.targets.sizes(), (std::vector<int64_t>{3}));
  EXPECT_EQ(data.targets.scalar_type(), torch::kInt64);
  EXPECT_TRUE(torch::equal(data.targets, torch::tensor({0, 9, 4}, torch::kInt64)));
  // Pixel (row r, column c) of image i is (i*7 + r*28 + c) % 256.
  EXPECT_EQ(data.inputs[0][0][0][0].item<int>(), 0);
  EXPECT_EQ(data.inputs[0][0][0][27].item<int>(), 27);
  EXPECT_EQ(data.inputs[1][0][1][0].item<int>(), 7 + 28);
  EXPECT_EQ(data.inputs[2][0][27][27].item<int>(), (14 + 783) % 256);
  EXPECT_DOUBLE_EQ(data.input_scale, 1.0 / 255.0);
  EXPECT_DOUBLE_EQ(data.input_shift, 0.5);
  EXPECT_DOUBLE_EQ(data.input_divide, 0.25);
  EXPECT_EQ(data.size(), 3);
}

TEST_F(IdxTest, LoadsGzippedFiles) {
  write_gz("t10k-images-idx3-ubyte.gz", images_file(5));
  write_gz("t10k-labels-idx1-ubyte.gz", labels_file({1, 2, 3, 4, 5}));
  const auto data = ddpw::load_idx_dataset(dir_, ddpw::Split::kTest, 0.1307, 0.3081);
  ASSERT_EQ(data.inputs.sizes(), (std::vector<int64_t>{5, 1, 28, 28}));
  EXPECT_TRUE(torch::equal(data.targets, torch::tensor({1, 2, 3, 4, 5}, torch::kInt64)));
  EXPECT_EQ(data.inputs[4][0][0][3].item<int>(), 31);
  EXPECT_DOUBLE_EQ(data.input_shift, 0.1307);
}

TEST_F(IdxTest, PrefersThePlainFileOverTheGzippedOne) {
  write_train_pair();
  write_gz("train-images-idx3-ubyte.gz", images_file(2));
  write_gz("train-labels-idx1-ubyte.gz", labels_file({7, 7}));
  const auto data = ddpw::load_idx_dataset(dir_, ddpw::Split::kTrain, 0, 1);
  EXPECT_TRUE(torch::equal(data.targets, torch::tensor({0, 9, 4}, torch::kInt64)));
}

TEST_F(IdxTest, MissingFileIsNamed) {
  write_plain("train-images-idx3-ubyte", images_file(3));
  expect_error(ddpw::Split::kTrain, "train-labels-idx1-ubyte", "not found");
}

TEST_F(IdxTest, MissingDirectoryIsNamed) {
  remove_tree(dir_);
  expect_error(ddpw::Split::kTest, "t10k-images-idx3-ubyte", "data folder " + dir_ + " does not exist");
}

TEST_F(IdxTest, WrongMagicNumber) {
  write_plain("train-images-idx3-ubyte", labels_file({1, 2, 3}));  // a labels file in its place
  write_plain("train-labels-idx1-ubyte", labels_file({0, 9, 4}));
  expect_error(ddpw::Split::kTrain, "train-images-idx3-ubyte", "magic number 2051");
}

TEST_F(IdxTest, WrongMagicNumberInGzippedLabels) {
  write_gz("train-images-idx3-ubyte.gz", images_file(3));
  write_gz("train-labels-idx1-ubyte.gz", labels_file({0, 9, 4}, 0x01080000));  // little-endian
  expect_error(ddpw::Split::kTrain, "train-labels-idx1-ubyte.gz", "magic number 2049");
}

TEST_F(IdxTest, WrongImageSize) {
  write_plain("train-images-idx3-ubyte", images_file(3, 32, 32));
  write_plain("train-labels-idx1-ubyte", labels_file({0, 9, 4}));
  expect_error(ddpw::Split::kTrain, "train-images-idx3-ubyte", "28x28");
}

TEST_F(IdxTest, TruncatedPlainFile) {
  auto bytes = images_file(3);
  bytes.resize(bytes.size() - 100);
  write_plain("train-images-idx3-ubyte", bytes);
  write_plain("train-labels-idx1-ubyte", labels_file({0, 9, 4}));
  expect_error(ddpw::Split::kTrain, "train-images-idx3-ubyte", "truncated");
}

TEST_F(IdxTest, HeaderPromisingMoreThanTheFileHolds) {
  write_plain("train-images-idx3-ubyte", images_file(3, 28, 28, 2051, /*header_count=*/4000000000LL));
  write_plain("train-labels-idx1-ubyte", labels_file({0, 9, 4}));
  expect_error(ddpw::Split::kTrain, "train-images-idx3-ubyte", "truncated");
}

TEST_F(IdxTest, TruncatedGzippedContent) {
  auto bytes = images_file(3);
  bytes.resize(bytes.size() - 1);  // a complete gzip stream of an incomplete IDX file
  write_gz("train-images-idx3-ubyte.gz", bytes);
  write_gz("train-labels-idx1-ubyte.gz", labels_file({0, 9, 4}));
  expect_error(ddpw::Split::kTrain, "train-images-idx3-ubyte.gz", "truncated");
}

TEST_F(IdxTest, CutOffGzipStream) {
  write_gz("train-images-idx3-ubyte.gz", images_file(3));
  write_gz("train-labels-idx1-ubyte.gz", labels_file({0, 9, 4}));
  struct stat info {};
  ASSERT_EQ(::stat(path("train-images-idx3-ubyte.gz").c_str(), &info), 0);
  ASSERT_EQ(::truncate(path("train-images-idx3-ubyte.gz").c_str(), info.st_size / 2), 0);
  expect_error(ddpw::Split::kTrain, "train-images-idx3-ubyte.gz", "images");
}

TEST_F(IdxTest, ExtraBytesAfterTheData) {
  auto bytes = labels_file({0, 9, 4});
  bytes.push_back(1);
  write_plain("train-images-idx3-ubyte", images_file(3));
  write_plain("train-labels-idx1-ubyte", bytes);
  expect_error(ddpw::Split::kTrain, "train-labels-idx1-ubyte", "longer than its header");
}

TEST_F(IdxTest, ImageAndLabelCountsMustAgree) {
  write_plain("train-images-idx3-ubyte", images_file(3));
  write_plain("train-labels-idx1-ubyte", labels_file({0, 9}));
  expect_error(ddpw::Split::kTrain, "train-images-idx3-ubyte", "3 images but");
  expect_error(ddpw::Split::kTrain, "train-labels-idx1-ubyte", "2 labels");
}

TEST_F(IdxTest, LabelOutsideTheTenClasses) {
  write_plain("train-images-idx3-ubyte", images_file(3));
  write_plain("train-labels-idx1-ubyte", labels_file({0, 10, 4}));
  expect_error(ddpw::Split::kTrain, "train-labels-idx1-ubyte", "label 10");
}

// The real thing, when installed (apt-get install dataset-fashion-mnist, or a copy of its files in
// the folder DDPW_FASHION_MNIST names, as the integration tests take it).
TEST(IdxFashionMnist, LoadsTheInstalledDataset) {
  const char* copy = std::getenv("DDPW_FASHION_MNIST");
  const std::string dir = copy && *copy ? copy : "/usr/share/datasets/fashion-mnist";
  if (!exists(dir + "/train-images-idx3-ubyte.gz") && !exists(dir + "/train-images-idx3-ubyte"))
    GTEST_SKIP() << "Fashion-MNIST is not installed in " << dir;
  const auto start = std::chrono::steady_clock::now();
  const auto train = ddpw::load_idx_dataset(dir, ddpw::Split::kTrain, 0.2860, 0.3530);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const auto test = ddpw::load_idx_dataset(dir, ddpw::Split::kTest, 0.2860, 0.3530);
  ASSERT_EQ(train.inputs.sizes(), (std::vector<int64_t>{60000, 1, 28, 28}));
  ASSERT_EQ(test.inputs.sizes(), (std::vector<int64_t>{10000, 1, 28, 28}));
  // Fashion-MNIST is balanced: 6000 training and 1000 test images per class.
  EXPECT_TRUE(torch::equal(torch::bincount(train.targets), torch::full({10}, 6000, torch::kInt64)));
  EXPECT_TRUE(torch::equal(torch::bincount(test.targets), torch::full({10}, 1000, torch::kInt64)));
  // Its published training mean is 0.2860 (of pixels scaled to [0, 1]).
  const double mean = train.inputs.to(torch::kFloat64).mean().item<double>() / 255.0;
  EXPECT_NEAR(mean, 0.2860, 5e-4);
  RecordProperty("train_load_seconds", std::to_string(seconds));
  std::printf("# 60000 training images loaded in %.3f s\n", seconds);
  EXPECT_LT(seconds, 10.0) << "loading should take a fraction of a second";
}

}  // namespace
