// The weights bridge to Python (ddp/weights_io.h, ddp/torch_pickle.h): export and import round
// trip; files that Python's torch.save really wrote (tests/data) load, OrderedDict and all; every
// bad file is refused with a message that names the problem, and leaves the model as it was.
// (tests/integration/python_bridge_*.sh run the real Python on both sides.)
#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <torch/torch.h>

#include <caffe2/serialize/inline_container.h>

#include <fstream>
#include <iterator>
#include <sstream>

#include "course/models.h"
#include "ddp/error.h"
#include "ddp/files.h"
#include "ddp/torch_pickle.h"
#include "ddp/weights_io.h"

// The tests too: a TEST_F outside would derive from a class of this file only (-Wsubobject-linkage).
namespace {

class WeightsIo : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmp[] = "/tmp/ddpw-weights-XXXXXX";
    ASSERT_NE(::mkdtemp(tmp), nullptr);
    dir_ = tmp;
  }
  void TearDown() override { ddp::remove_tree(dir_); }

  std::string path(const std::string& name) const { return dir_ + "/" + name; }
  static void write(const std::string& file, const std::string& bytes) {
    std::ofstream(file, std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  }
  static std::string read(const std::string& file) {
    std::ifstream in(file, std::ios::binary);
    return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  }

  std::string dir_;
};

std::shared_ptr<ddpw::MnistCnn> seeded_cnn(uint64_t seed) {
  torch::manual_seed(seed);
  return std::make_shared<ddpw::MnistCnn>();
}

// A copy of every tensor, to show that a refused import changed nothing.
std::vector<torch::Tensor> copy_of(torch::nn::Module& model) {
  std::vector<torch::Tensor> out;
  for (const auto& [name, t] : ddp::state_dict(model)) out.push_back(t.detach().clone());
  return out;
}

bool same(torch::nn::Module& model, const std::vector<torch::Tensor>& before) {
  const auto now = ddp::state_dict(model);
  for (size_t i = 0; i < now.size(); ++i)
    if (!torch::equal(now[i].second, before[i])) return false;
  return now.size() == before.size();
}

// Python's pickle.dumps(x, protocol=2) of a few things that are not state_dicts, in hex.
const char* const kPickleOfDictOfList =  // {"a": [1, 2]}
    "80 02 7d 71 00 58 01 00 00 00 61 71 01 5d 71 02 28 4b 01 4b 02 65 73 2e";
const char* const kPickleOfOsSystem = "80 02 63 70 6f 73 69 78 0a 73 79 73 74 65 6d 0a 71 00 2e";  // os.system
const char* const kPickleOfList = "80 02 5d 71 00 2e";                                             // []
const char* const kPickleOfCheckpoint =                                                            // {"model": {}}
    "80 02 7d 71 00 58 05 00 00 00 6d 6f 64 65 6c 71 01 7d 71 02 73 2e";

std::string from_hex(const char* hex) {
  std::string out;
  std::istringstream in(hex);
  for (unsigned byte; in >> std::hex >> byte;) out.push_back(static_cast<char>(byte));
  return out;
}

std::string fixture(const std::string& name) {
  std::ifstream in(std::string(DDPW_TEST_DATA_DIR) + "/" + name, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

// Runs `f`, expecting a ddp::Error whose message and hint contain every one of `parts`.
template <typename F>
void expect_error(F f, const std::vector<std::string>& parts) {
  try {
    f();
    ADD_FAILURE() << "no error";
  } catch (const ddp::Error& e) {
    const std::string text = e.message() + " (hint: " + e.hint() + ")";
    for (const auto& part : parts) EXPECT_NE(text.find(part), std::string::npos) << text;
    EXPECT_FALSE(e.hint().empty()) << text;
  }
}

TEST_F(WeightsIo, ExportThenImportGivesTheSameWeights) {
  auto trained = seeded_cnn(1), fresh = seeded_cnn(2);
  ASSERT_FALSE(same(*fresh, copy_of(*trained)));
  ddp::export_weights(path("w.pt"), *trained);
  ddp::import_weights(path("w.pt"), *fresh);
  EXPECT_TRUE(same(*fresh, copy_of(*trained)));

  struct stat info {};
  ASSERT_EQ(::stat(path("w.pt").c_str(), &info), 0);
  EXPECT_EQ(info.st_mode & 0777, 0600u) << "readable by the user only, as the snapshots";
  EXPECT_FALSE(ddp::path_exists(path("w.pt.tmp." + std::to_string(::getpid())))) << "temp file left behind";
}

// load_state_dict: a TensorDict (FSDP's gathered full_state_dict, ddp::state_dict of a twin) into a
// fresh model; one that does not fit names the tensors and loads nothing.
TEST_F(WeightsIo, LoadStateDictTakesADictAndRefusesOneThatDoesNotFit) {
  auto trained = seeded_cnn(1), fresh = seeded_cnn(2);
  ddp::load_state_dict(*fresh, ddp::state_dict(*trained));
  EXPECT_TRUE(same(*fresh, copy_of(*trained)));

  auto other = seeded_cnn(3);
  const auto before = copy_of(*other);
  ddp::TensorDict wrong = ddp::state_dict(*trained);
  wrong.front().second = torch::zeros({2, 2});
  wrong.pop_back();
  try {
    ddp::load_state_dict(*other, wrong, "the gathered state_dict");
    ADD_FAILURE() << "a dict that does not fit was loaded";
  } catch (const ddp::WeightsMismatchError& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("the gathered state_dict does not fit"), std::string::npos) << message;
    EXPECT_NE(message.find("conv1.weight has shape [2, 2] in the dict"), std::string::npos) << message;
    EXPECT_NE(message.find("missing fc2.bias"), std::string::npos) << message;
  }
  EXPECT_TRUE(same(*other, before));
}

TEST_F(WeightsIo, TensorDictKeepsOrderDtypesShapesAndValues) {
  const ddp::TensorDict in = {
      {"z.first", torch::arange(6, torch::kFloat32).reshape({2, 3}).t()},  // a view, not contiguous
      {"a.double", torch::tensor({1.5, -2.25}, torch::kFloat64)},
      {"m.count", torch::tensor(int64_t{7})},  // 0-dim
      {"h.half", torch::ones({3}, torch::kHalf)},
      {"b.mask", torch::tensor({true, false})},
      {"e.empty", torch::empty({0, 4})},
  };
  const auto out = ddp::tensor_dict_from_bytes(ddp::tensor_dict_to_bytes(in), "round trip");
  ASSERT_EQ(out.size(), in.size());
  for (size_t i = 0; i < in.size(); ++i) {
    EXPECT_EQ(out[i].first, in[i].first);
    EXPECT_EQ(out[i].second.scalar_type(), in[i].second.scalar_type()) << in[i].first;
    EXPECT_TRUE(torch::equal(out[i].second, in[i].second)) << in[i].first;
  }
}

// Files Python's torch.save(model.state_dict(), path) wrote (tests/data/README.md): an OrderedDict
// with _metadata, which LibTorch's own torch::pickle_load cannot read.
TEST_F(WeightsIo, ReadsWhatPythonTorchSaveWrote) {
  for (const std::string name : {"torch_save_linear.pth", "torch_save_linear_protocol4.pth"}) {
    ddpw::LinearRegressor model(20);
    write(path(name), fixture(name));
    ASSERT_GT(read(path(name)).size(), 1000u) << "fixture missing: " << name;
    ddp::import_weights(path(name), model);
    const auto weights = ddp::state_dict(model);
    ASSERT_EQ(weights.size(), 2u);
    EXPECT_EQ(weights[0].first, "fc.weight");
    EXPECT_TRUE(torch::equal(weights[0].second, torch::arange(20, torch::kFloat32).reshape({1, 20}) / 10)) << name;
    EXPECT_TRUE(torch::equal(weights[1].second, torch::full({1}, -0.5f))) << name;
  }
}

TEST_F(WeightsIo, BadFilesAreRefusedAndTheModelIsLeftAsItWas) {
  auto model = seeded_cnn(3);
  const auto before = copy_of(*model);
  auto refuse = [&](const std::string& name, const std::string& bytes, const std::vector<std::string>& parts) {
    SCOPED_TRACE(name);
    write(path(name), bytes);
    expect_error([&] { ddp::import_weights(path(name), *model); }, parts);
    EXPECT_TRUE(same(*model, before)) << "a refused file changed the model";
  };
  const std::string python_linear = fixture("torch_save_linear.pth");
  ASSERT_FALSE(python_linear.empty());

  refuse("empty.pt", "", {"is empty"});
  refuse("text.pt", "conv1.weight = 1\n", {"does not start like a zip archive"});
  refuse("pickle.pt", from_hex(kPickleOfDictOfList), {"plain Python pickle"});
  refuse("truncated.pt", python_linear.substr(0, python_linear.size() / 2), {"truncated or damaged"});
  refuse("snapshot.pt", std::string("DDPWSNAP") + std::string(40, '\0'), {"training snapshot", "model_weights"});
  expect_error([&] { ddp::import_weights(path("no-such-file.pt"), *model); }, {"does not exist"});

  // A state_dict of another model: every CNN key is missing, the linear ones are unexpected.
  write(path("linear.pt"), python_linear);
  expect_error([&] { ddp::import_weights(path("linear.pt"), *model); },
               {"does not fit", "missing conv1.weight [32, 1, 3, 3]", "unexpected fc.bias [1]", "nothing was loaded"});
  EXPECT_TRUE(same(*model, before));

  // The right keys, one shape wrong, one dtype wrong: both named; the other tensors untouched too.
  auto tensors = ddp::state_dict(*seeded_cnn(4));
  for (auto& [name, t] : tensors) {
    if (name == "fc2.weight") t = torch::zeros({11, 128});
    if (name == "fc1.bias") t = t.to(torch::kFloat64);
  }
  refuse("shapes.pt", ddp::tensor_dict_to_bytes(tensors),
         {"fc2.weight has shape [11, 128] in the file, [10, 128] in the model",
          "fc1.bias is float64 in the file, float32 in the model"});
}

// The pickle of anything but a dict of tensors is refused before any object is built.
TEST_F(WeightsIo, OnlyWhatAStateDictHoldsIsUnpickled) {
  auto archive_with = [](const std::string& pickle) {  // torch.save's zip around a given pickle
    std::string out;
    caffe2::serialize::PyTorchStreamWriter writer([&](const void* data, size_t n) {
      out.append(static_cast<const char*>(data), n);
      return n;
    });
    writer.writeRecord("data.pkl", pickle.data(), pickle.size());
    writer.writeEndOfFile();
    return out;
  };
  auto unpickle = [&](const char* hex) { ddp::tensor_dict_from_bytes(archive_with(from_hex(hex)), "f"); };
  expect_error([&] { unpickle(kPickleOfOsSystem); }, {"posix.system"});
  expect_error([&] { unpickle(kPickleOfList); }, {"holds a list, not a state_dict"});
  expect_error([&] { unpickle(kPickleOfCheckpoint); }, {"'model': a dict, not a tensor", "checkpoint['model']"});
  expect_error([&] { unpickle(kPickleOfDictOfList); }, {"'a': a list, not a tensor"});
}

}  // namespace
